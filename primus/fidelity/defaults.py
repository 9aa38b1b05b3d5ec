"""One stack per source for the settings a published run does not state.

Published runs state their layout but rarely everything the step time and the peak depend on:
recompute, the FP8 scaling recipe, the gradient-reduction dtype, communication overlap, the MoE
dispatcher, fused kernels. Guessing per row would fit the noise, so each *source* maps to one stack
release (`stacks/NAME.yaml`, `primus.stacks.stack_of_source`): that framework's settings in that
release, each with its source, applied identically to every row of the source and recorded in the
result. A row's own cells always win. The table lives in `stacks/`, not here: `SourceRule` is the
view `validate` needs of one resolved stack.

When the stack's recompute does not fit a run that ran, `validate` escalates it (none, selective,
full recompute of the fewest layers per chunk, then all of them) and records the change in the row's
`escalated` list, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from primus.stacks.apply import main_grads_dtype, setting_keys
from primus.stacks.core import Stack, catalog_stacks, load_stack_file, resolve_stack, stack_of_source

#: Recompute tried in order when the stack's setting does not fit (then full recompute of 1, 2, ...
#: layers per chunk by Megatron's block method, then all layers).
RECOMPUTE_LADDER: tuple[str, ...] = ("none", "selective")


@dataclass(frozen=True)
class SourceRule:
    """The settings of one stack release, as `validate` applies them to a source's rows."""

    stack: Stack

    @property
    def name(self) -> str:
        return self.stack.label

    @property
    def evidence(self) -> str:
        return self.stack.release_source

    @property
    def framework(self) -> str:
        return str(self.stack["framework"])

    @property
    def kernels(self) -> str | None:
        """The profile's `stacks.<name>` section (None: Megatron-Core with Transformer Engine)."""
        return self.stack.kernel_profile

    @property
    def sharding(self) -> str:
        return str(self.stack["sharding"])

    @property
    def recompute(self) -> str:
        return str(self.stack["recompute"])

    @property
    def vp(self) -> int:
        return int(self.stack["vp"])

    @property
    def sp_with_tp(self) -> bool:
        return bool(self.stack["sequence_parallel"] == "tp>1")

    @property
    def etp_is_tp(self) -> bool:
        return bool(self.stack["expert_tp"] == "tp")

    @property
    def fp8_recipe(self) -> str:
        return str(self.stack["fp8_recipe"])

    @property
    def eager_cross_entropy(self) -> bool:
        return bool(self.stack["cross_entropy"] == "eager")

    def describe(self) -> str:
        """One line: what this stack assumes for unstated settings."""
        v = self.stack.values
        disp = v["moe_dispatcher"] + (f" ({v['moe_dispatcher_scaleup']} on NVL72-class domains)"
                                      if v.get("moe_dispatcher_scaleup") else "")
        return (f"{self.name}: framework {v['framework']}; sharding {v['sharding']}; recompute {v['recompute']}; "
                f"vp {v['vp']}; sp {'= tp > 1' if self.sp_with_tp else 'off'}; fp8 recipe {v['fp8_recipe']}; main "
                f"grads {v['main_grads_dtype']}; parameter/optimizer state {v['optimizer_state_dtype']}; TP-comm "
                f"overlap {'on' if v['tp_comm_overlap'] else 'off'}; MoE dispatcher {disp}, all-to-all overlap "
                f"{'on' if v['moe_a2a_overlap'] else 'off'}"
                f"{'; MoE permutation unfused' if v.get('moe_permute_fusion') is False else ''}; flash attention "
                f"{'on' if v['flash_attention'] else 'off'}; cross-entropy {v['cross_entropy']}; expert TP "
                f"{'= TP' if self.etp_is_tp else '1'}; pipeline split {v['pipeline_split']}; kernels "
                f"{v['kernels']}; allocator expandable segments "
                f"{'on' if v['allocator_expandable_segments'] else 'off'}")

    def job_keys(self, *, tp: int, scaleup_domain: int, is_moe: bool, precision: str = "") -> dict[str, Any]:
        """The job keys this stack sets (overlap, kernels, optimizer, MoE, framework); the fp8 recipe
        is the caller's (a row may state it). The main-gradient dtype follows `precision` as a job file's does
        (`primus.stacks.apply.main_grads_dtype`)."""
        keys = setting_keys(self.stack, precision="", scaleup_domain=scaleup_domain, tp=tp, is_moe=is_moe)
        keys["optimizer"]["main_grads_dtype"] = main_grads_dtype(self.stack, precision)
        if not is_moe:
            keys.pop("moe")
        return keys


def rule_for(source: str, published: str | None = None, flags: frozenset[str] = frozenset()) -> SourceRule:
    """The stack release a source (or, by its flags, a recipe of a collection) ran on
    (`primus.stacks.stack_of_source`)."""
    return SourceRule(stack_of_source(source, published, flags))


def all_rules() -> list[SourceRule]:
    """Every described release of every stack (for the accuracy page)."""
    out = []
    for name in catalog_stacks():
        for rel in load_stack_file(name).releases:
            out.append(SourceRule(resolve_stack(f"{name}@{rel.release}")))
    return out
