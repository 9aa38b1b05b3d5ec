"""One documented rule per source for the settings a published run does not state.

Published runs state their layout but rarely everything the step time depends on: recompute, the
FP8 scaling recipe, the gradient-reduction dtype, communication overlap, the MoE dispatcher, fused
kernels. Guessing per row would fit the noise, so each *source* (a framework release) gets one rule:
that framework's defaults in that release, with the evidence for each, applied identically to every
row of the source and recorded in the result (`SourceRule.describe`). A row's own cells always win.

Recompute left empty is the one setting whose default depends on the run: performance recipes pick
the lightest activation recompute that lets the layout fit (NeMo and Megatron-Bridge set none unless
a workload preset lists recompute modules or `recompute_num_layers`, which they then set to the fewest
layers that fit), so an empty cell means "none, else selective, else full recompute of the fewest
layers per model chunk (Megatron's block method), else all of them" — the first the ledger says fits.

`stack` names the kernels a framework runs (a profile's `stacks.<name>` section holds their
efficiencies): None is Megatron-Core with Transformer Engine (cuDNN / FlashAttention-3-class fused
attention on Hopper and later); "pytorch-eager" is PyTorch eager training (FlashAttention-2, one kernel
per elementwise op); "pytorch-compile" is torch.compile'd PyTorch (SDPA's FlashAttention-2 backend,
inductor-fused elementwise kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: Recompute tried in order when a source leaves it unstated and the rule says "lightest that fits"
#: (then full recompute of 1, 2, ... layers per chunk by Megatron's block method, then all layers).
RECOMPUTE_LADDER: tuple[str, ...] = ("none", "selective")

_NEMO_HELPERS = ("NVIDIA/NeMo scripts/performance/helpers.py (set_perf_optimization_configs, "
                 "set_precision_configs)")
_MB_OVERRIDES = "NVIDIA-NeMo/Megatron-Bridge scripts/performance/utils/overrides.py (_set_common_perf_overrides)"
_MB_PRESETS = ("NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/*/*_workload_base_configs.py "
               "(moe_flex_dispatcher_backend='hybridep'/'deepep', moe_a2a_overlap off in most presets)")
_BF16_GRADS = ("NeMo/Megatron-Bridge performance recipes reduce gradients in bf16 (grad_reduce_in_fp32=False, "
               f"{_NEMO_HELPERS}); a DGX Cloud Llama3-8B log's memory_allocated (44.27 GB at 8 GPUs) equals bf16 "
               "weights + bf16 gradients + 12 B/param / 8 of optimizer state")


@dataclass(frozen=True)
class SourceRule:
    """The defaults of one framework release family. `job` keys are merged under the row's own."""

    name: str
    prefixes: tuple[str, ...]
    framework: str  # primus job `framework`: megatron | torchtitan
    evidence: str
    sharding: str = "dist_opt"
    recompute: str = "ladder"  # "ladder" (lightest that fits) or a fixed value
    vp: int = 1
    sp_with_tp: bool = True  # sequence parallel on whenever TP > 1 (NeMo/MB set sequence_parallel = tp > 1)
    fp8_recipe: str = "delayed"
    main_grads_dtype: str = "fp32"
    state_dtype: str = "fp32"  # master parameters and Adam moments (bf16: parameters stored in bf16)
    tp_comm_overlap: bool = False
    moe_a2a_overlap: bool = False
    dispatcher: str = "alltoall"
    dispatcher_scaleup: str | None = None  # dispatcher on NVL72-class hardware (scale-up domain > 8 GPUs)
    flash_attention: bool = True
    cross_entropy_fusion: bool = False
    eager_cross_entropy: bool = False  # PyTorch eager F.cross_entropy (loss not compiled)
    released_before: str | None = None  # "YYYY-MM": the rule covers runs published before this month only
    etp_is_tp: bool = False  # expert TP left empty = TP (Megatron-Core's default before MB presets set 1)
    stack: str | None = None  # software stack (profile `stacks.<name>`); None = Megatron-Core + TE
    grad_reduce_overlap: bool = True
    param_gather_overlap: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)

    def matches(self, source: str, published: str | None = None) -> bool:
        """Whether this rule is the one for `source` (name prefix) published in `published` ("YYYY-MM",
        None when the row does not say): a release-bounded rule needs a date before its bound."""
        s = source.lower()
        if not any(s == p or s.startswith(p) for p in self.prefixes):
            return False
        return self.released_before is None or (published is not None and published < self.released_before)

    def describe(self) -> str:
        """One line: what this rule assumes for unstated settings."""
        rec = ("lightest that fits of none, selective, full block of k layers, full"
               if self.recompute == "ladder" else self.recompute)
        disp = self.dispatcher + (f" ({self.dispatcher_scaleup} on NVL72-class domains)"
                                  if self.dispatcher_scaleup else "")
        return (f"{self.name}: framework {self.framework}; sharding {self.sharding}; recompute {rec}; vp {self.vp}; "
                f"sp {'= tp > 1' if self.sp_with_tp else 'off'}; fp8 recipe {self.fp8_recipe}; main grads "
                f"{self.main_grads_dtype}; parameter/optimizer state {self.state_dtype}; TP-comm overlap "
                f"{'on' if self.tp_comm_overlap else 'off'}; MoE dispatcher "
                f"{disp}, all-to-all overlap {'on' if self.moe_a2a_overlap else 'off'}; flash attention "
                f"{'on' if self.flash_attention else 'off'}; fused cross-entropy "
                f"{'on' if self.cross_entropy_fusion else 'off'}"
                + ("; eager (uncompiled) PyTorch cross-entropy" if self.eager_cross_entropy else "")
                + f"; expert TP {'= TP' if self.etp_is_tp else '1'}; "
                "kernels "
                f"{self.stack or 'Megatron-Core + Transformer Engine'}")

    def job_keys(self, *, tp: int, scaleup_domain: int, is_moe: bool) -> dict[str, Any]:
        """The job keys this rule sets (overlap, kernels, optimizer, MoE, framework)."""
        keys: dict[str, Any] = {
            "framework": self.framework,
            "optimizer": {"main_grads_dtype": self.main_grads_dtype, "main_params_dtype": self.state_dtype,
                          "exp_avg_dtype": self.state_dtype, "exp_avg_sq_dtype": self.state_dtype},
            "overlap": {"grad_reduce": self.grad_reduce_overlap, "param_gather": self.param_gather_overlap,
                        "tp_comm": self.tp_comm_overlap and tp > 1, "moe_a2a": self.moe_a2a_overlap and is_moe},
            "kernels": {"flash_attention": self.flash_attention, "cross_entropy_fusion": self.cross_entropy_fusion,
                        "eager_cross_entropy": self.eager_cross_entropy},
        }
        if is_moe:
            big = scaleup_domain > 8
            keys["moe"] = {"token_dispatcher": (self.dispatcher_scaleup if big and self.dispatcher_scaleup
                                                else self.dispatcher)}
        return keys


MEGATRON_BRIDGE = SourceRule(
    name="Megatron-Bridge performance recipes (25.09-26.x)",
    prefixes=("megatron-bridge", "mbridge"),
    framework="megatron",
    evidence=(f"{_MB_OVERRIDES}: cross_entropy_fusion_impl='te', rope fusion; recompute only where a preset lists "
              f"recompute_modules/recompute_num_layers; {_MB_PRESETS}; {_BF16_GRADS}; TP-comm overlap "
              "(userbuffers) in the Llama/Nemotron recipes with TP > 1; FP8 'CS' (current scaling = tensorwise) is "
              "the recipe named in its performance tables"),
    fp8_recipe="tensorwise",
    main_grads_dtype="bf16",
    tp_comm_overlap=True,
    dispatcher="flex",
    cross_entropy_fusion=True,
)

NEMO = SourceRule(
    name="NeMo 2 / DGX Cloud performance recipes (24.07-25.05)",
    prefixes=("nemo-24", "nemo-25", "nemo-longseq", "dgxc"),
    framework="megatron",
    evidence=(f"{_NEMO_HELPERS}: fp8 recipe 'ds' (delayed scaling) unless given, grad_reduce_in_fp32=False, "
              "cross_entropy_fusion_impl='te', recompute_layers 0 unless a recommended config sets it; "
              "sequence_parallel = tp > 1; TP-comm overlap callback on with TP > 1; "
              "scripts/performance/llm/pretrain_deepseek_v3.py: flex (DeepEP) dispatcher on H100, alltoall on "
              f"Blackwell; {_BF16_GRADS}; expert_tensor_parallel_size unset = tensor_model_parallel_size "
              "(Megatron-Core TransformerConfig default)"),
    fp8_recipe="delayed",
    main_grads_dtype="bf16",
    tp_comm_overlap=True,
    dispatcher="flex",
    dispatcher_scaleup="alltoall",
    cross_entropy_fusion=True,
    etp_is_tp=True,
)

NEMO_AUTOMODEL = SourceRule(
    name="NeMo AutoModel (PyTorch FSDP2 + TE + DeepEP)",
    prefixes=("nemo-automodel", "automodel"),
    framework="torchtitan",
    evidence=("NVIDIA-NeMo/Automodel nemo_automodel/components/distributed/config.py: FSDP2Config defaults to "
              "activation_checkpointing False and MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32); FSDP2 "
              "keeps parameter shards (and so Adam's moments and the reduced gradients) in the dtype the model is "
              "loaded in, bf16 in the benchmark recipes (the 'bf16-storage' case its docstring warns about, fp32 "
              "only with model.torch_dtype float32); TE kernels and the DeepEP dispatcher (the rows' notes)"),
    sharding="fsdp",
    main_grads_dtype="bf16",
    state_dtype="bf16",
    dispatcher="flex",
    sp_with_tp=False,
)

_TORCHTITAN_EVIDENCE = ("torchtitan docs/performance.md: FSDP2 (reduce_dtype float32 by default), torch.compile, "
                        "Float8 with dynamic tensorwise scaling, op-level selective activation checkpointing; async TP "
                        "only where a run says so")

TORCHTITAN = SourceRule(
    name="torchtitan (FSDP2 + torch.compile + Float8)",
    prefixes=("torchtitan",),
    framework="torchtitan",
    evidence=(f"{_TORCHTITAN_EVIDENCE}; since April 2025 (pytorch/torchtitan PR #1033, build_loss_fn) "
              "--training.compile compiles the cross-entropy loss too"),
    sharding="fsdp",
    recompute="selective",
    fp8_recipe="tensorwise",
    main_grads_dtype="fp32",
    sp_with_tp=True,
    stack="pytorch-compile",
)

#: The same framework before the loss was compiled: runs published before April 2025 (the release the
#: row's benchmark file name dates, e.g. llama3_h100_202412_torchtitan.md at torchtitan 9dec370).
TORCHTITAN_EAGER_LOSS = replace(
    TORCHTITAN,
    name="torchtitan before April 2025 (FSDP2 + torch.compile of the blocks, eager loss)",
    evidence=(f"{_TORCHTITAN_EVIDENCE}; before pytorch/torchtitan PR #1033 (merged 2025-04-01) only the "
              "transformer blocks were compiled: the model returned fp32 logits (`self.output(h).float()`) and "
              "train.py called torch.nn.functional.cross_entropy eagerly; PR #996 (2025-03-20) names that eager "
              "loss as the Llama-3-8B memory peak"),
    eager_cross_entropy=True,
    released_before="2025-04",
)

MOSAICML = SourceRule(
    name="MosaicML llm-foundry benchmarks (Composer FSDP)",
    prefixes=("mosaicml", "llm-foundry"),
    framework="megatron",
    evidence=("llm-foundry scripts/train/benchmarking: FSDP FULL_SHARD with mixed_precision PURE (bf16 "
              "parameters, gradients reduced in bf16), flash attention, fused cross-entropy, activation "
              "checkpointing as each row states; FP8 rows through Transformer Engine's default delayed scaling"),
    sharding="fsdp",
    recompute="ladder",
    fp8_recipe="delayed",
    main_grads_dtype="bf16",
    sp_with_tp=False,
    cross_entropy_fusion=True,
    stack="pytorch-eager",
)

MEGATRON_2021_22 = SourceRule(
    name="Megatron-LM papers (2021-2022)",
    prefixes=("korthikanti", "narayanan", "mtnlg"),
    framework="megatron",
    evidence=("Korthikanti et al. 2022 and Narayanan et al. 2021 ran Megatron-LM before flash attention and the "
              "distributed optimizer: unfused softmax attention, fp32 gradient all-reduce, no TP-comm overlap, "
              "unfused vocab-parallel cross-entropy, interleaving only where the paper gives it (vp 1 otherwise), "
              "activation checkpointing on (--checkpoint-activations) unless the paper says otherwise"),
    sharding="none",
    recompute="full",
    sp_with_tp=False,
    flash_attention=False,
    grad_reduce_overlap=False,
    param_gather_overlap=False,
)

MEGATRON_CORE = SourceRule(
    name="Megatron-LM / Megatron-Core README benchmarks (2024-)",
    prefixes=("megatron-lm", "mcore"),
    framework="megatron",
    evidence=("NVIDIA/Megatron-LM README weak-scaling table (Megatron-Core 0.8, H100): --overlap-grad-reduce "
              "--overlap-param-gather --tp-comm-overlap with the distributed optimizer and sequence parallelism, "
              "Transformer Engine (cuDNN fused attention); Megatron-LM argument defaults otherwise (fp32 gradient "
              "reduction, unfused cross-entropy, alltoall dispatcher in the MoE README's reference mapping)"),
    tp_comm_overlap=True,
)

MEGATRON_DEEPSPEED = SourceRule(
    name="Megatron-DeepSpeed (BLOOM)",
    prefixes=("bloom",),
    framework="megatron",
    evidence=("BLOOM tr11-176B (bigscience-workshop/bigscience train/tr11-176B-ml): Megatron-DeepSpeed, ZeRO-1, bf16, "
              "fp32 gradient accumulation, fused softmax (no flash attention in 2022), full activation checkpointing"),
    sharding="zero1",
    recompute="full",
    sp_with_tp=False,
    flash_attention=False,
)

AMD_PRIMUS = SourceRule(
    name="AMD Primus-Megatron",
    prefixes=("amd-", "primus"),
    framework="megatron",
    evidence=("AMD Primus (Primus-Megatron) configs: Megatron-LM defaults with the distributed optimizer, fp32 "
              "gradient reduction, overlapped grad-reduce/param-gather, no TP-comm overlap"),
)

MEGATRON_DEFAULT = SourceRule(
    name="Megatron-LM defaults (any other source)",
    prefixes=(),
    framework="megatron",
    evidence="Megatron-LM argument defaults (primus/specs/job.py), distributed optimizer as most published runs",
)

RULES: tuple[SourceRule, ...] = (MEGATRON_BRIDGE, NEMO_AUTOMODEL, NEMO, TORCHTITAN_EAGER_LOSS, TORCHTITAN, MOSAICML,
                                 MEGATRON_2021_22, MEGATRON_CORE, MEGATRON_DEEPSPEED, AMD_PRIMUS)


def rule_for(source: str, published: str | None = None) -> SourceRule:
    """The rule of a source (by name prefix, then release: the first rule whose release bound the
    publication month `published` meets); Megatron-LM defaults for any source not listed. A row that
    gives no date gets the source's current rule."""
    for rule in RULES:
        if rule.matches(source, published):
            return rule
    return MEGATRON_DEFAULT
