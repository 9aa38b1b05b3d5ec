"""The Megatron-LM arguments primus reads and writes, with their types and Megatron's defaults.

Names follow ``megatron/training/arguments.py`` of NVIDIA/Megatron-LM at commit 000c4ac (2025-10-27, a
dev-branch commit in no release tag, whose options among these are core_v0.16.1's but for
``--attention-output-gate``: it has ``--num-virtual-stages-per-pipeline-rank``,
``--pipeline-model-parallel-layout``, ``--use-megatron-fsdp``, ``--overlap-moe-expert-parallel-comm``,
``--fp4-format`` and the precision-aware optimizer's ``--main-grads-dtype`` ...). AMD's Primus passes
the same arguments by their argparse ``dest`` (``--fp8-format`` is ``fp8``, ``--disable-bias-linear``
is ``add_bias_linear: false``), so one table serves the argument line and the Primus YAML. Import reads
the names of any release; export writes those of the one release the job runs
(`primus.stacks.megatron_release`, which says which release has which argument).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from primus.errors import InputError, shown
from primus.yamlio import int_too_long

MEGATRON_RELEASE: Final = ("Megatron-LM argument names of releases core_v0.8.0 to core_v0.19.0 "
                           "(megatron/training/arguments.py; the table read at NVIDIA/Megatron-LM commit "
                           "000c4ac24f61159c138b0975def722c65245983c)")


@dataclass(frozen=True)
class Arg:
    """One argument: its flag, argparse dest, and kind (int, float, str, true = store_true,
    false = store_false, list = nargs, freq = moe_layer_freq, window = the window tuple)."""

    flag: str
    dest: str
    kind: str


def _a(flag: str, kind: str, dest: str | None = None) -> Arg:
    return Arg(flag, dest or flag[2:].replace("-", "_"), kind)


ARGS: Final[tuple[Arg, ...]] = (
    # read to refuse: the local (non-Transformer-Engine) spec and the legacy models are not the modules primus
    # models; the encoder aliases of --num-layers / --seq-length (validate_args copies them over), never written
    _a("--transformer-impl", "str"), _a("--use-legacy-models", "true"),
    _a("--encoder-num-layers", "int"), _a("--encoder-seq-length", "int"),
    # parallelism and batch
    _a("--tensor-model-parallel-size", "int"), _a("--pipeline-model-parallel-size", "int"),
    _a("--num-layers-per-virtual-pipeline-stage", "int"), _a("--num-virtual-stages-per-pipeline-rank", "int"),
    _a("--virtual-pipeline-model-parallel-size", "int"),  # releases before core_r0.11; read, never written
    _a("--context-parallel-size", "int"), _a("--cp-comm-type", "list"), _a("--expert-model-parallel-size", "int"),
    _a("--expert-tensor-parallel-size", "int"), _a("--sequence-parallel", "true"),
    _a("--micro-batch-size", "int"), _a("--global-batch-size", "int"), _a("--seq-length", "int"),
    _a("--recompute-granularity", "str"), _a("--recompute-activations", "true"), _a("--recompute-method", "str"),
    _a("--recompute-num-layers", "int"), _a("--recompute-modules", "list"),
    _a("--use-distributed-optimizer", "true"), _a("--use-torch-fsdp2", "true"), _a("--use-megatron-fsdp", "true"),
    _a("--data-parallel-sharding-strategy", "str"), _a("--ckpt-format", "str"),
    _a("--no-gradient-accumulation-fusion", "false", "gradient_accumulation_fusion"),
    _a("--no-overlap-p2p-communication", "false", "overlap_p2p_comm"),
    # precision
    _a("--bf16", "true"), _a("--fp16", "true"), _a("--fp8-format", "str", "fp8"), _a("--fp8-recipe", "str"),
    _a("--fp4-format", "str", "fp4"), _a("--fp4-recipe", "str"), _a("--fp8-param-gather", "true"),
    # pipeline split
    _a("--pipeline-model-parallel-layout", "str"), _a("--decoder-first-pipeline-num-layers", "int"),
    _a("--decoder-last-pipeline-num-layers", "int"), _a("--account-for-embedding-in-pipeline-split", "true"),
    _a("--account-for-loss-in-pipeline-split", "true"),
    # optimizer state precision
    _a("--use-precision-aware-optimizer", "true"), _a("--main-grads-dtype", "str"), _a("--main-params-dtype", "str"),
    _a("--exp-avg-dtype", "str"), _a("--exp-avg-sq-dtype", "str"), _a("--grad-reduce-in-bf16", "true"),
    _a("--accumulate-allreduce-grads-in-fp32", "true"),
    # MoE runtime, overlap, kernels
    _a("--moe-token-dispatcher-type", "str"), _a("--moe-expert-capacity-factor", "float"),
    _a("--moe-pad-expert-input-to-capacity", "true"), _a("--moe-use-legacy-grouped-gemm", "true"),
    _a("--moe-permute-fusion", "true"), _a("--moe-grouped-gemm", "true"), _a("--moe-enable-deepep", "true"),
    _a("--overlap-grad-reduce", "true"),
    _a("--overlap-param-gather", "true"), _a("--tp-comm-overlap", "true"),
    _a("--overlap-moe-expert-parallel-comm", "true"), _a("--attention-backend", "str"),
    _a("--use-flash-attn", "true"), _a("--cross-entropy-loss-fusion", "true"),
    _a("--cross-entropy-fusion-impl", "str"), _a("--no-rope-fusion", "false", "apply_rope_fusion"),
    # architecture
    _a("--num-layers", "int"), _a("--hidden-size", "int"), _a("--ffn-hidden-size", "int"),
    _a("--num-attention-heads", "int"), _a("--group-query-attention", "true"), _a("--num-query-groups", "int"),
    _a("--kv-channels", "int"), _a("--vocab-size", "int"), _a("--padded-vocab-size", "int"),
    _a("--make-vocab-size-divisible-by", "int"), _a("--position-embedding-type", "str"),
    _a("--use-rotary-position-embeddings", "true"), _a("--max-position-embeddings", "int"),
    _a("--untie-embeddings-and-output-weights", "true"), _a("--normalization", "str"), _a("--swiglu", "true"),
    _a("--squared-relu", "true"), _a("--quick-geglu", "true"), _a("--disable-bias-linear", "false", "add_bias_linear"),
    _a("--add-qkv-bias", "true"), _a("--qk-layernorm", "true"), _a("--attention-output-gate", "true"),
    _a("--softmax-type", "str"), _a("--activation-func-clamp-value", "float"),
    _a("--hidden-dropout", "float"), _a("--attention-dropout", "float"), _a("--window-size", "window"),
    _a("--window-attn-skip-freq", "skipfreq"), _a("--num-experts", "int"), _a("--moe-router-topk", "int"),
    _a("--moe-ffn-hidden-size", "int"), _a("--moe-shared-expert-intermediate-size", "int"),
    _a("--moe-layer-freq", "freq"), _a("--multi-latent-attention", "true"), _a("--q-lora-rank", "int"),
    _a("--kv-lora-rank", "int"), _a("--qk-head-dim", "int"), _a("--qk-pos-emb-head-dim", "int"),
    _a("--v-head-dim", "int"), _a("--mtp-num-layers", "int"), _a("--rotary-scaling-factor", "float"),
    _a("--mscale", "float"), _a("--mscale-all-dim", "float"),
    _a("--rotary-base", "int"), _a("--rotary-percent", "float"), _a("--use-rope-scaling", "true"),
    _a("--rope-scaling-factor", "float"),
    # the tokenizer, read only for the vocabulary when --vocab-size is absent
    _a("--tokenizer-type", "str"), _a("--tokenizer-model", "str"),
)
BY_FLAG: Final = {a.flag: a for a in ARGS}
BY_DEST: Final = {a.dest: a for a in ARGS}

#: Megatron-LM's value of each dest when its flag is absent (arguments.py defaults).
MEGATRON_DEFAULTS: Final[dict[str, Any]] = {
    "transformer_impl": "transformer_engine", "use_legacy_models": False,
    "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
    "expert_model_parallel_size": 1, "sequence_parallel": False, "recompute_activations": False,
    "use_distributed_optimizer": False, "use_torch_fsdp2": False, "use_megatron_fsdp": False,
    "data_parallel_sharding_strategy": "no_shard", "bf16": False, "fp16": False, "fp8_recipe": "delayed",
    "use_precision_aware_optimizer": False, "grad_reduce_in_bf16": False, "main_grads_dtype": "fp32",
    "main_params_dtype": "fp32", "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32",
    "moe_token_dispatcher_type": "allgather", "moe_use_legacy_grouped_gemm": False, "moe_permute_fusion": False,
    "moe_grouped_gemm": False, "moe_enable_deepep": False,
    "overlap_grad_reduce": False,
    "overlap_param_gather": False,
    "tp_comm_overlap": False, "overlap_moe_expert_parallel_comm": False, "attention_backend": "auto",
    "cross_entropy_loss_fusion": False, "cross_entropy_fusion_impl": "native", "apply_rope_fusion": True,
    "rotary_scaling_factor": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0,  # mscale_all_dim 1.0 before core_v0.14.0
    "rotary_base": 10000, "rotary_percent": 1.0, "use_rope_scaling": False,
    "rope_scaling_factor": 8.0,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False, "group_query_attention": False, "num_query_groups": 1,
    "make_vocab_size_divisible_by": 128, "position_embedding_type": "learned_absolute",
    "untie_embeddings_and_output_weights": False, "normalization": "LayerNorm", "swiglu": False,
    "squared_relu": False, "quick_geglu": False, "add_bias_linear": True, "add_qkv_bias": False, "qk_layernorm": False,
    "attention_output_gate": False,
    "softmax_type": "vanilla", "hidden_dropout": 0.1, "attention_dropout": 0.1, "moe_router_topk": 2,
    "moe_layer_freq": 1, "multi_latent_attention": False, "kv_lora_rank": 32, "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "mtp_num_layers": 0,
}

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def coerce(arg: Arg, value: Any, where: str, label: str) -> Any:
    """A value (a command-line string, or a YAML scalar) as the arg's type; one InputError line if not."""
    if value is None:
        return None
    kind = arg.kind
    if kind in ("true", "false"):
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise InputError(where, label, f"must be true or false, got {shown(value)}")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,12}", value.strip()):
            return int(value)
        raise InputError(where, label, f"must be an integer, got {shown(value)}")
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return float(str(value))
        except ValueError:
            raise InputError(where, label, f"must be a number, got {shown(value)}") from None
    if kind == "list":
        return [str(v) for v in value] if isinstance(value, list) else str(value).split()
    if kind == "window":
        return parse_window(value, where, label)
    if kind == "skipfreq":
        return parse_skip_freq(value, where, label)
    if kind == "freq":
        return parse_layer_freq(value, where, label)
    if isinstance(value, (dict, list)):
        raise InputError(where, label, f"must be a single value, got {type(value).__name__}")
    return str(value)


def parse_window(value: Any, where: str, label: str) -> tuple[int, int]:
    """Megatron's --window-size is a (left, right) tuple written ``128,0`` or ``(128,0)``."""
    items = value if isinstance(value, (list, tuple)) else str(value).strip("()[] ").split(",")
    try:
        left, right = (int(str(v).strip()) for v in items)
    except ValueError:
        raise InputError(where, label, f"must be 'left,right', got {shown(value)}") from None
    return left, right


def parse_skip_freq(value: Any, where: str, label: str) -> int:
    """Megatron's window_attn_skip_freq: an int N (every N-th layer full attention), or a per-layer list
    whose 1s mark sliding-window layers (``is_layer_window_attention`` in megatron/core/transformer/
    utils.py). A list that follows some N's rule is that N; any other list is refused."""
    if isinstance(value, list):
        flags = [bool(v) for v in value]
        for every in range(1, len(flags) + 1):
            if all(flag == ((i + 1) % every != 0) for i, flag in enumerate(flags)):
                return every
        raise InputError(where, label, "a per-layer window pattern that is not 'every N-th layer full' is not "
                         "modelled")
    return int(coerce(Arg(label, label, "int"), value, where, label))


_MAX_FREQ = 100_000
#: The ``([0]*k+[1]*n)`` form a primus model file accepts verbatim (so it round-trips as written).
_SIMPLE_FREQ = re.compile(r"^\(?\[[01]\]\*\d+(\+\[[01]\]\*\d+)*\)?$")


def parse_layer_freq(value: Any, where: str, label: str) -> int | str | tuple[int, ...]:
    """Megatron's --moe-layer-freq: an int, a 0/1 list, or a pattern such as ``([0]*3+[1]*58)`` or
    ``([1]*3+[0]*1)*3``. Parsed by a bounded grammar (lists of 0/1, ``+``, ``*n``, parentheses),
    never evaluated; a pattern primus's model files accept as written is kept as written."""
    if isinstance(value, bool):
        raise InputError(where, label, f"must be an int or a pattern, got {shown(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    text = "".join(str(value).split())
    if text.isdigit():
        reason = int_too_long(text)
        if reason is not None:
            raise InputError(where, label, reason)
        return int(text)
    if _SIMPLE_FREQ.match(text):
        return text
    return tuple(_FreqParser(text, where, label).parse())


class _FreqParser:
    def __init__(self, text: str, where: str, label: str) -> None:
        self.text, self.pos, self.where, self.label = text, 0, where, label

    def fail(self, why: str) -> InputError:
        return InputError(self.where, self.label, f"pattern {self.text[:60]!r}: {why}")

    def parse(self) -> list[int]:
        out = self.expr(0)
        if self.pos != len(self.text):
            raise self.fail(f"unexpected {self.text[self.pos]!r}")
        return out

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expr(self, depth: int) -> list[int]:
        out = self.term(depth)
        while self.peek() == "+":
            self.pos += 1
            out = out + self.term(depth)
            if len(out) > _MAX_FREQ:
                raise self.fail("too long")
        return out

    def term(self, depth: int) -> list[int]:
        out = self.atom(depth)
        while self.peek() == "*":
            self.pos += 1
            match = re.match(r"\d{1,6}", self.text[self.pos:])
            if not match:
                raise self.fail("'*' needs a count")
            self.pos += match.end()
            out = out * int(match.group())
            if len(out) > _MAX_FREQ:
                raise self.fail("too long")
        return out

    def atom(self, depth: int) -> list[int]:
        if depth > 16:
            raise self.fail("nested too deeply")
        char = self.peek()
        if char == "(":
            self.pos += 1
            out = self.expr(depth + 1)
            if self.peek() != ")":
                raise self.fail("missing ')'")
            self.pos += 1
            return out
        match = re.match(r"\[([01](?:,[01])*)\]", self.text[self.pos:])
        if not match:
            raise self.fail("expected a list of 0/1 or '('")
        self.pos += match.end()
        return [int(v) for v in match.group(1).split(",")]
