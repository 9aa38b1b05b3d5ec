"""What one microbatch runs on one rank, block by block: GEMMs at their sharded shapes, attention,
memory-bound kernels, and the collectives inside the block.

A block is a decoder layer (dense, MoE; standard attention or MLA) here, or the embedding, the output
layer with its loss, or an MTP module (`primus.projection.ends`). Shapes follow Megatron-Core with
Transformer Engine:

- tokens on a rank: T = MBS × seq / CP; outside the TP region (norms, residuals, the router) they are
  also split by TP under sequence parallelism (Tn = T / TP), inside it they are gathered (T);
- column-parallel linears (QKV, FC1, MLA's up-projections, the output layer) split N by TP,
  row-parallel ones (the attention projection, FC2) split K; MLA's down-projections are replicated and
  run on the local tokens; routed experts split by ETP and hold num_experts / EP local experts, each
  seeing (local tokens × top-k × ETP) / local experts tokens (the ledger's `routed_tokens`, so routing
  balance and capacity factor agree with the memory model);
- attention is flash attention over the causal half (with CP, Megatron's load-balanced chunking gives
  each rank 1/CP of the causal work: its s/CP queries over the whole sequence), or, without flash
  attention, two batched GEMMs over the full s×s scores plus the softmax (and dropout) kernels;
- memory-bound kernels are counted as bytes read and written per pass (listed at each builder).

Backward work is derived from these in `primus.projection.cost` (dgrad + wgrad per GEMM, the
flash-attention backward's five matmuls), so the inventory is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from primus.memory.activations import ActContext, routed_tokens
from primus.specs.model import ModelSpec

ACT = 2  # bytes of a bf16/fp16 activation element
FP32 = 4
MASK = 1  # a dropout mask element


@dataclass(frozen=True, slots=True)
class Gemm:
    """One GEMM (or `count` identical problems of a grouped GEMM): [m × k] · [k × n]."""

    name: str
    m: int
    n: int
    k: int
    count: int = 1
    low: bool = True  # runs in the job's GEMM format; False: kept in bf16/fp16 (router, output layer)
    cast_input: bool = False  # low precision and its input is quantised by its own kernel (not fused into a norm)
    weight: bool = True  # has a weight gradient (accumulated into the fp32 main grad); False: activation BMM
    cat: str = "gemm"  # breakdown category: "gemm", or "attention" for unfused score/context BMMs
    op_recompute: float = 0.0  # share of its forward that torchtitan's op-level selective checkpointing re-runs
    module: str | None = None  # the recompute module that re-runs it (primus.memory.recompute)
    launches: int = 1  # kernels the host issues per pass (and per quantisation pass): see `OpContext`

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.count


@dataclass(frozen=True, slots=True)
class Attention:
    """Flash attention of `batch_heads` (MBS × heads on this rank) over `sq` queries, each attending
    `keys` keys on average (causal half, sliding window)."""

    name: str
    batch_heads: int
    sq: int
    keys: float
    d_qk: int
    d_v: int

    @property
    def fwd_flops(self) -> float:
        """S = QKᵀ and O = PV: 2 FLOPs per multiply-add."""
        return 2.0 * self.batch_heads * self.sq * self.keys * (self.d_qk + self.d_v)

    @property
    def bwd_flops(self) -> float:
        """The backward recomputes S = QKᵀ and computes dV = PᵀdO, dP = dO Vᵀ, dQ = dS K, dK = dSᵀ Q:
        five matmuls against the forward's two (Dao 2023, FlashAttention-2, §3.1.2)."""
        return 2.0 * self.batch_heads * self.sq * self.keys * (3 * self.d_qk + 2 * self.d_v)


@dataclass(frozen=True, slots=True)
class MemOp:
    """A memory-bound kernel (or fused group): bytes read plus written in forward and in backward."""

    name: str
    fwd_bytes: float
    bwd_bytes: float
    module: str | None = None  # the recompute module that re-runs it (primus.memory.recompute)
    launches: int = 1  # kernels the host issues for it in forward (a Python loop over experts: several)
    bwd_launches: int | None = None  # in backward, when not `launches`
    #: blocking host synchronisations it makes per forward (the GPU drains, then waits while the host
    #: launches what follows): each costs `CostSettings.host_sync`, and again when its module is recomputed
    host_syncs: int = 0


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective inside a block: `fwd`/`bwd` calls per microbatch on the group `group`.

    `nbytes`: the full tensor (all-gather output, reduce-scatter input, all-reduce buffer), the bytes
    each rank sends in an all-to-all, or one point-to-point message. `overlap` names what can hide it:
    "tp" (TP comm overlap, when enabled), "ep" (MoE all-to-all overlap, when enabled), "cp" (the ring
    attention pipelines each KV exchange with a block of attention), "wgrad" (the backward re-gather of
    a sequence-parallel GEMM input, issued asynchronously before the data-gradient GEMM), "none".
    """

    name: str
    kind: str
    group: str
    nbytes: float
    fwd: int
    bwd: int
    overlap: str
    fanout: int = 1


@dataclass(frozen=True)
class Block:
    kind: str
    gemms: tuple[Gemm, ...] = ()
    attention: tuple[Attention, ...] = ()
    memops: tuple[MemOp, ...] = ()
    comms: tuple[Comm, ...] = ()

    def __add__(self, other: Block) -> Block:
        return Block(self.kind, self.gemms + other.gemms, self.attention + other.attention,
                     self.memops + other.memops, self.comms + other.comms)


@dataclass(frozen=True, slots=True)
class OpContext:
    """Everything a block's shapes depend on (hashable, so blocks are cached per context)."""

    act: ActContext
    ep: int
    padded_vocab: int
    low_precision: bool  # linear layers run in a low-precision format (FP8 / NVFP4)
    dispatcher: str = "alltoall"  # MoE token dispatcher: alltoall, allgather or flex (deduplicating)
    #: the experts' grouped GEMM is Transformer Engine's GroupedLinear (Megatron-Core's TEGroupedMLP),
    #: which issues one cuBLAS GEMM per local expert (`multi_stream_cublas_gemm` loops over the GEMMs on
    #: 4 compute streams) and quantises each expert's slice with its own kernel (`split_quantize` ->
    #: `multi_tensor_quantize` loops over the tensors): NVIDIA/TransformerEngine v2.9
    #: transformer_engine/common/gemm/cublaslt_gemm.cu and common/util/cast.cu. The legacy GroupedMLP
    #: (grouped_gemm's `gmm`) and torch's grouped_mm run one kernel for all experts.
    per_expert_launches: bool = False
    #: the MoE permutation runs Transformer Engine's fused kernels (`MoeOptions.permute_fusion`); off,
    #: Megatron-Core's torch path (`unfused_permutation_rows`)
    permute_fusion: bool = True
    #: the experts run Transformer Engine's fused grouped MLP (`MoeOptions.grouped_gemm` te_fused): the GLU
    #: (its clamp and the expert biases too) runs inside the FC1 grouped GEMM's epilogue (TE v2.16
    #: ops/fused/forward_grouped_mlp.py, `grouped_gemm_glu_wrapper_sm100`), so no activation kernel of its own
    fused_grouped_mlp: bool = False
    #: the experts are Megatron-Core's SequentialMLP (`MoeOptions.grouped_gemm` sequential, no
    #: --moe-grouped-gemm): a Python loop over the local experts, each a Megatron MLP of Transformer Engine
    #: linears (`sequential_expert_ops`); its GEMMs launch per expert as with `per_expert_launches`
    sequential_experts: bool = False
    #: rows SequentialMLP pads each expert's tokens to under FP8 (Megatron-Core `get_fp8_align_size`: 32 for
    #: MXFP8, 16 for the other FP8 recipes); 0 where it does not pad (BF16, NVFP4: `config.fp8` unset)
    expert_pad_align: int = 0
    #: RoPE runs Transformer Engine's fused kernel (`KernelOptions.rope_fusion` with position_embedding_type
    #: rope); off, Megatron-Core's eager path (`rotary_op`)
    rope_fused: bool = True
    #: how the CP ranks exchange attention inputs (`ContextParallelOptions.comm_type`): p2p, a2a or all_gather
    cp_comm: str = "p2p"

    @property
    def T(self) -> int:
        return self.act.tokens

    @property
    def Tn(self) -> int:
        return self.act.tokens // self.act.sp_div

    @property
    def low_width(self) -> float:
        """Bytes per element of a quantised GEMM input (with its scales), or of bf16 without FP8."""
        return float(self.act.numerics.gemm_input)


def avg_keys(seq: int, window: int | None) -> float:
    """Keys a query attends on average under a causal mask (with a sliding window of `window`):
    Σ_i min(i + 1, w) / s = w − w(w − 1) / (2s), which is (s + 1)/2 without a window."""
    w = seq if window is None else min(window, seq)
    return w - w * (w - 1) / (2 * seq)


def norm_op(name: str, tokens: int, dim: int, ctx: OpContext, fused_cast: bool, module: str | None = None) -> MemOp:
    """Norm: forward reads x, writes y (quantised in place when TE fuses the cast into the following
    linear: a row-wise and a column-wise copy); backward reads dy and x, writes dx."""
    out = 2 * ctx.low_width if fused_cast and ctx.low_precision else ACT
    return MemOp(name, tokens * dim * (ACT + out), tokens * dim * 3 * ACT, module)


def _residual(name: str, tokens: int, dim: int, dropout: bool) -> MemOp:
    """Bias-dropout-add: forward reads x and the residual, writes the sum (and a mask); backward only
    runs a kernel for the dropout (read dy and the mask, write dx); an add's gradient is a view."""
    fwd = tokens * dim * (3 * ACT + (MASK if dropout else 0))
    bwd = tokens * dim * (2 * ACT + MASK) if dropout else 0
    return MemOp(name, fwd, bwd)


def _activation(name: str, tokens: int, width: int, swiglu: bool, module: str | None = None) -> MemOp:
    """SwiGLU reads the 2f-wide FC1 output, writes f; backward reads dy (f) and the input (2f), writes
    dx (2f). GeLU / squared ReLU read f, write f; backward reads dy and x, writes dx."""
    if swiglu:
        return MemOp(name, tokens * width * 3 * ACT, tokens * width * 5 * ACT, module)
    return MemOp(name, tokens * width * 2 * ACT, tokens * width * 3 * ACT, module)


def tp_out(ctx: OpContext, width: int) -> tuple[Comm, ...]:
    """The row-parallel output: reduce-scatter (SP) or all-reduce in forward; the gradient's
    all-gather (SP) or nothing extra in backward (without SP the all-reduce sits on the input side)."""
    if ctx.act.tp == 1:
        return ()
    if ctx.act.sp:
        return (Comm("tp_comm", "reduce_scatter", "tp", ctx.T * width * ACT, 1, 0, "tp"),
                Comm("tp_comm", "all_gather", "tp", ctx.T * width * ACT, 0, 1, "tp"))
    return (Comm("tp_comm", "all_reduce", "tp", ctx.T * width * ACT, 1, 0, "tp"),)


def tp_in(ctx: OpContext, width: float, fp8_gather: bool) -> tuple[Comm, ...]:
    """The column-parallel input of `width` features per token: all-gather (SP; in FP8 when the input
    was quantised by a fused norm) with its backward reduce-scatter and the async wgrad re-gather, or the
    backward all-reduce of the input gradient without SP."""
    if ctx.act.tp == 1:
        return ()
    if ctx.act.sp:
        w_in = ctx.low_width if fp8_gather and ctx.low_precision else ACT
        return (Comm("tp_comm", "all_gather", "tp", ctx.T * width * w_in, 1, 0, "tp"),
                Comm("tp_comm", "reduce_scatter", "tp", ctx.T * width * ACT, 0, 1, "tp"),
                Comm("tp_comm", "all_gather", "tp", ctx.T * width * w_in, 0, 1, "wgrad"))
    return (Comm("tp_comm", "all_reduce", "tp", ctx.T * width * ACT, 0, 1, "tp"),)


def _core_attention(model: ModelSpec, ctx: OpContext, heads: int, d_qk: int, d_v: int, kv_heads: int,
                    window: int | None) -> Block:
    """Core attention on this rank (flash or unfused) plus its context-parallel exchange (`cp_comms`)."""
    a = ctx.act
    sq = a.seq_len // a.cp
    bh = a.mbs * heads
    comms = cp_comms(ctx, sq, heads, kv_heads, d_qk, d_v)
    if a.flash_attention:
        keys = avg_keys(a.seq_len, window)
        return Block("attn", attention=(Attention("core_attention", bh, sq, keys, d_qk, d_v),), comms=comms)
    skv = a.seq_len  # unfused attention materialises every score, masked or not
    scores = bh * sq * skv
    gemms = (Gemm("attention.scores", sq, skv, d_qk, bh, low=False, weight=False, cat="attention"),
             Gemm("attention.context", sq, d_v, skv, bh, low=False, weight=False, cat="attention"))
    # fused scale-mask-softmax: read scores, write probabilities; backward reads y and dy, writes dx
    mem = [MemOp("attention.softmax", scores * 2 * ACT, scores * 3 * ACT)]
    if model.attention_dropout > 0:  # dropout on the probabilities: write mask + output; backward reads dy, mask
        mem.append(MemOp("attention.dropout", scores * (2 * ACT + MASK), scores * (2 * ACT + MASK)))
    return Block("attn", gemms=gemms, memops=tuple(mem), comms=comms)


def cp_comms(ctx: OpContext, sq: int, heads: int, kv_heads: int, d_qk: int, d_v: int) -> tuple[Comm, ...]:
    """The context-parallel exchange of one layer's attention on a rank holding `sq` = seq / CP tokens of each
    sequence (Transformer Engine v2.12 dot_product_attention/context_parallel.py):

    - p2p (AttnFuncWithCPAndKVP2P): each of CP - 1 ring steps passes this rank's K and V on, and in backward
      K, V and their gradients; each step overlaps the attention of the block it holds (overlap "cp");
    - all_gather (AttnFuncWithCPAndKVAllGather): K and V are all-gathered to the full sequence before the
      forward (two collectives), gathered again in backward (only the local K and V are saved) and their
      gradients reduce-scattered; not asynchronous, so not overlapped (Megatron-Core TransformerConfig
      cp_comm_type: "The all-gather is not async, and cannot be overlapped");
    - a2a (AttnFuncWithCPAndQKVOA2A, DeepSpeed Ulysses): q, k and v each go through an all-to-all that trades
      sequence for heads, and the output comes back through one more; backward the output's gradient goes
      through one and dq, dk, dv through three (`flash_attn_a2a_communicate`). Each is issued before the
      attention that needs it: not overlapped with it.

    `nbytes` is per call: a ring step's K and V; the gathered (full) K or V; each rank's whole q, k, v or
    output (an all-to-all's nbytes, of which (CP - 1) / CP leaves the rank). The ring passes K and V to its
    neighbour (group `cp`, a pair); the all-gather, reduce-scatter and all-to-all run on the whole CP group
    (`cp_group`), so each rank moves (CP - 1) / CP of the gathered tensor, over the links the group spans."""
    a = ctx.act
    if a.cp <= 1:
        return ()
    kv_local = a.mbs * sq * kv_heads * ACT
    if ctx.cp_comm == "all_gather":
        gathered = a.cp * kv_local
        return (Comm("cp_comm", "all_gather", "cp_group", gathered * d_qk, 1, 1, "none"),
                Comm("cp_comm", "all_gather", "cp_group", gathered * d_v, 1, 1, "none"),
                Comm("cp_comm", "reduce_scatter", "cp_group", gathered * d_qk, 0, 1, "none"),
                Comm("cp_comm", "reduce_scatter", "cp_group", gathered * d_v, 0, 1, "none"))
    if ctx.cp_comm == "a2a":
        q_local = a.mbs * sq * heads * ACT
        return (Comm("cp_comm", "all_to_all", "cp_group", q_local * d_qk, 1, 1, "none"),
                Comm("cp_comm", "all_to_all", "cp_group", kv_local * d_qk, 1, 1, "none"),
                Comm("cp_comm", "all_to_all", "cp_group", kv_local * d_v, 1, 1, "none"),
                Comm("cp_comm", "all_to_all", "cp_group", q_local * d_v, 1, 1, "none"))
    # ring attention: each of cp-1 steps passes this rank's K and V on (and dK, dV back)
    return (Comm("cp_comm", "p2p", "cp", kv_local * (d_qk + d_v), a.cp - 1, 2 * (a.cp - 1), "cp"),)


#: Element-passes (reads plus writes per element of q and k) of Megatron-Core's eager RoPE, forward and
#: backward, and its kernels per tensor (`rotary_op`); the fused kernel reads and writes each element once
EAGER_ROPE_PASSES: tuple[int, int] = (12, 14)
EAGER_ROPE_KERNELS: tuple[int, int] = (12, 7)
FUSED_ROPE_PASSES = 2


def rotary_op(elements: int, fused: bool, module: str | None = None) -> MemOp:
    """RoPE on `elements` of q and k. Fused (Transformer Engine's kernel): each read and written once in
    either pass. Eager (Megatron-Core core_v0.15.0-core_v0.18.0 rope_utils.py `_apply_rotary_pos_emb_bshd`,
    called once for q and once for k; the aten ops autograd runs, traced with torch 2.13): forward `t * cos`,
    the `-x2` and the cat of `_rotate_half`, `* sin`, the sum and the cat with the (empty) pass-through part,
    6.5 reads and 5.5 writes per element in 6 kernels, plus the cos/sin tables (cos, sin, `* mscale`, `.to`: 6
    small kernels); backward `dy * sin`, the negation, the cat of the chunk's gradient, `dy * cos`, the sum of
    the two paths, the pass-through slice's gradient (`slice_backward`: a zero tensor of t's size) and its sum
    with the rest, 7.5 reads and 6.5 writes in 7 kernels. Under multi-latent attention the de-interleaving cat
    of the rotary part is not counted."""
    if fused:
        return MemOp("rotary", elements * FUSED_ROPE_PASSES * ACT, elements * FUSED_ROPE_PASSES * ACT, module)
    (fwd, bwd), (kf, kb) = EAGER_ROPE_PASSES, EAGER_ROPE_KERNELS
    return MemOp("rotary", elements * fwd * ACT, elements * bwd * ACT, module, 2 * kf, 2 * kb)  # q and k


def _standard_attention(model: ModelSpec, ctx: OpContext, window: int | None) -> Block:
    tp, T, Tn, h = ctx.act.tp, ctx.T, ctx.Tn, model.hidden_size
    heads = model.num_attention_heads // tp
    groups = max(model.query_groups // tp, 1)
    d = model.head_dim
    # torchtitan's op-level SAC keeps wq and wv outputs and re-runs wk and wo (primus.memory.activations)
    gate = heads * d if model.attention_output_gate else 0  # Megatron-Core's output gate rides in linear_qkv
    subsharded = model.query_groups < tp
    # TP above the key/value heads (Megatron-Core from core_v0.16.0, `primus.stacks.megatron_release.
    # KV_SUBSHARDING_FROM`): linear_qkv stays split over TP, (heads + 2 x groups) / TP of it per rank; its
    # output is all-gathered over TP and each rank keeps one key/value head and its own query heads
    qkv = model.linear_qkv_width // tp if subsharded else (heads + 2 * groups) * d + gate
    gemms = (Gemm("attention.linear_qkv", T, qkv, h, op_recompute=groups * d / qkv),
             Gemm("attention.linear_proj", T, h, heads * d, cast_input=True, op_recompute=1.0))
    mem = [norm_op("input_layernorm", Tn, h, ctx, fused_cast=True)]
    if gate:  # x * sigmoid(gate.float()): read x and the gate, write the product; backward reads those and dy
        mem.append(MemOp("attention.output_gate", T * gate * 3 * ACT, T * gate * 5 * ACT))
    if model.rotary:
        mem.append(rotary_op(T * (heads + groups) * d, ctx.rope_fused))
    if model.qk_layernorm:
        mem.append(norm_op("qk_layernorm", T, (heads + groups) * d, ctx, fused_cast=False))
    mem.append(_residual("attention.bias_dropout_add", Tn, h, model.hidden_dropout > 0))
    comms = tp_in(ctx, h, fp8_gather=True) + tp_out(ctx, h)
    if subsharded:  # all_gather_last_dim_from_tensor_parallel_region; its backward reduce-scatters the gradient
        full = T * (qkv - gate) * tp * ACT
        comms += (Comm("tp_comm", "all_gather", "tp", full, 1, 0, "none"),
                  Comm("tp_comm", "reduce_scatter", "tp", full, 0, 1, "none"))
    core = _core_attention(model, ctx, heads, d, d, groups, window)
    return Block("attention", gemms, (), tuple(mem), comms) + core


def _mla_attention(model: ModelSpec, ctx: OpContext, window: int | None) -> Block:
    """Multi-latent attention (DeepSeek-V2/V3 in Megatron-Core): replicated down-projections on the
    local tokens, the compressed latents gathered across TP, TP-split up-projections."""
    tp, T, Tn, h = ctx.act.tp, ctx.T, ctx.Tn, model.hidden_size
    heads = model.num_attention_heads // tp
    qk, rope, v = model.qk_head_dim or 0, model.qk_pos_emb_head_dim or 0, model.v_head_dim or 0
    kv_lora = model.kv_lora_rank or 0
    gemms: list[Gemm] = []
    up = "mla_up_proj"  # the recompute module that re-runs the up-projections, their norms and RoPE
    mem = [norm_op("input_layernorm", Tn, h, ctx, fused_cast=True, module="layernorm")]
    comms: tuple[Comm, ...] = ()
    if model.q_lora_rank is not None:
        gemms.append(Gemm("attention.linear_q_down_proj", Tn, model.q_lora_rank, h))
        mem.append(norm_op("q_layernorm", Tn, model.q_lora_rank, ctx, fused_cast=True, module=up))
        gemms.append(Gemm("attention.linear_q_up_proj", T, heads * (qk + rope), model.q_lora_rank, module=up))
        comms += tp_in(ctx, model.q_lora_rank, fp8_gather=True)
    else:
        gemms.append(Gemm("attention.linear_q_proj", T, heads * (qk + rope), h))
        comms += tp_in(ctx, h, fp8_gather=True)
    gemms.append(Gemm("attention.linear_kv_down_proj", Tn, kv_lora + rope, h))
    mem.append(norm_op("kv_layernorm", Tn, kv_lora, ctx, fused_cast=True, module=up))
    gemms.append(Gemm("attention.linear_kv_up_proj", T, heads * (qk + v), kv_lora, module=up))
    comms += tp_in(ctx, kv_lora + rope, fp8_gather=True)
    gemms.append(Gemm("attention.linear_proj", T, h, heads * v, cast_input=True))
    comms += tp_out(ctx, h)
    mem.append(rotary_op(T * (heads + 1) * rope, ctx.rope_fused, up))  # on q_pe (per head) and the shared k_pe
    mem.append(_residual("attention.bias_dropout_add", Tn, h, model.hidden_dropout > 0))
    core = _core_attention(model, ctx, heads, qk + rope, v, heads, window)
    return Block("attention", tuple(gemms), (), tuple(mem), comms) + core


@lru_cache(maxsize=4096)
def _mlp_block(model: ModelSpec, kind: str, ctx: OpContext) -> Block:
    """A layer's MLP (MoE or dense), cached: layers with and without a sliding window share it."""
    return _moe_mlp(model, ctx) if kind == "moe" else _dense_mlp(model, ctx)


@lru_cache(maxsize=4096)
def _attention_block(model: ModelSpec, ctx: OpContext, window: int | None) -> Block:
    """`_attention`, cached: it reads neither EP nor ETP, so a layer's attention is built once for every
    expert layout of its shape context (callers pass EP = ETP = 1)."""
    return _attention(model, ctx, window)


def _attention(model: ModelSpec, ctx: OpContext, window: int | None) -> Block:
    return _mla_attention(model, ctx, window) if model.multi_latent_attention else \
        _standard_attention(model, ctx, window)


def _mlp(model: ModelSpec, ctx: OpContext, name: str, ffn: int, norm_fused: bool, module: str | None = None) -> Block:
    """A TP-split MLP (dense layer or shared experts): FC1 (column), activation, FC2 (row). `module`:
    the recompute module that re-runs it (a dense layer's `mlp`)."""
    T, h, tp = ctx.T, model.hidden_size, ctx.act.tp
    fc1 = model.fc1_width(ffn) // tp
    # torchtitan's op-level SAC keeps w1 and w2 outputs and re-runs w3 (the second half of a SwiGLU FC1)
    gemms = (Gemm(f"{name}.linear_fc1", T, fc1, h, cast_input=not norm_fused,
                  op_recompute=0.5 if model.swiglu else 0.0, module=module),
             Gemm(f"{name}.linear_fc2", T, h, ffn // tp, cast_input=True, module=module))
    mem = (_activation(f"{name}.activation", T, ffn // tp, model.swiglu, module),)
    comms = tp_in(ctx, h, fp8_gather=norm_fused) + tp_out(ctx, h)
    return Block("mlp", gemms, (), mem, comms)


def _dense_mlp(model: ModelSpec, ctx: OpContext) -> Block:
    # the norm is fused into FC1, so the `mlp` recompute re-runs it with the MLP
    norm = Block("mlp", memops=(norm_op("pre_mlp_layernorm", ctx.Tn, model.hidden_size, ctx, fused_cast=True,
                                        module="mlp"),
                                _residual("mlp.bias_dropout_add", ctx.Tn, model.hidden_size,
                                          model.hidden_dropout > 0)))
    return norm + _mlp(model, ctx, "mlp", model.ffn_hidden_size or 0, norm_fused=True, module="mlp")


def unfused_permutation_rows(tn: int, copies: int) -> tuple[int, int, int, int]:
    """Rows of `hidden` elements Megatron-Core's unfused permutation moves beyond the fused kernels', per
    MoE layer: (permute forward, permute backward, unpermute forward, unpermute backward).

    core_v0.14.0 moe_utils.py: `permute` is `tokens.index_select(0, sorted_indices)`, which reads every
    top-k copy's source row (the fused kernel reads each token once: copies - Tn more); its backward is
    `index_add_` into a new `zeros` buffer (Tn written, then Tn read and written again around the
    accumulation: 2 Tn more than the fused kernel's one write). `unpermute` is `torch.zeros(restore_shape)`
    then `scatter_add_` of the copies (the same 2 Tn more); its backward gathers the copies' gradients
    row by row (copies read instead of Tn: copies - Tn more). The probabilities are applied inside the
    experts in this release, so neither path multiplies by them here."""
    return copies - tn, 2 * tn, 2 * tn, copies - tn


def _moe_mlp(model: ModelSpec, ctx: OpContext) -> Block:
    """Router, token dispatch over EP (all-to-all; all-gather for Megatron's `allgather` dispatcher; a
    deduplicating dispatch for `flex`), all-gather over ETP, grouped expert GEMMs, combine.

    Permutation kernels: before the dispatch the fused permute reads each of the Tn tokens once and
    writes its top-k copies, and after it the R received rows are sorted by local expert (read and
    written); the combine sorts back (R read and written) and the probability-weighted unpermute reads
    the copies and writes Tn rows. Backward moves the same bytes the other way.
    """
    a, Tn, h = ctx.act, ctx.Tn, model.hidden_size
    experts = model.num_experts or 0
    topk = model.topk
    R = routed_tokens(model, a)
    local = -(-experts // ctx.ep)
    per_expert = -(-R // local)
    ffn = model.moe_ffn_hidden_size or 0
    fc1 = model.fc1_width(ffn) // a.etp
    low = a.experts_low  # the legacy GroupedMLP runs its grouped GEMMs in bf16 whatever the job's format
    launches = local if ctx.per_expert_launches else 1
    gemms = [Gemm("mlp.router", Tn, experts, h, low=False),
             Gemm("mlp.experts.linear_fc1", per_expert, fc1, h, count=local, low=low, cast_input=low,
                  launches=launches),
             Gemm("mlp.experts.linear_fc2", per_expert, h, ffn // a.etp, count=local, low=low, cast_input=low,
                  launches=launches)]
    copies = Tn * topk
    pf, pb, uf, ub = (0, 0, 0, 0) if ctx.permute_fusion else unfused_permutation_rows(Tn, copies)
    mem = [
        norm_op("pre_mlp_layernorm", Tn, h, ctx, fused_cast=False, module="layernorm"),
        # router: bf16 logits read, fp32 probabilities written and read by top-k; backward likewise
        MemOp("mlp.router.softmax_topk", Tn * experts * (ACT + 2 * FP32), Tn * experts * 3 * FP32),
        MemOp("mlp.permute", (Tn + copies + 2 * R + pf) * h * ACT, (Tn + copies + 2 * R + pb) * h * ACT),
        *(() if ctx.fused_grouped_mlp else (_expert_activation(model, ctx, R, local, ffn // a.etp),)),
        *(sequential_expert_ops(ctx, R, local, h) if ctx.sequential_experts else ()),
        *_megatron_expert_extras(model, ctx, R, local, ffn // a.etp),
        MemOp("mlp.unpermute", (2 * R + copies + Tn + uf) * h * ACT, (2 * R + copies + Tn + ub) * h * ACT),
        _residual("mlp.bias_dropout_add", Tn, h, model.hidden_dropout > 0),
    ]
    comms: list[Comm] = []
    factor = a.moe_capacity_factor or a.moe_imbalance  # the busiest rank sets the pace
    if ctx.ep > 1 and ctx.dispatcher == "allgather":  # every rank gathers all tokens, combine reduce-scatters
        full = ctx.ep * Tn * h * ACT
        comms.append(Comm("ep_a2a", "all_gather", "ep", full, 1, 1, "ep"))
        comms.append(Comm("ep_a2a", "reduce_scatter", "ep", full, 1, 1, "ep"))
    elif ctx.ep > 1 and ctx.dispatcher == "flex":  # each token crosses to a remote domain once, fans out inside
        comms.append(Comm("ep_a2a", "dispatch", "ep", Tn * h * ACT * factor, 2, 2, "ep", fanout=topk))
    elif ctx.ep > 1:
        comms.append(Comm("ep_a2a", "all_to_all", "ep", copies * h * ACT * factor, 2, 2, "ep"))
    if a.etp > 1:
        comms.append(Comm("ep_a2a", "all_gather", "etp", R * h * ACT, 1, 1, "ep"))
        comms.append(Comm("ep_a2a", "reduce_scatter", "etp", R * h * ACT, 1, 1, "ep"))
    block = Block("mlp", tuple(gemms), (), tuple(mem), tuple(comms))
    if model.moe_shared_expert_intermediate_size:
        block = block + _mlp(model, ctx, "mlp.shared_experts", model.moe_shared_expert_intermediate_size,
                             norm_fused=False)
    return block


def fp8_align_rows(fp8_recipe: str | None) -> int:
    """Rows SequentialMLP pads each expert's tokens to: Megatron-Core fp8_utils.py `get_fp8_align_size`
    (core_v0.16.0 lines 168-173), 32 for MXFP8 and 16 for the other FP8 recipes; 0 without FP8 (`config.fp8`
    unset: BF16, and NVFP4, which is `config.fp4`), where it does not pad."""
    if fp8_recipe is None:
        return 0
    return 32 if fp8_recipe == "mxfp8" else 16


def _expert_activation(model: ModelSpec, ctx: OpContext, R: int, local: int, f: int) -> MemOp:
    """The experts' GLU over all R routed rows: one kernel for a grouped MLP, one per local expert in each
    direction for SequentialMLP (each expert's `MLP.forward` calls the fused weighted GLU on its own rows)."""
    op = _activation("mlp.experts.activation", R, f, model.swiglu, "moe_act")
    return replace(op, launches=local, bwd_launches=local) if ctx.sequential_experts else op


def sequential_expert_ops(ctx: OpContext, R: int, local: int, h: int) -> tuple[MemOp, ...]:
    """What Megatron-Core's SequentialMLP moves beyond a grouped MLP, for R routed rows of width h over
    `local` experts (core_v0.16.0 megatron/core/transformer/moe/experts.py lines 1068-1120, the same from
    core_v0.11.0 to core_v0.18.0):

    - `torch.split` of the rows per expert is a view; its backward is a `cat` of the experts' input
      gradients (R rows read and written), and the forward's `torch.cat` of their outputs copies R rows;
      the cat's backward is a view again. One kernel each.
    - under FP8 each expert's rows are padded to `get_fp8_align_size` (`_pad_tensor_for_fp8`: a `zeros`
      and a `cat`, then the output sliced back), which copies the expert's rows once more in forward and,
      through the slice's backward (a zeroed padded gradient with the rows copied in), in backward. Only an
      expert whose row count is not a multiple of the alignment pads; with routing balanced, as primus
      sizes it (`routed_tokens`), every expert holds ⌈R / local⌉ rows, so all pad or none do.

    `tokens_per_expert.tolist()` costs no host wait of its own: every dispatcher has already moved the
    counts to the host (the alltoall dispatcher at its `before_ep_alltoall` point, priced as the MoE
    layer's host round trip)."""
    per_expert = -(-R // local)
    ops = [MemOp("mlp.experts.sequential_cat", R * h * 2 * ACT, R * h * 2 * ACT)] if local > 1 else []
    align = ctx.expert_pad_align
    if align and per_expert % align:  # one local expert pads too (lines 1088-1094)
        padded = local * (-(-per_expert // align) * align)
        ops.append(MemOp("mlp.experts.fp8_pad", (R + padded) * h * ACT, (padded + R) * h * ACT,
                         launches=2 * local, bwd_launches=2 * local))
    return tuple(ops)


def _megatron_expert_extras(model: ModelSpec, ctx: OpContext, R: int, local: int, f: int) -> list[MemOp]:
    """Eager work Megatron-Core's TEGroupedMLP (`OpContext.per_expert_launches`) adds around the fused
    kernels, read at core_v0.16.0 (the same at the Megatron-Core of every Megatron-Bridge release 25.11 to
    26.06), for R routed rows of an f-wide activation:

    - `activation_func_clamp_value` (gpt-oss): fused_bias_geglu.py `weighted_bias_quick_geglu_impl` (lines
      410-442) chunks the 2f-wide FC1 output, clamps each half and concatenates them before the fused GLU:
      forward two clamps (read and write f each) and a cat (read and write 2f), 16f bytes; backward PyTorch's
      `clamp_backward`, `where(mask, dy, 0)` with its mask from `ge`/`le` (and `logical_and_` for the
      two-sided half): 14 bytes per element of the linear half and 8 of the gate half, then the chunk's
      gradient cat (read and write 2f), 30f bytes; 3 kernels forward, 7 backward. The same function builds
      `torch.tensor(linear_offset, device=...)` from a Python float on every call (line 434), a blocking
      host-to-device copy: PyTorch copies a CPU tensor to the GPU with `memcpy_and_sync` (cudaMemcpyAsync,
      then cudaStreamSynchronize) unless non_blocking (aten/src/ATen/native/cuda/Copy.cu `copy_kernel_cuda`;
      pytorch/pytorch issues 120996 and 190217), so one more host round trip per MoE layer forward, and one
      per recompute of `moe_act`.
    - expert biases (`add_bias_linear`): FC2 runs with skip_bias_add, and `TEGroupedMLP._apply_bias`
      (experts.py lines 608-626) adds them in a Python loop over the local experts, `t + b * p` per expert,
      then one cat of the h-wide output: forward b*p written, t and b*p read and the sum written, the cat
      read and written (6 elements per row and feature); backward each expert's bias and probability
      gradients, a product and a reduction each, and the cat that `torch.split`'s gradient is (8). With the
      flex dispatcher the probabilities are fp32 (token_dispatcher.py lines 1028-1034) and so are these
      intermediates: forward 28 bytes with the `.to(bf16)` cast, backward 40 (the casts of the gradient to
      fp32 and, per expert, back to bf16 for `t`). Kernels: 2 per expert forward plus the cat (and the cast),
      4 per expert backward (5 with the cast) plus the cat (and the cast).
    Both run inside the `moe_act` recompute region only for the clamp (the bias add follows FC2).

    SequentialMLP (`OpContext.sequential_experts`) runs the same functions per expert: its `MLP.forward`
    (mlp.py lines 172-190) calls `weighted_bias_quick_geglu_impl` on each expert's rows, so the clamp's
    kernels and its host round trip come once per local expert, and adds the FC2 bias as `output +=
    output_bias * per_token_scale` (lines 229-233), the per-expert loop priced above."""
    if not ctx.per_expert_launches:
        return []
    out: list[MemOp] = []
    calls = local if ctx.sequential_experts else 1  # SequentialMLP calls the GLU once per expert
    if model.activation_func_clamp_value is not None:
        out.append(MemOp("mlp.experts.activation_clamp", R * f * 16, R * f * 30, "moe_act", 3 * calls, 7 * calls,
                         host_syncs=calls))
    if model.add_bias_linear:
        h = model.hidden_size
        if ctx.dispatcher == "flex":  # fp32 intermediates: b*p 4, t + b*p 2 + 4 + 4, cat 4 + 4, to(bf16) 4 + 2
            out.append(MemOp("mlp.experts.bias_add", R * h * 28, R * h * 40, None, 2 * local + 2, 5 * local + 2))
        else:
            out.append(MemOp("mlp.experts.bias_add", R * h * 6 * ACT, R * h * 8 * ACT, None, 2 * local + 1,
                             4 * local + 1))
    return out


@lru_cache(maxsize=4096)
def expert_free(ctx: OpContext) -> OpContext:
    """The context with EP = ETP = 1: what blocks that read neither (attention, dense layers, the
    embedding and the loss) are built in, so one build serves every expert layout (cached: a bounded
    search asks for it once per block of thousands of contexts)."""
    return ctx if ctx.ep == 1 and ctx.act.etp == 1 else replace(ctx, ep=1, act=replace(ctx.act, etp=1))


@lru_cache(maxsize=4096)
def layer_block(model: ModelSpec, kind: str, ctx: OpContext, window: int | None = None) -> Block:
    """One decoder layer ("dense" or "moe") for one microbatch on one rank."""
    mlp = _mlp_block(model, kind, ctx)
    plain = expert_free(ctx)
    b = _attention_block(model, plain, window) + mlp
    if model.norm_placement == "sandwich":  # Gemma 2/3: a norm on each sublayer's output as well
        b = b + Block(kind, memops=tuple(norm_op(name, ctx.Tn, model.hidden_size, ctx, fused_cast=False)
                                         for name in ("post_attention_layernorm", "post_mlp_layernorm")))
    return Block(kind, b.gemms, b.attention, b.memops, b.comms)


def gemm_weights(block: Block) -> int:
    """Weight elements of a block's GEMMs on this rank (for cross-checks against the parameter counter)."""
    return sum(g.n * g.k * g.count for g in block.gemms if g.weight)
