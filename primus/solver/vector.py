"""Enumerate every legal layout at once with numpy: the fast path behind `primus enumerate`.

Candidates are built axis by axis (TP×CP×PP → VP → EP×ETP → MBS → SP → recompute → sharding) and
each rule is applied as soon as every name it reads is bound (the rule structure), so illegal partial
layouts are dropped before they multiply. Memory comes last: the ledger's tables are gathered per
distinct key and combined with the ledger's own `combine`, then the memory rules filter. The same rules
compile into the CP-SAT model; tests check that both engines accept exactly the same layouts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from primus.memory.ledger import BREAKDOWN_KEYS, combine, communicators
from primus.memory.shapes import StageShape
from primus.memory.units import ActUnits, ParamUnits
from primus.parallel import RECOMPUTES, SHARDINGS, Layout
from primus.rules.expr import names
from primus.rules.vector import evaluate_vector
from primus.solver.ruleset import RuleSet
from primus.solver.space import MEMORY_DOCS
from primus.solver.tables import ACT_FIELDS, PARAM_FIELDS, SHAPE_FIELDS, LedgerTables, gather

AXIS_ORDER = ("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")


@dataclass
class Candidates:
    """Columns of the surviving layouts (axes, derived sizes and, once computed, memory)."""

    cols: dict[str, np.ndarray]

    @property
    def n(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def take(self, mask_or_index: np.ndarray) -> Candidates:
        return Candidates({k: v[mask_or_index] for k, v in self.cols.items()})

    def layout(self, i: int) -> Layout:
        c = self.cols
        n = int(c["recompute_num_layers"][i])
        return Layout(
            tp=int(c["tp"][i]), pp=int(c["pp"][i]), vp=int(c["vp"][i]), cp=int(c["cp"][i]), ep=int(c["ep"][i]),
            etp=int(c["etp"][i]), dp=int(c["dp"][i]), mbs=int(c["mbs"][i]), sp=bool(c["sp"][i]),
            recompute=RECOMPUTES[int(c["recompute"][i])], sharding=SHARDINGS[int(c["sharding"][i])],
            recompute_num_layers=n if n > 0 else None,
            schedule="interleaved" if int(c["vp"][i]) > 1 else "1f1b",
        )

    def canonical_order(self) -> np.ndarray:
        keys = [self.cols[k] for k in reversed(AXIS_ORDER)]
        return np.lexsort(keys)


def _product(cands: Candidates, name_values: dict[str, np.ndarray]) -> Candidates:
    """Cartesian product of the rows with a small table of new columns (all same length)."""
    k = len(next(iter(name_values.values())))
    n = cands.n
    out = {key: np.repeat(v, k) for key, v in cands.cols.items()}
    for key, v in name_values.items():
        out[key] = np.tile(v, n)
    return Candidates(out)


class Enumerator:
    """Staged vectorised enumeration of one job's legal layouts under a rule set."""

    def __init__(self, tables: LedgerTables, ruleset: RuleSet, pins: dict[str, Any]) -> None:
        self.tables = tables
        self.space = tables.space
        self.job = tables.job
        self.ruleset = ruleset
        self.pins = pins
        self.facts = {k: (np.bool_(v) if isinstance(v, bool) else np.int64(v)) for k, v in self.space.facts.items()}
        self.pending = [(r, e, names(e)) for r, e in ruleset.hard()]
        self.rejected: dict[str, int] = {}

    # ---- rule application ----

    def _apply_rules(self, cands: Candidates, final: bool = False) -> Candidates:
        bound = set(cands.cols) | set(self.facts)
        keep: list[Any] = []
        mask = np.ones(cands.n, dtype=bool)
        env = {**self.facts, **cands.cols}
        for rule, expr, used in self.pending:
            if used <= bound:
                ok = evaluate_vector(expr, env, cands.n)
                self.rejected[rule.id] = self.rejected.get(rule.id, 0) + int(np.count_nonzero(mask & ~ok))
                mask &= ok
            elif final:
                raise AssertionError(f"rule {rule.id} reads unbound names {sorted(used - bound)}")
            else:
                keep.append((rule, expr, used))
        self.pending = keep
        return cands.take(mask) if not mask.all() else cands

    def _pin(self, cands: Candidates, axis: str, column: str | None = None) -> Candidates:
        if axis not in self.pins:
            return cands
        value = self.pins[axis]
        return cands.take(cands.cols[column or axis] == value)

    # ---- stages ----

    def run(self, with_memory: bool = True) -> Candidates:
        s = self.space
        world = s.world
        tp, cp, pp = (a.reshape(-1) for a in np.meshgrid(s.tp_values, s.cp_values, s.pp_values, indexing="ij"))
        ok = world % (tp * cp * pp) == 0
        cands = Candidates({"tp": tp[ok], "cp": cp[ok], "pp": pp[ok]})
        cands.cols["dp"] = world // (cands.cols["tp"] * cands.cols["cp"] * cands.cols["pp"])
        for axis in ("tp", "cp", "pp", "dp"):
            cands = self._pin(cands, axis)
        cands = self._apply_rules(cands)
        cands = self._stage_vp(cands)
        cands = self._stage_experts(cands)
        cands = self._stage_mbs(cands)
        cands = self._stage_flags(cands)
        if with_memory:
            cands = self._stage_memory(cands)
            cands = self._apply_rules(cands, final=True)
        return cands

    def _stage_vp(self, cands: Candidates) -> Candidates:
        pairs = self.space.split_pairs
        parts = []
        for pp in np.unique(cands.cols["pp"]):
            sub = cands.take(cands.cols["pp"] == pp)
            vps = np.array([vp for (p, vp) in pairs if p == pp], dtype=np.int64)
            oks = np.array([pairs[(int(pp), int(vp))] for vp in vps], dtype=bool)
            if len(vps) == 0:
                continue
            parts.append(_product(sub, {"vp": vps, "pipeline_split_ok": oks}))
        cands = _concat(parts, cands, {"vp": np.int64, "pipeline_split_ok": bool})
        cands = self._pin(cands, "vp")
        return self._apply_rules(cands)

    def _stage_experts(self, cands: Candidates) -> Candidates:
        ep, etp = (a.reshape(-1) for a in np.meshgrid(self.space.ep_values, self.space.etp_values, indexing="ij"))
        cands = _product(cands, {"ep": ep, "etp": etp})
        world = self.space.world
        denom = cands.cols["pp"] * cands.cols["ep"] * cands.cols["etp"]
        cands = cands.take(world % denom == 0)
        cands.cols["edp"] = world // (cands.cols["pp"] * cands.cols["ep"] * cands.cols["etp"])
        for axis in ("ep", "etp"):
            cands = self._pin(cands, axis)
        return self._apply_rules(cands)

    def _stage_mbs(self, cands: Candidates) -> Candidates:
        gbs = self.job.spec.global_batch_size
        cands = _product(cands, {"mbs": np.array(self.space.mbs_values, dtype=np.int64)})
        per_step = cands.cols["mbs"] * cands.cols["dp"]
        cands = cands.take(gbs % per_step == 0)
        cands.cols["num_microbatches"] = gbs // (cands.cols["mbs"] * cands.cols["dp"])
        cands = self._pin(cands, "mbs")
        return self._apply_rules(cands)

    def _stage_flags(self, cands: Candidates) -> Candidates:
        cands = _product(cands, {"sp": np.array([False, True])})
        cands = cands.take(~(cands.cols["sp"] & (cands.cols["tp"] == 1)))
        if "sp" in self.pins:
            want = bool(self.pins["sp"])
            cands = cands.take((cands.cols["sp"] == want) | (cands.cols["tp"] == 1) & ~cands.cols["sp"])
        cands = self._apply_rules(cands)
        n_values = self.space.recompute_layer_values
        rows: dict[str, list[int]] = {"recompute": [], "recompute_num_layers": []}
        for i, r in enumerate(RECOMPUTES):
            for n in (n_values if (r == "full" and n_values) else [0]):
                rows["recompute"].append(i)
                rows["recompute_num_layers"].append(n)
        cands = _product(cands, {k: np.array(v, dtype=np.int64) for k, v in rows.items()})
        if "recompute" in self.pins:
            cands = cands.take(cands.cols["recompute"] == RECOMPUTES.index(self.pins["recompute"]))
        for i, r in enumerate(RECOMPUTES):
            cands.cols[f"recompute_{r}"] = cands.cols["recompute"] == i
        cands = self._apply_rules(cands)
        cands = _product(cands, {"sharding": np.arange(len(SHARDINGS), dtype=np.int64)})
        if "sharding" in self.pins:
            want_s = "dist_opt" if self.pins["sharding"] == "zero1" else self.pins["sharding"]
            cands = cands.take(cands.cols["sharding"] == SHARDINGS.index(want_s))
        for i, sh in enumerate(SHARDINGS):
            cands.cols[f"sharding_{sh}"] = cands.cols["sharding"] == i
        return self._apply_rules(cands)

    def _stage_memory(self, cands: Candidates) -> Candidates:
        add_memory_columns(self.tables, cands)
        return cands


def _concat(parts: list[Candidates], like: Candidates, new: dict[str, Any]) -> Candidates:
    if not parts:
        cols = {k: v[:0] for k, v in like.cols.items()}
        for k, dt in new.items():
            cols[k] = np.zeros(0, dtype=dt)
        return Candidates(cols)
    return Candidates({k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols})


def _view(cls: type, names_: tuple[str, ...], table: np.ndarray) -> Any:
    return cls(**{name: table[:, i] for i, name in enumerate(names_)})


def add_memory_columns(tables: LedgerTables, cands: Candidates) -> None:
    """Per-slot ledger bytes for every candidate, then peak/first/last and the breakdown maxima."""
    c = cands.cols
    n = cands.n
    model = tables.model
    if n == 0:
        for name in (*MEMORY_DOCS, "peak_stage"):
            c[name] = np.zeros(0, dtype=np.int64)
        return
    full = c["recompute"] == RECOMPUTES.index("full")
    pipe_keys = np.stack([c["pp"], c["vp"], c["num_microbatches"], full.astype(np.int64),
                          c["recompute_num_layers"]], axis=1)
    num_slots = tables.num_slots

    def shape_row(pp: int, vp: int, m: int, is_full: int, nl: int) -> list[int]:
        shapes = tables.shapes(pp, vp, m, "full" if is_full else "none", nl if nl > 0 else None)
        return [getattr(s, f) for s in shapes for f in SHAPE_FIELDS]

    shape_table = gather(pipe_keys, None, shape_row, num_slots * len(SHAPE_FIELDS))
    param_keys = np.stack([c["tp"], c["ep"], c["etp"]], axis=1)
    pu_table = gather(param_keys, None, lambda tp, ep, etp: [getattr(tables.params(tp, ep, etp), f)
                                                             for f in PARAM_FIELDS], len(PARAM_FIELDS))
    act_keys = np.stack([c["tp"], c["cp"], c["sp"].astype(np.int64), c["mbs"], c["etp"], c["recompute"]], axis=1)
    au_table = gather(act_keys, None, lambda tp, cp, sp, mbs, etp, r: [
        getattr(tables.acts(tp, cp, bool(sp), mbs, etp, RECOMPUTES[r]), f) for f in ACT_FIELDS], len(ACT_FIELDS))
    pu = _view(ParamUnits, PARAM_FIELDS, pu_table)
    au = _view(ActUnits, ACT_FIELDS, au_table)
    comm = communicators(c["tp"], c["cp"], c["dp"], c["pp"], c["ep"], c["etp"], c["edp"], model.is_moe) \
        * tables.comm_figure()
    mem = tables.memory
    slot_bytes = np.zeros((num_slots, n), dtype=np.int64)
    slot_parts = {k: np.zeros((num_slots, n), dtype=np.int64) for k in BREAKDOWN_KEYS}
    width = len(SHAPE_FIELDS)
    for s in range(num_slots):
        shape = _view(StageShape, SHAPE_FIELDS, shape_table[:, s * width:(s + 1) * width])
        for k, sharding in enumerate(SHARDINGS):
            rows = c["sharding"] == k
            if not rows.any():
                continue
            sub_shape = StageShape(**{f: getattr(shape, f)[rows] for f in SHAPE_FIELDS})
            sub_pu = ParamUnits(**{f: getattr(pu, f)[rows] for f in PARAM_FIELDS})
            sub_au = ActUnits(**{f: getattr(au, f)[rows] for f in ACT_FIELDS})
            result = combine(sub_shape, sub_pu, sub_au, mem.widths, mem.numerics, sharding,
                             c["dp"][rows] * c["cp"][rows], c["edp"][rows], comm[rows])
            slot_bytes[s, rows] = result.bytes
            for key in BREAKDOWN_KEYS:
                slot_parts[key][s, rows] = result.breakdown[key]
    c["peak_bytes"] = slot_bytes.max(axis=0)
    c["first_stage_bytes"] = slot_bytes[0]
    if tables.options.layout is not None:
        last_slot = c["pp"] - 1
        c["last_stage_bytes"] = slot_bytes[last_slot, np.arange(n)]
    else:
        c["last_stage_bytes"] = slot_bytes[num_slots - 1]
    for key in BREAKDOWN_KEYS:
        c[f"{key}_bytes"] = slot_parts[key].max(axis=0)
    stages = np.array([tables.slot_stages(int(p)) for p in c["pp"]], dtype=np.int64) if n else np.zeros((0, 3))
    c["peak_stage"] = stages[np.arange(n), slot_bytes.argmax(axis=0)]


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))
