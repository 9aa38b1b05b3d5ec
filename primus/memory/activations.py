"""Activations a layer saves for its backward pass, tensor by tensor.

The inventory follows what Megatron-Core with Transformer Engine keeps (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", extended): a fused norm + linear
keeps the norm input, its statistics and the normalised output (the linear's input); flash attention
keeps q, k, v, the output and the fp32 log-sum-exp, never the s×s score matrix; the fused SwiGLU keeps
its input (the FC1 output) and FC2 keeps the activation output; dropout keeps 1-byte masks. With
sequence parallelism the tensors outside the TP region (norms, masks, the linear inputs that are
re-gathered in backward) are split across TP; without it they are replicated. Context parallelism
divides the sequence. MoE layers keep the router's fp32 probabilities and routing map, the dispatcher's
row map, the permuted tokens of the local experts (MoE parallel folding: each EP rank receives its
share of top-k routed tokens, all-gathered across ETP), each expert's FC1/activation outputs and the
routing probability per token copy (current Megatron-Core applies it inside the weighted SwiGLU, so
the expert output is not kept); shared experts act like a TP-split dense MLP.

Recompute: `selective` re-runs what the job's selective mode (`ActContext.selective_mode`) says: for
Megatron-Core (`core_attention`, the default) the modules of the job's `recompute_modules` (Megatron's
default: the core attention, `core_attn`), dropping what each frees
(`primus.memory.recompute.RECOMPUTE_MODULES`; every saved tensor names the module whose recompute frees
it); else torchtitan's op-level policy or a MaxText remat policy (`maxtext_remat`). `full` keeps only
each recomputed layer's input and rebuilds the rest during backward (a transient, counted separately).
Selective recompute (but torchtitan's) rebuilds one layer's dropped tensors at a time during its
backward, counted in the backward working set.

Every term is an integer number of bytes per layer per microbatch, so the ledger is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from primus.memory.numerics import Numerics, nbytes
from primus.memory.recompute import DEFAULT_SELECTIVE
from primus.specs.model import ModelSpec

FP32 = Fraction(4)
MASK = Fraction(1)
INDEX = Fraction(8)  # int64 token ids / indices


@dataclass(frozen=True, slots=True)
class Saved:
    """One saved tensor: its name, element count, element width and the recompute module whose
    selective recompute frees it (None: no module does)."""

    name: str
    elements: int
    width: Fraction
    freed_by: str | None = None

    @property
    def bytes(self) -> int:
        return nbytes(self.elements, self.width)


def implied_selective(framework: str) -> str:
    """What `recompute: selective` keeps when a job does not say (`selective_recompute` unset): the
    framework's own mode (a stack sets the job key only where its mode differs from this)."""
    return "op_level" if framework == "torchtitan" else "core_attention"


@dataclass(frozen=True, slots=True)
class ActContext:
    """Everything activations depend on: the layout axes that matter and the job's fixed settings."""

    seq_len: int
    mbs: int
    tp: int
    cp: int
    sp: bool
    etp: int
    numerics: Numerics
    flash_attention: bool = True
    cross_entropy_fusion: bool = False
    #: the fused loss is Transformer Engine's, in place on the logits (KernelOptions.cross_entropy_fusion_impl)
    cross_entropy_in_place: bool = False
    eager_cross_entropy: bool = False
    moe_capacity_factor: float | None = None
    moe_imbalance: float = 1.0
    framework: str = "megatron"
    recompute_modules: frozenset[str] = DEFAULT_SELECTIVE  # what selective recompute re-runs
    experts_low: bool = True  # expert GEMMs (and their saved inputs) in the job's format; False: legacy GroupedMLP
    #: the experts run Transformer Engine's fused grouped MLP (`MoeOptions.grouped_gemm` te_fused): the GLU's
    #: clamp is inside the kernel, so no clamped copy of the FC1 output is kept
    fused_grouped_mlp: bool = False
    #: what selective recompute keeps (`SELECTIVE_MODES`); None: by framework (torchtitan: op_level)
    selective: str | None = None
    #: how CP exchanges attention inputs (`ContextParallelOptions.comm_type`): p2p, a2a or all_gather
    cp_comm: str = "p2p"

    @property
    def te_grouped_mlp(self) -> bool:
        """The experts are Megatron's per-expert modules over Transformer Engine GEMMs: TEGroupedMLP
        (`MoeOptions.grouped_gemm` te) or SequentialMLP (sequential), which save the same tensors and run
        the same activation functions; neither the legacy GroupedMLP nor Transformer Engine's fused grouped
        MLP, and Megatron's framework."""
        return self.framework == "megatron" and self.experts_low and not self.fused_grouped_mlp

    @property
    def selective_mode(self) -> str:
        return self.selective if self.selective is not None else implied_selective(self.framework)

    @property
    def tokens(self) -> int:
        """Tokens of one microbatch on this rank before any TP split: MBS × seq / CP."""
        return self.mbs * self.seq_len // self.cp

    @property
    def sp_div(self) -> int:
        """Divisor for tensors outside the TP region: TP with sequence parallelism, else 1."""
        return self.tp if self.sp else 1


def _norm(model: ModelSpec, ctx: ActContext, prefix: str, dim: int, tokens: int, out_gemm: bool,
          freed_by: str | None = None) -> list[Saved]:
    """A norm (fused with the following linear when `out_gemm`): input, statistics, output. `freed_by`:
    the recompute module that re-runs the norm (its input, the checkpoint's, stays)."""
    stats = 2 if model.normalization == "LayerNorm" else 1
    act = ctx.numerics.activation
    out_width = ctx.numerics.gemm_input if out_gemm else act
    return [
        Saved(f"{prefix}.input", tokens * dim, act),
        Saved(f"{prefix}.stats", tokens * stats, FP32, freed_by),
        Saved(f"{prefix}.output", tokens * dim, out_width, freed_by),
    ]


def _attention(model: ModelSpec, ctx: ActContext) -> list[Saved]:
    t = ctx.tp
    T = ctx.tokens
    Tn = T // ctx.sp_div
    h = model.hidden_size
    heads = model.num_attention_heads // t
    act = ctx.numerics.activation
    gemm = ctx.numerics.gemm_input
    out: list[Saved] = []
    if model.multi_latent_attention:
        qk = (model.qk_head_dim or 0) + (model.qk_pos_emb_head_dim or 0)
        v = model.v_head_dim or 0
        kv_lora = model.kv_lora_rank or 0
        rope = model.qk_pos_emb_head_dim or 0
        # MLA's input norm is a module of its own (recomputed by `layernorm`); the q/kv norms are fused
        # into the up-projections, inside the `mla_up_proj` checkpoint, as are q, k and v
        out += _norm(model, ctx, "input_layernorm", h, Tn, out_gemm=True, freed_by="layernorm")
        if model.q_lora_rank is not None:
            out += _norm(model, ctx, "q_layernorm", model.q_lora_rank, Tn, out_gemm=True, freed_by="mla_up_proj")
        out.append(Saved("kv_down_proj.output", Tn * (kv_lora + rope), act))
        out += _norm(model, ctx, "kv_layernorm", kv_lora, Tn, out_gemm=True, freed_by="mla_up_proj")
        q_dim, k_dim, v_dim, o_dim = heads * qk, heads * qk, heads * v, heads * v
        qkv_freed_by: str | None = "mla_up_proj"
    else:
        d = model.head_dim
        groups = max(model.query_groups // t, 1)
        out += _norm(model, ctx, "input_layernorm", h, Tn, out_gemm=True)  # fused into QKV: not recomputed
        q_dim, k_dim, v_dim, o_dim = heads * d, groups * d, groups * d, heads * d
        qkv_freed_by = None
        if model.qk_layernorm:
            stats = 2 if model.normalization == "LayerNorm" else 1
            # one statistic per head, or one per token for a norm over the whole q (and k) projection
            rows = heads + groups if model.qk_layernorm_per_head else 2
            out += [Saved("q_layernorm.input", T * q_dim, act), Saved("k_layernorm.input", T * k_dim, act),
                    Saved("qk_layernorm.stats", T * rows * stats, FP32)]
    out += [Saved("core_attention.q", T * q_dim, act, qkv_freed_by), Saved("core_attention.k", T * k_dim, act,
                                                                         qkv_freed_by),
            Saved("core_attention.v", T * v_dim, act, qkv_freed_by)]
    fp8_proj = gemm != act
    gated = model.attention_output_gate and not model.multi_latent_attention
    out.append(Saved("core_attention.output", T * o_dim, act, "core_attn" if fp8_proj and not gated else None))
    if gated:  # x * sigmoid(gate.float()) (Megatron-Core _apply_output_gate): the multiply keeps x and the
        # fp32 sigmoid, and its product, cast back, is linear_proj's input
        out.append(Saved("attention_output_gate.sigmoid", T * o_dim, FP32))
    if fp8_proj or gated:
        out.append(Saved("linear_proj.input", T * o_dim, gemm))
    if ctx.cp > 1 and ctx.cp_comm != "p2p" and ctx.flash_attention and (gated or not fp8_proj):
        # Transformer Engine's a2a and all_gather CP save the attention output as the kernel wrote it (a2a:
        # `out_part`, before the all-to-all back; all_gather: `out_per_step`, the two halves), and return a new
        # tensor that linear_proj (or the output gate) keeps as well (TE v2.12 context_parallel.py
        # AttnFuncWithCPAndQKVOA2A lines 3560-3582, AttnFuncWithCPAndKVAllGather lines 2985-3020); the ring
        # saves the output it returns. Under FP8 linear_proj keeps its quantised copy and the returned one dies.
        out.append(Saved("core_attention.cp_output", T * o_dim, act, "core_attn"))
    if ctx.flash_attention:
        out.append(Saved("core_attention.softmax_lse", T * heads, FP32, "core_attn"))
    else:
        s_q = ctx.seq_len // ctx.cp
        s_k = ctx.seq_len
        scores = ctx.mbs * heads * s_q * s_k
        out.append(Saved("core_attention.softmax", scores, act, "core_attn"))
        if model.attention_dropout > 0:
            out.append(Saved("core_attention.dropout_mask", scores, MASK, "core_attn"))
            out.append(Saved("core_attention.dropout_output", scores, act, "core_attn"))
    if model.hidden_dropout > 0:
        out.append(Saved("self_attention.dropout_mask", Tn * h, MASK))
    return out


def _mlp(model: ModelSpec, ctx: ActContext, prefix: str, tokens: int, ffn: int, ways: int,
         fc1_freed_by: str | None = None, act_freed_by: str | None = None,
         gemm_width: Fraction | None = None) -> list[Saved]:
    fc1 = model.fc1_width(ffn)
    return [
        Saved(f"{prefix}.linear_fc1.output", tokens * fc1 // ways, ctx.numerics.activation, fc1_freed_by),
        Saved(f"{prefix}.activation.output", tokens * ffn // ways,
              ctx.numerics.gemm_input if gemm_width is None else gemm_width, act_freed_by),
    ]


def routed_tokens(model: ModelSpec, ctx: ActContext) -> int:
    """Token copies entering this rank's local experts in one microbatch: the rank's top-k share,
    all-gathered across ETP; scaled by the capacity factor when set, else by the imbalance knob."""
    local = ctx.tokens // ctx.sp_div
    base = local * model.topk * ctx.etp
    factor = _ratio(ctx.moe_capacity_factor or ctx.moe_imbalance)
    return -(-(base * factor.numerator) // factor.denominator)  # ceil(base x factor), in integers


@lru_cache(maxsize=64)
def _ratio(x: float) -> Fraction:
    """x as the nearest fraction with a denominator of at most 1000 (cached: `routed_tokens` runs for
    every shape context the projection and the bounds cost)."""
    return Fraction(x).limit_denominator(1000)


def _moe_mlp(model: ModelSpec, ctx: ActContext) -> list[Saved]:
    h = model.hidden_size
    T = ctx.tokens
    Tn = T // ctx.sp_div
    experts = model.num_experts or 0
    out = _norm(model, ctx, "pre_mlp_layernorm", h, Tn, out_gemm=False, freed_by="layernorm")
    out += [Saved("router.probs", Tn * experts, FP32), Saved("router.routing_map", Tn * experts, MASK)]
    n_tok = routed_tokens(model, ctx)
    # the dispatcher keeps an index per routed token copy to unpermute (int64 row map)
    out.append(Saved("dispatcher.row_id_map", Tn * model.topk, INDEX))
    # the legacy GroupedMLP (bf16 grouped GEMMs) keeps its GEMM inputs in bf16 under FP8 too
    width = ctx.numerics.gemm_input if ctx.experts_low else ctx.numerics.activation
    out.append(Saved("experts.input", n_tok * h, width))
    out += _mlp(model, ctx, "experts", n_tok, model.moe_ffn_hidden_size or 0, ctx.etp, act_freed_by="moe_act",
                gemm_width=width)
    if model.activation_func_clamp_value is not None and ctx.te_grouped_mlp:
        # Megatron-Core clamps the FC1 output's halves and concatenates them before its fused GLU
        # (fused_bias_geglu.py `weighted_bias_quick_geglu_impl`, core_v0.16.0 lines 424-432): the clamps keep
        # the FC1 output and the GLU keeps the concatenated copy, a second FC1-wide tensor
        fc1 = model.fc1_width(model.moe_ffn_hidden_size or 0)
        out.append(Saved("experts.activation_clamp.output", n_tok * fc1 // ctx.etp, ctx.numerics.activation,
                         "moe_act"))
    # current Megatron-Core applies the routing probabilities inside the expert activation
    # (weighted SwiGLU), which keeps the per-copy probability; the FC2 output is not kept
    out.append(Saved("experts.probs", n_tok, FP32))
    if model.moe_shared_expert_intermediate_size:
        if ctx.numerics.gemm_input != ctx.numerics.activation:
            # with `layernorm` recompute FP8 consumers save the norm's original output instead (freed)
            out.append(Saved("shared_experts.input", Tn * h, ctx.numerics.gemm_input, "layernorm"))
        out += _mlp(model, ctx, "shared_experts", T, model.moe_shared_expert_intermediate_size, ctx.tp)
        if model.moe_shared_expert_gate:  # the sigmoid gate's output, one per token
            out.append(Saved("shared_experts.gate.output", Tn, ctx.numerics.activation))
    if model.hidden_dropout > 0:
        out.append(Saved("mlp.dropout_mask", Tn * h, MASK))
    return out


def _dense_mlp(model: ModelSpec, ctx: ActContext) -> list[Saved]:
    h = model.hidden_size
    Tn = ctx.tokens // ctx.sp_div
    # the norm is fused into FC1 (TE LayerNormLinear): inside the `mlp` checkpoint, whose input stays
    out = _norm(model, ctx, "pre_mlp_layernorm", h, Tn, out_gemm=True, freed_by="mlp")
    out += _mlp(model, ctx, "mlp", ctx.tokens, model.ffn_hidden_size or 0, ctx.tp, "mlp", "mlp")
    if model.hidden_dropout > 0:
        out.append(Saved("mlp.dropout_mask", Tn * h, MASK))
    return out


@lru_cache(maxsize=4096)
def layer_inventory(model: ModelSpec, kind: str, ctx: ActContext) -> tuple[Saved, ...]:
    """Saved tensors of one decoder layer ("dense" or "moe") for one microbatch, no recompute."""
    attn = _attention(model, ctx)
    mlp = _moe_mlp(model, ctx) if kind == "moe" else _dense_mlp(model, ctx)
    return tuple(attn + _post_norm(model, ctx, "post_attention_layernorm") + mlp
                 + _post_norm(model, ctx, "post_mlp_layernorm"))


def _post_norm(model: ModelSpec, ctx: ActContext, prefix: str) -> list[Saved]:
    """Sandwich norms (Gemma 2 and 3) add a norm on each sublayer's output, before the residual add: its
    input and statistics are kept (its output goes into the add, which keeps nothing). Post-norm layers
    (OLMo 2) keep what pre-norm layers do, so the inventory names them as pre-norm."""
    if model.norm_placement != "sandwich":
        return []
    return _norm(model, ctx, prefix, model.hidden_size, ctx.tokens // ctx.sp_div, out_gemm=False)[:2]


def checkpoint_bytes(model: ModelSpec, ctx: ActContext) -> int:
    """Full recompute keeps only the layer input (split across TP with sequence parallelism)."""
    return nbytes(ctx.tokens // ctx.sp_div * model.hidden_size, ctx.numerics.activation)


#: MaxText's remat policies (`remat_policy`), each as the checkpoint names JAX may keep for the backward
#: pass; every other value of a decoder layer is recomputed. AI-Hypercomputer/maxtext MaxText/layers/
#: models.py at 02a8f5c19b16a7b9395716beac2d3feb41567111 (2024-12-08, the last commit before NVIDIA's
#: jax:maxtext-2024-12-09 container; the same sets at ab90e07, 2024-10, and 67aa0a6, 2025-01):
#: `save_only_these_names(...)`. NVIDIA/dgxc-benchmarking 35a9aec maxtext/configure.sh
#: spells the same sets as `remat_policy=custom` with those names `=device` (fp8 and bf16 recipes).
MAXTEXT_POLICIES: dict[str, frozenset[str]] = {
    "save_dot_except_mlp": frozenset({"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj"}),
    "save_dot_except_mlpwi": frozenset({"query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj",
                                        "mlpwo"}),
}
#: What selective recompute can keep: Megatron-Core's core-attention recompute, torchtitan's op-level
#: policy, or a MaxText remat policy.
SELECTIVE_MODES: tuple[str, ...] = ("core_attention", "op_level", *MAXTEXT_POLICIES)
#: Each MaxText policy as its nearest Megatron-Core `--recompute-modules` list (`parallel.recompute_modules`,
#: primus.memory.recompute): both re-run the attention kernel and the MLP, and Llama's norms are fused into
#: QKV and FC1, where `layernorm` does not apply. Megatron's list keeps more: the input norm's output and
#: statistics and the attention output, where MaxText keeps only the output projection's output (the same
#: size as Megatron's MLP input): 2 x tokens x hidden activations more per layer (`maxtext_remat`).
RECOMPUTED_MODULES: dict[str, tuple[str, ...]] = {
    "save_dot_except_mlp": ("core_attn", "mlp"),
    "save_dot_except_mlpwi": ("core_attn", "mlp"),
}


def maxtext_remat(model: ModelSpec, ctx: ActContext, policy: str) -> list[Saved]:
    """What a dense decoder layer keeps under a MaxText remat policy (standard attention; MaxText's
    llama2 decoder layer, MaxText/layers/llama2.py). JAX's `jax.checkpoint` keeps only residuals the
    backward reads, and only those the policy names; everything else is recomputed from them:

    - `decoder_layer_input`, the scanned layer's carry, always kept (MaxText's base.yml: "cannot be
      rematerialized"); split across TP like the other tensors outside the TP region;
    - `query_proj`, `key_proj`, `value_proj`: q (after RoPE), k (after RoPE) and v, the inputs the
      recomputed attention kernel reads (its `context` output and softmax statistics are recomputed);
    - `out_proj`: the attention output projection, read to rebuild the residual that the
      post-attention norm's backward needs;
    - `mlpwo` (save_dot_except_mlpwi only): the MLP output projection's output is read by no backward
      computation unless a norm follows it (sandwich norms), so JAX keeps it only then: for Llama 2
      the two policies keep the same bytes (and recompute the same work: the norms, the attention
      kernel, FC1 and the activation; FC2's input is rebuilt, its output never needed).

    All in the activation dtype (the projections' outputs are bf16 also under MaxText's fp8)."""
    saved = MAXTEXT_POLICIES[policy]
    t = ctx.tp
    T = ctx.tokens
    Tn = T // ctx.sp_div
    h = model.hidden_size
    d = model.head_dim
    heads = model.num_attention_heads // t
    groups = max(model.query_groups // t, 1)
    act = ctx.numerics.activation
    out = [Saved("decoder_layer_input", Tn * h, act)]
    if saved & {"query_proj", "qkv_proj"}:
        out.append(Saved("query_proj", T * heads * d, act))
    if saved & {"key_proj", "qkv_proj"}:
        out.append(Saved("key_proj", T * groups * d, act))
    if saved & {"value_proj", "qkv_proj"}:
        out.append(Saved("value_proj", T * groups * d, act))
    if "out_proj" in saved:
        out.append(Saved("out_proj", Tn * h, act))
    if "mlpwo" in saved and model.norm_placement == "sandwich":
        out.append(Saved("mlpwo", Tn * h, act))
    return out


def maxtext_policy_applies(model: ModelSpec, kind: str, mode: str) -> bool:
    """MaxText's policies are modelled for dense layers with standard attention (MLA and MoE layers keep
    the core-attention selective inventory, and re-run the core attention): one definition for the
    ledger and the projection."""
    return mode in MAXTEXT_POLICIES and kind == "dense" and not model.multi_latent_attention


def _maxtext_applies(model: ModelSpec, kind: str, ctx: ActContext) -> bool:
    return maxtext_policy_applies(model, kind, ctx.selective_mode)


@lru_cache(maxsize=4096)
def layer_bytes(model: ModelSpec, kind: str, ctx: ActContext, recompute: str) -> int:
    """Bytes one layer keeps per in-flight microbatch under a recompute mode ("none"/"selective" keep
    the inventory, less what the selective mode recomputes; "ckpt" = a fully recomputed layer)."""
    if recompute == "ckpt":
        return checkpoint_bytes(model, ctx)
    if recompute == "selective" and ctx.selective_mode == "op_level" and kind == "dense":
        return sum(s.bytes for s in torchtitan_op_sac(model, ctx))
    if recompute == "selective" and _maxtext_applies(model, kind, ctx):
        return sum(s.bytes for s in maxtext_remat(model, ctx, ctx.selective_mode))
    inv = layer_inventory(model, kind, ctx)
    if recompute != "selective":
        return sum(s.bytes for s in inv)
    return sum(s.bytes for s in inv if s.freed_by not in ctx.recompute_modules)


def torchtitan_op_sac(model: ModelSpec, ctx: ActContext) -> list[Saved]:
    """torchtitan's selective activation checkpointing (`selective_ac_option: op`): inside each
    TransformerBlock only the block input, every other matmul output (wq, wv, w1, w2 of the order wq, wk,
    wv, wo, w1, w3, w2) and the attention kernel's outputs are kept; norms, activations and the other
    matmuls are recomputed. Matmul outputs are bf16 also under float8 training."""
    t = ctx.tp
    T = ctx.tokens
    h = model.hidden_size
    d = model.head_dim
    heads = model.num_attention_heads // t
    groups = max(model.query_groups // t, 1)
    ffn = model.ffn_hidden_size or 0
    act = ctx.numerics.activation
    return [
        Saved("block.input", T // ctx.sp_div * h, act),
        Saved("attention.wq.output", T * heads * d, act),
        Saved("attention.wv.output", T * groups * d, act),
        Saved("core_attention.output", T * heads * d, act),
        Saved("core_attention.softmax_lse", T * heads, FP32),
        Saved("feed_forward.w1.output", T * ffn // t, act),
        Saved("feed_forward.w2.output", T // ctx.sp_div * h, act),
    ]


@lru_cache(maxsize=4096)
def layer_working_bytes(model: ModelSpec, kind: str, ctx: ActContext) -> int:
    """Transient bytes while one layer runs its backward: the gradient of its largest saved tensor and
    of the layer input, plus the sequence-parallel all-gather of a GEMM input (full sequence)."""
    inv = layer_inventory(model, kind, ctx)
    largest = max(nbytes(s.elements, ctx.numerics.activation) for s in inv)
    layer_input = nbytes(ctx.tokens * model.hidden_size, ctx.numerics.activation)
    gathered = layer_input if ctx.sp else 0
    return largest + layer_input + gathered + cp_gather_bytes(model, ctx)


def cp_gather_bytes(model: ModelSpec, ctx: ActContext) -> int:
    """all_gather CP's backward working set beside the layer's saved tensors (TE v2.12 context_parallel.py
    AttnFuncWithCPAndKVAllGather.backward, lines 3061-3240): the zero-filled full-sequence dK and dV (lines
    3062-3063), the re-gathered full-sequence K and V (only the local ones are saved; lines 3074-3085), the two
    steps' dK and dV, which stay in their lists until the function returns and together span (2 CP + 1) / (2 CP)
    of the full sequence under the causal mask (`get_kv_seq_info_after_all_gather`: the chunk `rank` attends
    rank + 1 of the 2 CP chunks, the chunk 2 CP - 1 - rank attends 2 CP - rank), and the reordered copy of dK that
    `index_select` makes before the old one is dropped (line 3230). In elements, with F = CP x the local K and V:
    3 F + F / (2 CP) + CP x the local K. 0 for the other CP types."""
    if ctx.cp <= 1 or ctx.cp_comm != "all_gather":
        return 0
    if model.multi_latent_attention:
        heads = model.num_attention_heads // ctx.tp
        k_width = heads * ((model.qk_head_dim or 0) + (model.qk_pos_emb_head_dim or 0))
        v_width = heads * (model.v_head_dim or 0)
    else:
        k_width = v_width = max(model.query_groups // ctx.tp, 1) * model.head_dim
    local = ctx.tokens * (k_width + v_width)  # the rank's K and V: tokens = MBS x seq / CP, an even number
    elements = 3 * ctx.cp * local + local // 2 + ctx.cp * ctx.tokens * k_width
    return nbytes(elements, ctx.numerics.activation)


def embedding_bytes(model: ModelSpec, ctx: ActContext) -> int:
    """The first stage keeps the token ids and, with dropout, the embedding dropout mask."""
    Tn = ctx.tokens // ctx.sp_div
    out = nbytes(ctx.tokens, INDEX)
    if model.hidden_dropout > 0:
        out += nbytes(Tn * model.hidden_size, MASK)
    return out


def loss_bytes(model: ModelSpec, ctx: ActContext, padded_vocab: int) -> int:
    """The last stage keeps the final norm, the output layer's input and the loss state: Megatron's
    vocab-parallel cross-entropy keeps fp32 softmax (T × V/TP × 4 B); a fused cross-entropy keeps the
    bf16 logits instead."""
    Tn = ctx.tokens // ctx.sp_div
    h = model.hidden_size
    stats = 2 if model.normalization == "LayerNorm" else 1
    out = nbytes(Tn * h, ctx.numerics.activation) + nbytes(Tn * stats, FP32) + nbytes(Tn * h, ctx.numerics.activation)
    logits = ctx.tokens * padded_vocab // ctx.tp
    out += nbytes(logits, ctx.numerics.activation if ctx.cross_entropy_fusion else FP32)
    out += nbytes(ctx.tokens, INDEX)  # labels
    return out


#: fp32 logit-sized buffers alive beside the kept log-softmax at the peak of an eager cross-entropy's
#: backward: PyTorch's F.cross_entropy (2), and under DTensor loss_parallel on vocabulary shards (3).
#: Counted, not fitted: tests/test_trace_loss.py traces both with MemTracker.
EAGER_LOSS_BUFFERS = 2
EAGER_LOSS_PARALLEL_BUFFERS = 3


def loss_working_bytes(ctx: ActContext, padded_vocab: int) -> int:
    """Transient of the loss beyond what `loss_bytes` keeps. Megatron's vocab-parallel cross-entropy
    works in place on its fp32 softmax, and a fused one on the bf16 logits, so the transient is one bf16
    logit tensor: the logits before the fp32 cast (forward) or their gradient handed to the output
    layer (backward). PyTorch's eager `F.cross_entropy` is out of place: its backward allocates the
    fp32 gradient of the log-softmax output (nll_loss backward) and then the fp32 gradient of the
    logits (log_softmax backward) while the kept log-softmax is still alive, so two fp32 logit tensors
    (torchtitan PR #996, 2025: its eager loss was the Llama-3-8B peak and chunking it saved 7.3 GiB).
    Across TP it runs under DTensor's `loss_parallel` on the vocabulary shards, whose log-softmax
    backward holds one more fp32 shard-sized temporary (three in all; tests/test_trace_loss.py measures
    both forms with torch's MemTracker). Transformer Engine's fused cross-entropy
    (`cross_entropy_fusion_impl: te`) has none: its forward writes the gradient over the kept logits and
    its backward scales them in place; beside them it allocates, per token, the fp32 loss and its three
    fp32 softmax statistics (max, sum of exponentials, target logit), and under TP those of every TP rank,
    all-gathered (lines 285-315)."""
    logits = ctx.tokens * padded_vocab // ctx.tp
    if ctx.cross_entropy_fusion and ctx.cross_entropy_in_place:
        gathered = 3 * ctx.tp if ctx.tp > 1 else 0
        return nbytes((1 + 3 + gathered) * ctx.tokens, FP32)
    if ctx.eager_cross_entropy and not ctx.cross_entropy_fusion:
        return (EAGER_LOSS_PARALLEL_BUFFERS if ctx.tp > 1 else EAGER_LOSS_BUFFERS) * nbytes(logits, FP32)
    return nbytes(logits, ctx.numerics.activation)


def mtp_extra_bytes(model: ModelSpec, ctx: ActContext) -> int:
    """An MTP module beyond its decoder layer: two norms and the 2h→h projection input."""
    Tn = ctx.tokens // ctx.sp_div
    h = model.hidden_size
    out = 2 * sum(s.bytes for s in _norm(model, ctx, "mtp.norm", h, Tn, out_gemm=False))
    out += nbytes(Tn * 2 * h, ctx.numerics.gemm_input)
    return out
