"""Jobs the framework itself refuses at start-up, whatever the layout: bad input at load (one line, exit
2), so that `fit` never proves them and `export` never writes them.

Each check is a framework assertion on the job's own options (the model, the precision, the MoE
implementation), not on a parallel axis the search could change; assertions that depend on an axis are
rules in `constraints/`.
"""

from __future__ import annotations

from typing import Final

from primus.errors import InputError
from primus.specs.job import JobSpec
from primus.specs.model import ModelSpec
from primus.stacks.core import Stack

#: The first Megatron-LM release label (month) whose validate_args accepts fp16 MoE: NVIDIA/Megatron-LM
#: 4193f3aa9b "remove fp16 assert in moe_grouped_gemm & EP (#2495)", 2025-12-22, first tagged core_v0.16.0.
#: Before it, megatron/training/arguments.py asserts "Currently GroupedGEMM for MoE only supports bf16
#: dtype." under --moe-grouped-gemm and "Expert parallelism is not supported with fp16 training." with
#: EP > 1 (000c4ac, core_r0.14, lines 876-877 and 1041-1042). Megatron-Core without Megatron-LM's
#: launcher (NeMo, Megatron-Bridge) never ran those asserts, and AMD Primus pins a Megatron after the fix.
MEGATRON_LM_FP16_MOE_FROM: Final = "2025.12"


def check_framework_asserts(spec: JobSpec, model: ModelSpec, stack: Stack, where: str) -> None:
    """Refuse a job whose options the framework asserts against (see the module docstring)."""
    if not model.is_moe:
        return
    moe = spec.moe
    if moe.grouped_gemm == "legacy" and moe.sync_free:
        # AMD Primus fd1eeab primus/backends/megatron/patches/args/rocm_arg_validation.py lines 190-205:
        # sync-free stage 2 or 3 requires use_turbo_grouped_gemm, which raises "incompatible" beside
        # moe_use_legacy_grouped_gemm (and transformer_engine_spec_provider.py lines 244-246 asserts it)
        raise InputError(where, "moe.grouped_gemm",
                         "legacy cannot run sync-free MoE (moe.sync_free: AMD Primus's stage 2 needs Primus-Turbo's "
                         "grouped GEMM, which Primus refuses beside the legacy one): use grouped_gemm te or drop "
                         "sync_free")
    if moe.grouped_gemm == "legacy" and model.add_bias_linear:
        # NVIDIA/Megatron-LM 000c4ac megatron/core/transformer/moe/experts.py lines 116-118 (GroupedMLP):
        # assert config.add_bias_linear == False, "bias not supported in Grouped GEMM yet"
        raise InputError(where, "moe.grouped_gemm",
                         f"legacy cannot build {model.name}'s expert biases (add_bias_linear): Megatron-Core's "
                         "GroupedMLP asserts add_bias_linear == False; use grouped_gemm te")
    if spec.precision == "fp16" and stack.name == "megatron-lm" and stack.before(MEGATRON_LM_FP16_MOE_FROM):
        raise InputError(where, "precision",
                         f"fp16 with MoE layers is refused by {stack.label}'s Megatron-LM: validate_args asserts "
                         "grouped GEMM only in bf16 and no expert parallelism in fp16 (removed by #2495, "
                         f"Megatron-LM {MEGATRON_LM_FP16_MOE_FROM}, core_v0.16.0): use bf16 or a later release")
