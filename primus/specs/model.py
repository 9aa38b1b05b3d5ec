"""The model architecture, in Megatron-LM argument names.

Users of Megatron recognise `num_query_groups`, `ffn_hidden_size` or `moe_layer_freq` on sight, so
model files use exactly those names. Megatron's own defaults apply where Megatron has one (tied
embeddings, biased linears, LayerNorm, learned absolute positions); a *dimension* is never defaulted:
an MoE model without `moe_ffn_hidden_size`, or MLA without `kv_lora_rank`, is an error, not a guess.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from functools import cached_property
from typing import Annotated, Final, Literal

from pydantic import Field, PrivateAttr, model_validator

from primus.specs.base import Bool, ByteCount, Fraction, Name, NonNegFloat, PosFloat, PosInt, Spec, Text

#: the longest per-layer pattern read or built (it bounds the memory a pattern takes; the deepest
#: published decoders have 126 layers)
MAX_PATTERN_LAYERS = 100_000

_FREQ_PATTERN = re.compile(r"^\s*\(?\s*(\[[01]\]\s*\*\s*\d+\s*(\+\s*\[[01]\]\s*\*\s*\d+\s*)*)\)?\s*$")


def every_nth(n: int) -> tuple[bool, ...]:
    """The period of "every n-th layer is MoE": one MoE layer, then n − 1 dense ones."""
    return (True,) + (False,) * (n - 1)


def moe_layer_pattern(num_layers: int, *, first: int = 0, period: Sequence[bool] = (True,),
                      dense: Collection[int] = ()) -> tuple[bool, ...]:
    """The one derivation of a per-layer MoE pattern from a rule: the layers before `first` are dense,
    `period` repeats from layer `first`, and the listed `dense` layers are dense whatever the period says.
    Megatron's int N is `period=every_nth(N)`; DeepSeek's `first_k_dense_replace` k with `moe_layer_freq`
    f starts at the first multiple of f from k; Qwen's `decoder_sparse_step` s and Llama 4's
    `interleave_moe_layer_step` s start at layer s − 1 with `every_nth(s)` (Qwen's `mlp_only_layers`
    are `dense`); an override of `num_layers` re-applies the rule `layer_rule` finds."""
    return tuple(i >= first and period[(i - first) % len(period)] and i not in dense for i in range(num_layers))


def parse_layer_freq(value: int | tuple[int, ...] | list[int] | str, num_layers: int) -> tuple[bool, ...]:
    """Megatron's `moe_layer_freq`: an int N (every N-th layer is MoE, counting from layer 0), a 0/1 list
    of length `num_layers`, or Megatron's string form `([0]*3+[1]*58)` (first-k dense)."""
    if isinstance(value, bool):
        raise ValueError("moe_layer_freq must be an int, a 0/1 list or a string like '([0]*3+[1]*58)'")
    if isinstance(value, int):
        if value < 1:
            raise ValueError("moe_layer_freq must be >= 1")
        return moe_layer_pattern(num_layers, period=every_nth(value))
    if isinstance(value, str):
        match = _FREQ_PATTERN.match(value)
        if not match:
            raise ValueError(f"moe_layer_freq string {value!r} is not of the form '([0]*k+[1]*n)'")
        pattern: list[int] = []
        for bit, count in re.findall(r"\[([01])\]\s*\*\s*(\d+)", value):
            if int(count) > MAX_PATTERN_LAYERS:
                raise ValueError("moe_layer_freq repeat count too large")
            pattern.extend([int(bit)] * int(count))
        value = tuple(pattern)
    if len(value) != num_layers:
        raise ValueError(f"moe_layer_freq has {len(value)} entries but num_layers is {num_layers}")
    if any(v not in (0, 1) or isinstance(v, bool) for v in value):
        raise ValueError("moe_layer_freq list entries must be 0 or 1")
    return tuple(bool(v) for v in value)


#: the spellings `moe_layer_freq` accepts, quoted where a refusal asks for one
LAYER_FREQ_SPELLINGS = "an int N (every N-th layer from layer 0), a 0/1 list of num_layers entries, or '([0]*k+[1]*n)'"


def layer_rule(pattern: tuple[bool, ...]) -> tuple[int, tuple[bool, ...]] | None:
    """The rule behind a per-layer MoE pattern, when it has one: `k` dense layers first, then a period
    repeated from layer k. This covers every rule the configs use — Megatron's int N (k 0, period
    MoE-then-N-1 dense), DeepSeek's `first_k_dense_replace` (period one MoE layer), Qwen's
    `decoder_sparse_step` and Llama 4's `interleave_moe_layer_step` (MoE on each step-th layer, counted
    from 1) — and each one decides a layer's kind from its index alone, so the rule holds at any depth.
    The period must be seen twice after the dense layers; a pattern without such a rule (a listed layer
    kept dense in the middle, dense layers at the end) gives None."""
    if True not in pattern:
        return None
    k = pattern.index(True)
    tail = pattern[k:]
    for period in range(1, len(tail) // 2 + 1):
        if all(bit == tail[i % period] for i, bit in enumerate(tail)):
            return k, tail[:period]
    return None


def follow_num_layers(value: int | tuple[int, ...] | list[int] | str, old_layers: int,
                      new_layers: int) -> tuple[int | str | tuple[int, ...], str | None]:
    """`moe_layer_freq` for a model whose `num_layers` is overridden (`{base: deepseek-v3, num_layers: 8}`):
    the same rule (`layer_rule`) at the new depth, in Megatron's spelling (an int, '([0]*k+[1]*n)', or
    a 0/1 list), and a sentence saying so for the model's notes (None when nothing changed: an int
    already holds at any depth). ValueError naming moe_layer_freq when the pattern has no rule."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, None
    if new_layers > MAX_PATTERN_LAYERS:
        raise ValueError(f"num_layers {new_layers} exceeds the {MAX_PATTERN_LAYERS:,} layers an MoE layer pattern"
                         " may have")
    rule = layer_rule(parse_layer_freq(value, old_layers))
    if rule is None:
        raise ValueError(
            f"moe_layer_freq is a per-layer pattern of {old_layers} layers with no first-k-dense or every-n-th"
            f" rule, so it cannot follow num_layers {new_layers}; override moe_layer_freq too ({LAYER_FREQ_SPELLINGS})")
    dense, period = rule
    if new_layers <= dense:
        raise ValueError(
            f"moe_layer_freq keeps the first {dense} layers dense, so num_layers {new_layers} leaves no MoE layer;"
            f" override moe_layer_freq too ({LAYER_FREQ_SPELLINGS})")
    pattern = [int(moe) for moe in moe_layer_pattern(new_layers, first=dense, period=period)]
    shown: int | str | tuple[int, ...] = tuple(pattern)
    if len(period) == 1:
        shown = 1 if dense == 0 else f"([0]*{dense}+[1]*{new_layers - dense})"
        rule_text = f"the first {dense} dense, then every layer MoE" if dense else "every layer MoE"
    elif not any(period[1:]):
        shown = len(period) if dense == 0 else shown
        rule_text = f"every {len(period)}-th layer MoE from layer {dense}"
    else:
        rule_text = (f"the first {dense} dense, then " if dense else "") + \
            "the period " + "".join(str(int(b)) for b in period) + " repeated"
    return shown, (f"num_layers {new_layers} (the base has {old_layers}): moe_layer_freq re-derived by its rule"
                   f" ({rule_text}): {sum(pattern)} MoE and {new_layers - sum(pattern)} dense layers")


class PublishedParams(Spec):
    """A published parameter count, with the precision it was published to (for tests and `models show`)."""

    total: ByteCount | None = None
    active: ByteCount | None = None
    #: the publisher's `active` leaves the input embedding out (DeepSeek, Moonshot, OpenAI); compare it
    #: with the counter's `active_without_input_embedding`, not its `active`
    active_excludes_input_embedding: Bool = False
    exact: Bool = False
    source: Text


#: The most decoder layers a model may have (`ModelSpec.num_layers`).
MAX_LAYERS: Final = 10_000


class ModelSpec(Spec):
    """A decoder-only transformer, dense or MoE, described with Megatron-LM's argument names."""

    name: Name
    display_name: Text | None = None
    source: Text | None = None
    notes: Text | None = None
    published: PublishedParams | None = None

    #: at most MAX_LAYERS: ten times the deepest transformer trained (DeepNet, Wang et al. 2022: 1,000 layers);
    #: per-layer work grows linearly with it, so 10^9 layers would take hours to answer instead of failing
    num_layers: Annotated[int, Field(ge=1, le=MAX_LAYERS)]
    hidden_size: PosInt
    ffn_hidden_size: PosInt | None = None
    num_attention_heads: PosInt
    num_query_groups: PosInt | None = None
    kv_channels: PosInt | None = None
    vocab_size: PosInt
    make_vocab_size_divisible_by: PosInt = 128
    #: "yarn": rotary embeddings with YaRN's frequency scaling (Megatron-Core GPTModel's
    #: position_embedding_type 'yarn', YarnRotaryEmbedding; gpt-oss: HF rope_scaling rope_type yarn). The
    #: same weights and saved bytes as "rope"; what differs is which kernel applies it: Megatron-LM
    #: (arguments.py, core_v0.15.0 lines 1004-1005) and Megatron-Bridge (gpt_provider.py `provide`,
    #: utils/fusions.py `validate_rope_fusion_compatibility`, v0.2.0 to v0.6.0) turn the fused RoPE kernel
    #: off for any type but "rope", so it runs Megatron-Core's eager `_apply_rotary_pos_emb_bshd`
    position_embedding_type: Literal["rope", "yarn", "learned_absolute", "alibi", "none"] = "learned_absolute"
    #: YaRN's context-extension factor (Megatron-Core ``yarn_rotary_scaling_factor``, HF rope_scaling
    #: ``factor``; gpt-oss 32); required with position_embedding_type yarn
    yarn_rotary_scaling_factor: PosFloat | None = None
    #: the RoPE base (Megatron-LM ``--rotary-base``, an integer, default 10000; HF ``rope_theta``): it changes no
    #: byte or step time, but a launch file without it trains another RoPE, so `export` writes it and says
    #: so where a rotary model's entry does not give it. This and the two below are read only with rotary
    #: embeddings (a base model's, overridden to learned positions, are ignored)
    rotary_base: PosInt | None = None
    #: Llama 3.x's RoPE frequency scaling factor (Megatron-LM ``--use-rope-scaling --rope-scaling-factor``,
    #: core_v0.10.0 and core_v0.11.0 on; HF rope_scaling rope_type llama3 ``factor``: 8 for Llama 3.1). Megatron-Core
    #: applies it with low/high frequency factors 1 and 4 over 8,192 original positions
    #: (rotary_pos_embedding.py `_apply_scaling`, core_v0.18.0), Llama 3.1's own; None: no such scaling
    rope_scaling_factor: PosFloat | None = None
    #: the share of each head's dimensions that RoPE rotates (Megatron-LM ``--rotary-percent``, default 1.0; HF
    #: ``partial_rotary_factor``; NeMo's Nemotron-3 and -4 configs 0.5); None: all of them
    rotary_percent: Annotated[float, Field(gt=0, le=1)] | None = None
    #: the YaRN scaling multi-latent attention applies to its rotary part (Megatron-Core MLATransformerConfig
    #: rope_type "yarn", its default: `--rotary-scaling-factor`, `--mscale`, `--mscale-all-dim`; HF rope_scaling
    #: type yarn `factor`, `mscale`, `mscale_all_dim`: DeepSeek-V3 40, 1.0, 1.0). Like the RoPE fields above
    #: they change no byte or second, only what an exported launch line trains; read only with MLA. None:
    #: Megatron-LM's default, which differs by release for the last (1.0 in core_v0.12.0, 0.0 from core_v0.15.0)
    mla_rotary_scaling_factor: PosFloat | None = None
    mla_mscale: PosFloat | None = None
    mla_mscale_all_dim: NonNegFloat | None = None
    max_position_embeddings: PosInt | None = None
    untie_embeddings_and_output_weights: Bool = False
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    embedding_layernorm: Bool = False
    swiglu: Bool = False
    squared_relu: Bool = False
    add_bias_linear: Bool = True
    add_qkv_bias: Bool = False
    #: a bias on the attention output projection without `add_bias_linear` (PhiMoE's attention_bias
    #: covers q, k, v and o while its experts have none); row-parallel, so replicated across TP
    add_proj_bias: Bool = False
    #: a bias on the output layer (PhiMoE's lm_head_bias), one per vocabulary row
    output_layer_bias: Bool = False
    qk_layernorm: Bool = False
    #: True: q and k are normalised per head with one head_dim-wide weight each (Megatron, Qwen3, Gemma 3,
    #: GLM-4.5); False: over the whole q and k projections (OLMo 2, OLMoE: weights of heads × head_dim and
    #: query_groups × head_dim, split across TP with the heads)
    qk_layernorm_per_head: Bool = True
    #: False: the q/k norms have no learnable scale (torchtitan's Muse Glimmer builds them with
    #: ``elementwise_affine=False``): no parameters, the same saved inputs and statistics
    qk_layernorm_affine: Bool = True
    #: Megatron-Core's ``attention_output_gate`` (Qwen3-Next; torchtitan's Muse Glimmer ``o_gate``): the
    #: QKV projection also yields a per-head gate of heads × head_dim, and the attention output is
    #: multiplied by its sigmoid before ``linear_proj`` (megatron/core/transformer/attention.py
    #: ``_apply_output_gate``, Megatron-LM d98e8a6)
    attention_output_gate: Bool = False
    #: where the decoder layer normalises: "pre" (Megatron: before attention and MLP), "post" (OLMo 2: on
    #: the attention and MLP outputs, before the residual add; the same weights and saved bytes as "pre"),
    #: "sandwich" (Gemma 2 and 3: both, four norms per layer)
    norm_placement: Literal["pre", "post", "sandwich"] = "pre"
    softmax_type: Literal["vanilla", "learnable"] = "vanilla"
    #: Megatron-Core's ``activation_func_clamp_value`` (TransformerConfig, core_v0.16.0 transformer_config.py
    #: line 184; Megatron-LM's ``--activation-func-clamp-value`` from core_v0.15.0, which export writes and
    #: import reads): the GLU's two halves are clamped before the activation (gpt-oss:
    #: 7, HF ``swiglu_limit``). Megatron-Core clamps them in eager ops outside its fused activation
    #: (fused_bias_geglu.py ``weighted_bias_quick_geglu_impl``), which the projection and the ledger price
    activation_func_clamp_value: PosFloat | None = None
    hidden_dropout: Fraction = 0.1
    attention_dropout: Fraction = 0.1
    window_size: PosInt | None = None
    window_attn_skip_freq: PosInt | None = None

    num_experts: PosInt | None = None
    moe_router_topk: PosInt | None = None
    moe_ffn_hidden_size: PosInt | None = None
    moe_shared_expert_intermediate_size: PosInt | None = None
    moe_layer_freq: int | tuple[int, ...] | str = 1
    moe_router_bias: Bool = False
    #: Megatron-Core's moe_shared_expert_gate: a sigmoid gate (one h-wide weight) on the shared expert's
    #: output (Qwen2-MoE's shared_expert_gate)
    moe_shared_expert_gate: Bool = False

    multi_latent_attention: Bool = False
    q_lora_rank: PosInt | None = None
    kv_lora_rank: PosInt | None = None
    qk_head_dim: PosInt | None = None
    qk_pos_emb_head_dim: PosInt | None = None
    v_head_dim: PosInt | None = None

    mtp_num_layers: int = Field(default=0, ge=0, le=16)

    #: constant scalings and caps the source config applies (attention and final-logit soft-capping,
    #: Gemma's sqrt(hidden) embedding scale, Granite's embedding/residual/attention/logits multipliers):
    #: no parameters, no saved bytes, no GEMM FLOPs, so nothing counts them; recorded so an import shows
    #: what it read
    scalings: dict[Annotated[str, Field(max_length=100)], PosFloat] | None = None

    _hash: int | None = PrivateAttr(default=None)

    def __hash__(self) -> int:
        """Cached: specs key many caches, and pydantic's field-by-field hash is slow."""
        private = self.__pydantic_private__
        assert private is not None
        cached = private.get("_hash")
        if cached is None:
            cached = private["_hash"] = hash(self.model_dump_json())
        return cached

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        heads = self.num_attention_heads
        if self.num_query_groups is not None and heads % self.num_query_groups:
            raise ValueError(
                f"num_attention_heads ({heads}) must be divisible by num_query_groups ({self.num_query_groups})"
            )
        if self.kv_channels is None and not self.multi_latent_attention and self.hidden_size % heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads ({heads});"
                " give kv_channels (Megatron asserts this)"
            )
        if self.swiglu and self.squared_relu:
            raise ValueError("swiglu and squared_relu are mutually exclusive")
        if self.position_embedding_type == "learned_absolute" and self.max_position_embeddings is None:
            raise ValueError("position_embedding_type learned_absolute needs max_position_embeddings")
        if self.position_embedding_type == "yarn":
            if self.yarn_rotary_scaling_factor is None:
                raise ValueError("position_embedding_type yarn needs yarn_rotary_scaling_factor")
            if self.multi_latent_attention:
                raise ValueError("position_embedding_type yarn is for standard attention: multi-latent attention "
                                 "applies its own rotary part (state it as rope)")
        elif self.yarn_rotary_scaling_factor is not None:
            raise ValueError(f"yarn_rotary_scaling_factor is read only with position_embedding_type yarn "
                             f"(this model's is {self.position_embedding_type}; set yarn_rotary_scaling_factor: null)")
        if self.rope_scaling_factor is not None and self.position_embedding_type == "yarn":
            raise ValueError("rope_scaling_factor is Llama 3's scaling of plain RoPE; YaRN's factor is "
                             "yarn_rotary_scaling_factor")
        if self.num_experts is not None:
            if self.moe_router_topk is None:
                raise ValueError("an MoE model (num_experts set) needs moe_router_topk")
            if self.moe_router_topk > self.num_experts:
                raise ValueError(f"moe_router_topk ({self.moe_router_topk}) exceeds num_experts ({self.num_experts})")
            if self.moe_ffn_hidden_size is None:
                raise ValueError("an MoE model (num_experts set) needs moe_ffn_hidden_size")
            parse_layer_freq(self.moe_layer_freq, self.num_layers)
        if self.has_dense_layers and self.ffn_hidden_size is None:
            raise ValueError("ffn_hidden_size is required for a model with dense MLP layers")
        if self.multi_latent_attention:
            for key in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
                if getattr(self, key) is None:
                    raise ValueError(f"multi_latent_attention needs {key}")
        if self.moe_shared_expert_gate and not self.moe_shared_expert_intermediate_size:
            raise ValueError("moe_shared_expert_gate needs moe_shared_expert_intermediate_size (a shared expert)")
        if not self.qk_layernorm_per_head and (not self.qk_layernorm or self.multi_latent_attention):
            raise ValueError("qk_layernorm_per_head false needs qk_layernorm (and standard attention)")
        if not self.qk_layernorm_affine and (not self.qk_layernorm or self.multi_latent_attention):
            raise ValueError("qk_layernorm_affine false needs qk_layernorm (and standard attention)")
        if self.attention_output_gate and self.multi_latent_attention:
            raise ValueError("attention_output_gate is modelled for standard attention, not multi-latent attention")
        if self.window_attn_skip_freq is not None and self.window_size is None:
            raise ValueError("window_attn_skip_freq needs window_size")
        return self

    # ---- derived structure (cached: the spec is frozen) ----

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def rotary(self) -> bool:
        """Rotary position embeddings on q and k (plain RoPE or YaRN-scaled): no weights; which kernel applies
        them is the framework's (`KernelOptions.rope_fusion`)."""
        return self.position_embedding_type in ("rope", "yarn")

    @cached_property
    def moe_layers(self) -> tuple[bool, ...]:
        """Per decoder layer: True when it is an MoE layer."""
        if self.num_experts is None:
            return tuple(False for _ in range(self.num_layers))
        return parse_layer_freq(self.moe_layer_freq, self.num_layers)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def has_dense_layers(self) -> bool:
        return self.num_dense_layers > 0

    @property
    def query_groups(self) -> int:
        """Key/value heads: Megatron's num_query_groups, equal to the head count without GQA."""
        return self.num_query_groups if self.num_query_groups is not None else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Megatron's kv_channels: hidden_size / num_attention_heads unless given."""
        return self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads

    @property
    def linear_qkv_width(self) -> int:
        """Output features of Megatron-Core's linear_qkv: query, key and value heads, and the output gate it
        fuses into the same GEMM; 0 with multi-latent attention, which has no linear_qkv."""
        if self.multi_latent_attention:
            return 0
        gate = self.num_attention_heads if self.attention_output_gate else 0
        return (self.num_attention_heads + 2 * self.query_groups + gate) * self.head_dim

    @property
    def topk(self) -> int:
        return self.moe_router_topk or 0

    def fc1_width(self, ffn: int) -> int:
        """Output width of an MLP's linear_fc1 for an FFN of `ffn`: a GLU (SwiGLU, gpt-oss's quick-GeGLU)
        fuses its gate and up projections into one, twice as wide."""
        return 2 * ffn if self.swiglu else ffn

    def padded_vocab_size(self, tp: int) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by × TP."""
        multiple = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // multiple) * multiple

    def windowed_layers(self) -> tuple[bool, ...]:
        """Per layer: True when it uses sliding-window attention (every window_attn_skip_freq-th is full)."""
        return self.windowed_mask

    @cached_property
    def windowed_mask(self) -> tuple[bool, ...]:
        if self.window_size is None:
            return tuple(False for _ in range(self.num_layers))
        skip = self.window_attn_skip_freq
        return tuple(not (skip and (i + 1) % skip == 0) for i in range(self.num_layers))
