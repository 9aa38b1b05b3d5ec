"""AMD Primus-Turbo's MoE switches as settings of a primus job: one reading of them, shared by the Primus
experiment import (`primus.launch.primus_yaml`) and by `validate`'s `options` column
(`primus.fidelity.options`), so that a stage means the same wherever a user states it.

Sources, AMD-AGI/Primus fd1eeabbad15135e3702094087e96142b4b4eacb:
primus/backends/megatron/patches/args/rocm_arg_validation.py `_get_sync_free_moe_options` (stage 1 turns
the fused permutation and the fused router on; stage 2 and 3 also Turbo's DeepEP and grouped GEMM, whose
token counts stay on the device; stage 3 the fused activation) and
primus/backends/megatron/patches/turbo/moe_dispatcher_patches.py (DeepEP makes the dispatcher Megatron's
flex one: moe_enable_deepep, moe_token_dispatcher_type "flex").
"""

from __future__ import annotations

from typing import Any, Final

SYNC_FREE_KEY: Final = "turbo_sync_free_moe_stage"
DEEPEP_KEY: Final = "use_turbo_deepep"
TURBO_KEY: Final = "enable_primus_turbo"
#: Turbo's grouped GEMM, which Primus requires from stage 2 (rocm_arg_validation.py)
TURBO_GROUPED_GEMM_KEY: Final = "use_turbo_grouped_gemm"
#: The stages Primus accepts (its validation raises on anything else).
SYNC_FREE_STAGES: Final = range(4)

#: What each stage turns on that primus has no sourced cost for (kernel choices), beyond what
#: `sync_free_moe` reads.
SYNC_FREE_UNMODELLED: Final = {
    1: ("moe_use_fused_router_with_aux_score",),
    2: ("moe_use_fused_router_with_aux_score", TURBO_GROUPED_GEMM_KEY),
    3: ("moe_use_fused_router_with_aux_score", TURBO_GROUPED_GEMM_KEY, "use_turbo_fused_act_with_probs"),
}


def is_stage(value: Any) -> bool:
    """Whether `value` is a stage Primus accepts: an integer (not a bool) from 0 to 3."""
    return isinstance(value, int) and not isinstance(value, bool) and value in SYNC_FREE_STAGES


def sync_free_moe(stage: int) -> dict[str, Any]:
    """The job's `moe` keys a sync-free stage sets: from 1 the fused permutation; from 2 also the token
    counts kept on the device (`sync_free`) and Turbo's DeepEP, i.e. the flex dispatcher."""
    keys: dict[str, Any] = {}
    if stage >= 1:
        keys["permute_fusion"] = True
    if stage >= 2:
        keys.update(sync_free=True, token_dispatcher="flex")
    return keys
