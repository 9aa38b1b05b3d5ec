"""Where the ranks of each parallel group sit: inside one scale-up domain, or spread across several.

Megatron-Core numbers ranks with the fastest-varying axis first; its default `--order` is
"tp-cp-ep-dp-pp". Dense layers use the mesh (TP, CP, DP, PP) and MoE layers re-fold the same ranks as
(ETP, EP, EDP, PP) ("MoE parallel folding", with ETP in TP's place and EP in CP's). A group along some
axes contains the ranks whose other coordinates match; its members' rank numbers tell how many share a
scale-up domain (NVLink / Infinity Fabric) — which decides which links a collective crosses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from primus.parallel import Layout

#: Megatron-Core's default rank order (`--order tp-cp-ep-dp-pp`): TP fastest, then CP, EP, DP, PP.
DEFAULT_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")


@dataclass(frozen=True, slots=True)
class GroupShape:
    """A communication group as the network sees it: `size` ranks, `per_domain` of them in each
    scale-up domain it touches (so size / per_domain domains)."""

    size: int
    per_domain: int

    @property
    def domains(self) -> int:
        return self.size // self.per_domain if self.per_domain else 1

    @property
    def crosses_domains(self) -> bool:
        return self.per_domain < self.size


SINGLE = GroupShape(1, 1)


def _strides(sizes: dict[str, int], order: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    stride = 1
    for axis in order:
        out[axis] = stride
        stride *= sizes.get(axis, 1)
    return out


@lru_cache(maxsize=4096)
def _shape(sizes_key: tuple[tuple[str, int], ...], axes: tuple[str, ...], order: tuple[str, ...],
           domain: int) -> GroupShape:
    """The group along `axes` that holds rank 0: its size and the most of its members in one domain.
    Its rank numbers are every sum of one multiple of each axis's stride (built with numpy, since a
    world group of a frontier cluster has tens of thousands of members)."""
    sizes = dict(sizes_key)
    strides = _strides(sizes, order)
    ranks = np.zeros(1, dtype=np.int64)
    for a in axes:
        ranks = np.add.outer(ranks, np.arange(sizes.get(a, 1), dtype=np.int64) * strides[a]).reshape(-1)
    if ranks.size == 1:
        return SINGLE
    return GroupShape(int(ranks.size), int(np.bincount(ranks // domain).max()))


@dataclass(frozen=True)
class Placement:
    """Group shapes of one layout on one cluster (a rank order is a parameter, Megatron's by default)."""

    layout: Layout
    domain_size: int
    order: tuple[str, ...] = DEFAULT_ORDER

    def _dense_sizes(self) -> tuple[tuple[str, int], ...]:
        lay = self.layout
        return (("tp", lay.tp), ("cp", lay.cp), ("ep", 1), ("dp", lay.dp), ("pp", lay.pp))

    def _expert_sizes(self) -> tuple[tuple[str, int], ...]:
        lay = self.layout
        return (("tp", lay.etp), ("cp", 1), ("ep", lay.ep), ("dp", lay.edp), ("pp", lay.pp))

    def dense(self, *axes: str) -> GroupShape:
        """Shape of a dense-mesh group along `axes` (e.g. "tp"; "dp", "cp" for the optimizer group)."""
        return _shape(self._dense_sizes(), tuple(axes), self.order, self.domain_size)

    def expert(self, *axes: str) -> GroupShape:
        """Shape of an expert-mesh group: "tp" here is ETP, "dp" is expert-DP."""
        return _shape(self._expert_sizes(), tuple(axes), self.order, self.domain_size)

    def neighbours(self, axis: str) -> GroupShape:
        """Point-to-point between consecutive ranks of an axis (PP stages, the CP ring): a pair, in one
        domain when every hop of the ring stays inside one (else the slowest hop sets the pace)."""
        g = self.dense(axis)
        if g.size == 1:
            return SINGLE
        return GroupShape(2, 1 if g.crosses_domains else 2)

    def groups(self) -> dict[str, GroupShape]:
        """The groups the projection uses, by name."""
        return {
            "tp": self.dense("tp"),
            "cp": self.neighbours("cp"),
            "cp_group": self.dense("cp"),
            "dp_cp": self.dense("cp", "dp"),
            "ep": self.expert("ep"),
            "etp": self.expert("tp"),
            "edp": self.expert("dp"),
            "pp": self.neighbours("pp"),
            "pp_group": self.dense("pp"),
            "world": self.dense("tp", "cp", "dp", "pp"),
        }
