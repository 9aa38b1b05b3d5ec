"""The Megatron-LM release a job runs on, and which of the arguments primus writes that release has.

A Megatron-LM argument line (`export --to megatron`) is parsed by one release's
``megatron/training/arguments.py``: an argument that release does not know stops the launch
("unrecognized arguments"). So the export targets one release, named by its tag:

- a job on ``megatron-lm@RELEASE`` runs that release: the tag the job named (``megatron-lm@core_v0.16.1``),
  else the newest tag of ``stacks/megatron-lm.yaml``'s `release_names` dated in or before the release month
  (``megatron-lm@2026.06`` is core_v0.18.0 of 2026-06-22);
- a job on another Megatron-based stack runs the Megatron-LM its release pins (`megatron_lm` in
  ``stacks/primus.yaml``, ``megatron-bridge.yaml``, ``nemo.yaml``);
- a job on any other stack (torchtitan, ...) gets the newest release ``megatron-lm`` describes.

`OPTION_WINDOWS` gives, for every argument of `primus.launch.megatron_args.ARGS` that not every release in
`RELEASES` has, the first release with it and the first without it again. It was read by running each tag's
own argparse parser (``megatron.training.arguments.parse_args`` stopped at parsing, its option strings
listed) on NVIDIA/Megatron-LM at every tag of `RELEASES`; where a release builds arguments from its config
dataclasses (ArgumentGroupFactory, from core_v0.16.0) the generated options count. Every window is
contiguous. Tags before core_v0.8.0 (core_v0.4.0 to core_v0.7.0) were not read (their parser imports
Transformer Engine at start-up), so a release before core_v0.8.0 is not a target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from primus.errors import InputError
from primus.stacks.core import DEFAULT_STACK, Stack, load_stack_file, resolve_stack

#: The Megatron-LM release tags whose arguments primus has read, oldest first.
RELEASES: Final = ("core_v0.8.0", "core_v0.9.0", "core_v0.10.0", "core_v0.11.0", "core_v0.12.0", "core_v0.12.1",
                   "core_v0.12.2", "core_v0.12.3", "core_v0.13.0", "core_v0.13.1", "core_v0.14.0", "core_v0.15.0",
                   "core_v0.15.1", "core_v0.15.2", "core_v0.15.3", "core_v0.16.0", "core_v0.16.1", "core_v0.17.0",
                   "core_v0.17.1", "core_v0.18.0", "core_v0.18.2", "core_v0.19.0")

#: argument -> (the first release of `RELEASES` that has it, the first that no longer has it or None). An
#: argument not listed is in every release of `RELEASES` (``--virtual-pipeline-model-parallel-size`` is in
#: none: it is read, never written). E.g. ``--moe-use-legacy-grouped-gemm``: core_v0.11.0 arguments.py line
#: 2212 adds it; core_v0.16.1 generates it from TransformerConfig.moe_use_legacy_grouped_gemm
#: (transformer_config.py line 655, arguments.py line 1621); 2caa681a1d "[Cleanup] Remove the deprecated
#: GroupedMLP (#3410)", first tagged core_v0.17.0, removed the field, the argument and GroupedMLP.
OPTION_WINDOWS: Final[dict[str, tuple[str, str | None]]] = {
    "--num-virtual-stages-per-pipeline-rank": ("core_v0.11.0", None),
    "--use-rope-scaling": ("core_v0.10.0", None),  # core_v0.10.0 arguments.py line 965
    "--rope-scaling-factor": ("core_v0.11.0", None),  # core_v0.11.0 arguments.py line 1053
    "--expert-tensor-parallel-size": ("core_v0.10.0", None),
    "--recompute-modules": ("core_v0.12.0", None),
    "--use-torch-fsdp2": ("core_v0.10.0", None),
    "--cp-comm-type": ("core_v0.10.0", None),  # core_v0.10.0 arguments.py line 1755
    "--use-megatron-fsdp": ("core_v0.14.0", None),
    "--data-parallel-sharding-strategy": ("core_v0.12.0", None),
    "--ckpt-format": ("core_v0.9.0", None),
    "--fp8-recipe": ("core_v0.12.0", None),
    "--fp4-format": ("core_v0.15.0", None),
    "--fp4-recipe": ("core_v0.15.0", None),
    "--fp8-param-gather": ("core_v0.9.0", None),
    "--pipeline-model-parallel-layout": ("core_v0.13.0", None),
    "--decoder-first-pipeline-num-layers": ("core_v0.9.0", None),
    "--decoder-last-pipeline-num-layers": ("core_v0.9.0", None),
    "--account-for-embedding-in-pipeline-split": ("core_v0.11.0", None),
    "--account-for-loss-in-pipeline-split": ("core_v0.11.0", None),
    "--use-precision-aware-optimizer": ("core_v0.11.0", None),
    "--main-grads-dtype": ("core_v0.11.0", None),
    "--main-params-dtype": ("core_v0.11.0", None),
    "--exp-avg-dtype": ("core_v0.11.0", None),
    "--exp-avg-sq-dtype": ("core_v0.11.0", None),
    "--grad-reduce-in-bf16": ("core_v0.12.0", None),
    "--moe-use-legacy-grouped-gemm": ("core_v0.11.0", "core_v0.17.0"),
    "--moe-permute-fusion": ("core_v0.11.0", None),
    "--moe-enable-deepep": ("core_v0.12.0", None),
    "--overlap-moe-expert-parallel-comm": ("core_v0.14.0", None),
    "--attention-backend": ("core_v0.11.0", None),
    "--cross-entropy-fusion-impl": ("core_v0.12.0", None),
    "--padded-vocab-size": ("core_v0.14.0", None),
    "--quick-geglu": ("core_v0.15.0", None),
    "--attention-output-gate": ("core_v0.16.0", None),
    "--softmax-type": ("core_v0.15.0", None),
    # core_v0.15.0 arguments.py line 1650 adds it; from core_v0.16.0 the TransformerConfig field's generated flag
    "--activation-func-clamp-value": ("core_v0.15.0", None),
    "--window-size": ("core_v0.15.0", None),
    "--window-attn-skip-freq": ("core_v0.15.0", None),
    "--moe-ffn-hidden-size": ("core_v0.10.0", None),
    "--moe-shared-expert-intermediate-size": ("core_v0.10.0", None),
    "--moe-layer-freq": ("core_v0.10.0", None),
    "--multi-latent-attention": ("core_v0.10.0", None),
    "--q-lora-rank": ("core_v0.10.0", None),
    "--kv-lora-rank": ("core_v0.10.0", None),
    "--qk-head-dim": ("core_v0.10.0", None),
    "--qk-pos-emb-head-dim": ("core_v0.10.0", None),
    "--v-head-dim": ("core_v0.10.0", None),
    "--mtp-num-layers": ("core_v0.12.0", None),
    "--rotary-scaling-factor": ("core_v0.10.0", None),
    "--mscale": ("core_v0.11.0", None),  # MLA's YaRN mscales (default mscale_all_dim 1.0 before core_v0.14.0, 0.0 on)
    "--mscale-all-dim": ("core_v0.11.0", None),
}

#: (argument, value) -> (the first release of `RELEASES` whose argparse `choices` hold the value, None): values
#: the export may write that a release with the argument refuses, read from the same parsers.
VALUE_WINDOWS: Final[dict[tuple[str, str], tuple[str, str | None]]] = {
    ("--fp8-recipe", "blockwise"): ("core_v0.13.0", None),
    ("--exp-avg-dtype", "bf16"): ("core_v0.13.0", None),
    ("--exp-avg-sq-dtype", "bf16"): ("core_v0.13.0", None),
    ("--moe-token-dispatcher-type", "flex"): ("core_v0.12.0", None),
}

LEGACY_GEMM_FLAG: Final = "--moe-use-legacy-grouped-gemm"
#: The first release whose validate_args accepts fp16 with MoE layers: NVIDIA/Megatron-LM 4193f3aa9b "remove fp16
#: assert in moe_grouped_gemm & EP (#2495)", 2025-12-22, first tagged core_v0.16.0; core_v0.15.3 (2026-02-06, its
#: release branch) megatron/training/arguments.py lines 877 and 1042 still assert "Currently GroupedGEMM for MoE
#: only supports bf16 dtype." and "Expert parallelism is not supported with fp16 training."
FP16_MOE_FROM: Final = "core_v0.16.0"
#: the first release whose experts can be built from Transformer Engine's fused ops (`moe.grouped_gemm`
#: te_fused: experts.py `use_transformer_engine_op_fuser` appears at core_v0.18.0, at no earlier tag)
TE_FUSED_EXPERTS_FROM: Final = "core_v0.18.0"
#: The first release whose validate_args refuses Transformer Engine's fused cross-entropy
#: (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``): NVIDIA/Megatron-LM 168cb15d70 "Disable TE
#: cross entropy loss fusion (#5115)", 2026-06-03, first tagged core_v0.18.2 (arguments.py lines 1528-1532, 'stability
#: issues'); core_v0.12.0 (which added the option) to core_v0.18.0 have no such assert.
TE_LOSS_REFUSED_FROM: Final = "core_v0.18.2"
#: The first release that runs TP above the key/value heads (num_query_groups a divisor of TP, not only a
#: multiple): NVIDIA/Megatron-LM f7dfb99795 "Support TP greater than num_kv_heads by supporting QKV activation
#: sub-sharding (#2565)", 2025-12-06, first tagged core_v0.16.0. TransformerConfig.__post_init__ accepts
#: num_query_groups % tp == 0 or tp % num_query_groups == 0; attention.py keeps linear_qkv split over TP, then
#: all-gathers its output over TP and keeps one key/value head and its query heads (get_query_key_value_tensors).
#: core_v0.15.3 (its release branch, 2026-02-06) still raises "must be a multiple of tensor_model_parallel_size".
KV_SUBSHARDING_FROM: Final = "core_v0.16.0"
#: The first release whose TransformerConfig refuses biases in MoE layers with expert tensor parallelism:
#: core_v0.15.0 megatron/core/transformer/transformer_config.py lines 1301-1304 ("Bias in Moe is only supported
#: when ETP==1", asserted whenever num_moe_experts is set and add_bias_linear is on; core_v0.18.0 lines
#: 2055-2058); core_v0.14.0 has no such assert.
MOE_BIAS_ETP1_FROM: Final = "core_v0.15.0"
#: The releases whose TEGroupedMLP (`moe.grouped_gemm` te) asserts no linear biases at all: "bias not supported in
#: TEGroupedMLP yet, please set '--disable-bias-linear' instead" (megatron/core/transformer/moe/experts.py:
#: core_v0.12.1 line 677, core_v0.13.0 line 683, core_v0.14.0 line 763; not in core_v0.12.0 nor core_v0.15.0,
#: where a329dd6da5 "Enable bias in expert mlp [gpt-oss 5/5]" replaced it by the ETP 1 assert above).
TE_GROUPED_BIAS_REFUSED: Final = ("core_v0.12.1", MOE_BIAS_ETP1_FROM)
#: The first release with MoE parallel folding (an expert tensor-parallel size of its own, experts folded over
#: ETP x EP x EDP x PP): core_v0.10.0 megatron/core/parallel_state.py lines 643-646. Before it (core_v0.8.0
#: parallel_state.py lines 442-445, core_v0.9.0 lines 536-540) the experts run at the dense TP and the
#: expert-parallel groups are carved out of the data-parallel ranks: "data_parallel_size ... is not divisible
#: by expert_model_parallel_size" is raised, and no release before it has --expert-tensor-parallel-size.
MOE_FOLDING_FROM: Final = "core_v0.10.0"
#: The first release whose arguments build YaRN RoPE for standard attention: core_v0.19.0 argument_utils.py
#: `_apply_yarn_config_from_args` (line 384) sets the `yarn_*` attributes GPTModel's 'yarn' branch reads
#: (`--rotary-scaling-factor` becomes yarn_rotary_scaling_factor). core_v0.18.0 takes 'yarn' among the
#: --position-embedding-type choices, but GPTModel reads getattr(config, "yarn_rotary_scaling_factor") with no
#: default and no argument sets it; before, 'yarn' is no choice. Earlier releases get RoPE with --no-rope-fusion,
#: as Megatron-LM's examples/gptoss/02_train.sh trains gpt-oss (`primus.launch.megatron_export.yarn_as_rope`).
YARN_FROM: Final = "core_v0.19.0"
#: The first release with --cp-comm-type (context parallelism other than the p2p ring: all_gather, a2a):
#: core_v0.10.0 megatron/training/arguments.py line 1755; core_v0.9.0 has neither the argument nor
#: TransformerConfig.cp_comm_type.
CP_COMM_TYPE_FROM: Final = OPTION_WINDOWS["--cp-comm-type"][0]
#: The first release that reads a per-layer --cp-comm-type list right: core_v0.15.0 transformer_layer.py line 294
#: (and core_v0.16.1 line 297) takes `config.cp_comm_type[self.layer_number]`, a 1-based number, so the last layer
#: raises IndexError; d3a8584533 "Correct indexing when cp_comms_type is a list" (#3389) is first tagged core_v0.17.0.
CP_PER_LAYER_LIST_FROM: Final = "core_v0.17.0"
#: The first release without GroupedMLP (the legacy grouped GEMM): #3410, 2caa681a1d.
GROUPED_MLP_REMOVED_IN: Final = OPTION_WINDOWS[LEGACY_GEMM_FLAG][1] or ""
#: The stacks whose jobs run Megatron-Core's own modules as that release has them (AMD Primus does not:
#: it keeps a copy of GroupedMLP, primus/backends/megatron/core/transformer/moe/deprecated_2caa681a1).
STOCK_MEGATRON_CORE: Final = ("megatron-lm", "megatron-bridge", "nemo")

_TAG = re.compile(r"^core_[rv](\d+)\.(\d+)(?:\.(\d+))?$", re.IGNORECASE)


def tag_key(tag: str) -> tuple[int, int, int]:
    """``core_v0.16.1`` -> (0, 16, 1); ``core_r0.14`` -> (0, 14, 0)."""
    m = _TAG.match(tag)
    if m is None:
        raise ValueError(f"not a Megatron-LM release tag: {tag!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def has_option(tag: str, flag: str) -> bool:
    """Whether release `tag` (one of `RELEASES`) parses the argument `flag`."""
    window = OPTION_WINDOWS.get(flag)
    if window is None:
        return flag != "--virtual-pipeline-model-parallel-size"
    since, until = window
    return tag_key(since) <= tag_key(tag) and (until is None or tag_key(tag) < tag_key(until))


def newest_with(flag: str) -> str:
    """The newest release of `RELEASES` that has `flag` (a file using it ran on it or an earlier one)."""
    return [t for t in RELEASES if has_option(t, flag)][-1]


def has_value(tag: str, flag: str, value: str) -> bool:
    """Whether release `tag` takes `value` for `flag` (`VALUE_WINDOWS`; any other value: whether it has `flag`)."""
    window = VALUE_WINDOWS.get((flag, value))
    if window is None:
        return has_option(tag, flag)
    since, until = window
    return tag_key(since) <= tag_key(tag) and (until is None or tag_key(tag) < tag_key(until))


@dataclass(frozen=True)
class MegatronTarget:
    """The Megatron-LM release a job runs on (a tag of `RELEASES`) and how it was chosen."""

    tag: str
    why: str

    @property
    def stack(self) -> str:
        """The job's stack on this release (``megatron-lm@core_v0.17.0``, which `resolve_stack` reads)."""
        return f"megatron-lm@{self.tag}"

    def before(self, tag: str) -> bool:
        return tag_key(self.tag) < tag_key(tag)


def megatron_target(stack: Stack, where: str = "stack") -> MegatronTarget:
    """The Megatron-LM release a job on `stack` runs (see the module docstring). A megatron-lm release
    older than every release whose arguments primus has read is bad input (field ``stack``)."""
    if stack.name == DEFAULT_STACK:
        named = _named_tag(stack.release_name)
        if named is not None:
            return MegatronTarget(named, f"the job's stack is {DEFAULT_STACK}@{stack.release_name}")
        month = stack.requested or stack.release
        tag = _tag_of_month(month)
        if tag is None:
            raise InputError(where, "stack", f"{DEFAULT_STACK}@{month} is older than every Megatron-LM release whose "
                             f"arguments primus writes ({RELEASES[0]} to {RELEASES[-1]}): name one "
                             f"({DEFAULT_STACK}@{RELEASES[0]} or later) for a Megatron-LM launch line")
        return MegatronTarget(tag, f"the job's stack is {DEFAULT_STACK}@{month}, and {tag} its newest release tag "
                              f"dated in or before {month}")
    if stack.megatron_lm is not None:
        tag = stack.megatron_lm[0]
        return MegatronTarget(tag, f"the Megatron-LM {stack.label} runs, stacks/{stack.name}.yaml megatron_lm")
    newest = megatron_target(resolve_stack(DEFAULT_STACK), where)
    return MegatronTarget(newest.tag, f"{stack.label} runs no Megatron-LM: the newest release primus describes, "
                          f"{resolve_stack(DEFAULT_STACK).label}")


def _named_tag(name: str | None) -> str | None:
    """The tag of `RELEASES` a release name the job gave stands for (``core_r0.16.1``: core_v0.16.1; a
    release branch and its tag hold the same arguments), None when it names none."""
    if name is None or _TAG.match(name) is None:
        return None
    key = tag_key(name)
    return next((t for t in RELEASES if tag_key(t) == key), None)


def _tag_of_month(month: str) -> str | None:
    """The newest tag of `RELEASES` dated in or before `month` (YYYY.MM) by `release_names`."""
    names = load_stack_file(DEFAULT_STACK).release_names
    dated = [(names[t].date[:7].replace("-", "."), t) for t in RELEASES if t in names]
    before = [t for m, t in dated if m <= month]
    return max(before, key=tag_key) if before else None


def runs_megatron_lm(stack: Stack) -> MegatronTarget | None:
    """The Megatron-LM release a Megatron job on `stack` runs; None for a stack that runs no Megatron-LM release
    (Megatron-DeepSpeed, MaxText, llm-foundry, torchtitan) and for a release older than every one primus has
    read (`megatron_target` refuses it): no release-gated assert of Megatron-Core is known to hold there."""
    if stack.name != DEFAULT_STACK and stack.megatron_lm is None:
        return None
    try:
        return megatron_target(stack)
    except InputError:
        return None


def splits_kv_heads(stack: Stack) -> bool:
    """Whether a Megatron job on `stack` may run TP above num_query_groups (`KV_SUBSHARDING_FROM`): the
    Megatron-LM the stack runs is that release or later (`runs_megatron_lm`)."""
    target = runs_megatron_lm(stack)
    return target is not None and not target.before(KV_SUBSHARDING_FROM)


def refuses_expert_bias_etp(stack: Stack) -> bool:
    """Whether the Megatron-LM a job on `stack` runs asserts ETP 1 for MoE layers with biases
    (`MOE_BIAS_ETP1_FROM`)."""
    target = runs_megatron_lm(stack)
    return target is not None and not target.before(MOE_BIAS_ETP1_FROM)


def folds_experts(stack: Stack) -> bool:
    """Whether the Megatron-LM a job on `stack` runs has MoE parallel folding (`MOE_FOLDING_FROM`); a stack
    that runs no Megatron-LM release is not held to the old rule."""
    target = runs_megatron_lm(stack)
    return target is None or not target.before(MOE_FOLDING_FROM)
