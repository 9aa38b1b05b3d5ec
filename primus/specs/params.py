"""The one parameter counter.

Every consumer (`models show`, the memory ledger, the projection's FLOPs, reports) asks this module,
so totals, actives and per-rank counts can never disagree. Each weight is listed once with the way
Megatron-Core shards it, and per-rank counts follow from that:

- `TP`: column- or row-parallel linear weights and column-parallel biases, split across tensor parallel;
- `REPLICATED`: norms, row-parallel biases, the router, MLA's down-projections (duplicated per TP rank);
- `EXPERT_TP`: routed-expert weights, split across expert tensor parallel (ETP), one copy per local expert;
- `EXPERT_REPLICATED`: routed-expert row-parallel biases (one per local expert, not split by ETP);
- `VOCAB`: embedding and output layer, on the padded vocabulary, split across TP.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property

from primus.specs.model import ModelSpec


class Shard(Enum):
    TP = "tp"
    REPLICATED = "replicated"
    EXPERT_TP = "expert_tp"
    EXPERT_REPLICATED = "expert_replicated"
    VOCAB = "vocab"


@dataclass(frozen=True, slots=True)
class Weight:
    """One named weight (or group of identical-shape weights), with its count for the whole model part.

    For VOCAB weights `count` is per vocabulary row (the hidden size); the vocabulary is applied by the
    caller, because Megatron pads it as a function of TP. For expert weights `count` is per expert.
    """

    name: str
    count: int
    shard: Shard


@dataclass(frozen=True, slots=True)
class LayerParams:
    """The weights of one decoder-layer kind (dense, MoE, or an MTP block)."""

    kind: str
    weights: tuple[Weight, ...]
    num_experts: int = 0

    def total(self) -> int:
        """Unsharded parameters of the layer (all experts)."""
        out = 0
        for w in self.weights:
            out += w.count * self.num_experts if w.shard in (Shard.EXPERT_TP, Shard.EXPERT_REPLICATED) else w.count
        return out

    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return sum(w.count for w in self.weights if w.shard in (Shard.EXPERT_TP, Shard.EXPERT_REPLICATED))

    def dense_part(self, tp: int) -> int:
        """Per-rank parameters outside the routed experts (attention, norms, router, shared experts)."""
        out = 0
        for w in self.weights:
            if w.shard is Shard.TP:
                out += _split(w, tp)
            elif w.shard is Shard.REPLICATED:
                out += w.count
        return out

    def expert_part(self, ep: int, etp: int) -> int:
        """Per-rank parameters of the routed experts: num_experts/EP local experts, each split by ETP."""
        if not self.num_experts:
            return 0
        local = -(-self.num_experts // ep)  # exact when EP divides the experts (rule experts-divisible)
        per_expert = 0
        for w in self.weights:
            if w.shard is Shard.EXPERT_TP:
                per_expert += _split(w, etp)
            elif w.shard is Shard.EXPERT_REPLICATED:
                per_expert += w.count
        return local * per_expert

    def per_rank(self, tp: int, ep: int = 1, etp: int = 1) -> int:
        return self.dense_part(tp) + self.expert_part(ep, etp)


def _split(w: Weight, ways: int) -> int:
    """Per-rank share of a split weight. Legal layouts divide exactly (the divisibility rules say so);
    for an illegal one the ledger still answers, rounding up, so "not allowed" and "does not fit" stay
    separate questions."""
    return -(-w.count // ways)


def _norm(model: ModelSpec, name: str, dim: int) -> Weight:
    per = 2 if model.normalization == "LayerNorm" else 1  # LayerNorm has a bias, RMSNorm does not
    return Weight(name, per * dim, Shard.REPLICATED)


def _linear(name: str, fan_in: int, fan_out: int, *, bias: bool, column: bool, shard: Shard = Shard.TP) -> list[Weight]:
    """A Megatron linear layer: the weight is split; a column-parallel bias splits with it, a
    row-parallel bias is replicated (added after the all-reduce)."""
    out = [Weight(f"{name}.weight", fan_in * fan_out, shard)]
    if bias:
        if shard is Shard.EXPERT_TP:
            bias_shard = Shard.EXPERT_TP if column else Shard.EXPERT_REPLICATED
        elif shard is Shard.TP:
            bias_shard = Shard.TP if column else Shard.REPLICATED
        else:
            bias_shard = shard
        out.append(Weight(f"{name}.bias", fan_out, bias_shard))
    return out


def _attention(model: ModelSpec) -> list[Weight]:
    h = model.hidden_size
    heads = model.num_attention_heads
    out: list[Weight] = []
    if model.multi_latent_attention:
        qk = model.qk_head_dim or 0
        rope = model.qk_pos_emb_head_dim or 0
        v = model.v_head_dim or 0
        kv_lora = model.kv_lora_rank or 0
        if model.q_lora_rank is not None:
            out += _linear("attention.linear_q_down_proj", h, model.q_lora_rank, bias=False, column=True,
                           shard=Shard.REPLICATED)
            out.append(_norm(model, "attention.q_layernorm", model.q_lora_rank))
            out += _linear("attention.linear_q_up_proj", model.q_lora_rank, heads * (qk + rope), bias=False,
                           column=True)
        else:
            out += _linear("attention.linear_q_proj", h, heads * (qk + rope), bias=False, column=True)
        out += _linear("attention.linear_kv_down_proj", h, kv_lora + rope, bias=False, column=True,
                       shard=Shard.REPLICATED)
        out.append(_norm(model, "attention.kv_layernorm", kv_lora))
        out += _linear("attention.linear_kv_up_proj", kv_lora, heads * (qk + v), bias=False, column=True)
        out += _linear("attention.linear_proj", heads * v, h, bias=model.add_bias_linear or model.add_proj_bias,
                       column=False)
        return out
    d = model.head_dim
    out += _linear("attention.linear_qkv", h, model.linear_qkv_width, bias=model.add_bias_linear or model.add_qkv_bias,
                   column=True)
    if not model.qk_layernorm_affine:  # scaleless q/k norms: nothing learnable
        pass
    elif model.qk_layernorm and model.qk_layernorm_per_head:  # head_dim-wide norms, shared across heads
        out.append(_norm(model, "attention.q_layernorm", d))
        out.append(_norm(model, "attention.k_layernorm", d))
    elif model.qk_layernorm:  # norms over the whole q and k projections, split with the heads
        per = 2 if model.normalization == "LayerNorm" else 1
        out.append(Weight("attention.q_layernorm", per * heads * d, Shard.TP))
        out.append(Weight("attention.k_layernorm", per * model.query_groups * d, Shard.TP))
    if model.softmax_type == "learnable":  # one learnable sink logit per head
        out.append(Weight("attention.softmax_offset", heads, Shard.TP))
    out += _linear("attention.linear_proj", heads * d, h, bias=model.add_bias_linear or model.add_proj_bias,
                   column=False)
    return out


def _mlp(model: ModelSpec, name: str, ffn: int, shard: Shard) -> list[Weight]:
    h = model.hidden_size
    fc1_out = model.fc1_width(ffn)  # gate and up projections fused in linear_fc1
    return _linear(f"{name}.linear_fc1", h, fc1_out, bias=model.add_bias_linear, column=True, shard=shard) + \
        _linear(f"{name}.linear_fc2", ffn, h, bias=model.add_bias_linear, column=False, shard=shard)


def _layer_norms(model: ModelSpec, sublayer: str) -> tuple[list[Weight], list[Weight]]:
    """The norms before and after a sublayer ("attention" or "mlp") for the model's norm placement."""
    h = model.hidden_size
    pre_name = "input_layernorm" if sublayer == "attention" else "pre_mlp_layernorm"
    post_name = "post_attention_layernorm" if sublayer == "attention" else "post_mlp_layernorm"
    pre = [_norm(model, pre_name, h)] if model.norm_placement != "post" else []
    post = [_norm(model, post_name, h)] if model.norm_placement != "pre" else []
    return pre, post


def _with_norms(model: ModelSpec, attention: list[Weight], mlp: list[Weight]) -> tuple[Weight, ...]:
    a_pre, a_post = _layer_norms(model, "attention")
    m_pre, m_post = _layer_norms(model, "mlp")
    return (*a_pre, *attention, *a_post, *m_pre, *mlp, *m_post)


def dense_layer(model: ModelSpec) -> LayerParams:
    if model.ffn_hidden_size is None:
        raise ValueError(f"{model.name}: ffn_hidden_size is required for dense layers")
    mlp = _mlp(model, "mlp", model.ffn_hidden_size, Shard.TP)
    return LayerParams("dense", _with_norms(model, _attention(model), mlp))


def moe_layer(model: ModelSpec) -> LayerParams:
    h = model.hidden_size
    experts = model.num_experts or 0
    mlp = [Weight("mlp.router.weight", experts * h, Shard.REPLICATED)]
    if model.moe_router_bias:
        mlp.append(Weight("mlp.router.bias", experts, Shard.REPLICATED))
    if model.moe_shared_expert_intermediate_size:
        mlp += _mlp(model, "mlp.shared_experts", model.moe_shared_expert_intermediate_size, Shard.TP)
        if model.moe_shared_expert_gate:  # Megatron-Core keeps the (1, h) gate weight whole on every rank
            mlp.append(Weight("mlp.shared_experts.gate.weight", h, Shard.REPLICATED))
    mlp += _mlp(model, "mlp.experts", model.moe_ffn_hidden_size or 0, Shard.EXPERT_TP)
    return LayerParams("moe", _with_norms(model, _attention(model), mlp), num_experts=experts)


def mtp_block(model: ModelSpec) -> LayerParams:
    """One Megatron MTP module: two norms, the 2h→h projection and a decoder layer (MoE if the model's
    last layer is MoE), sharing the embedding and output layer of the main model."""
    h = model.hidden_size
    inner = moe_layer(model) if model.moe_layers[-1] else dense_layer(model)
    weights = (
        _norm(model, "mtp.enorm", h),
        _norm(model, "mtp.hnorm", h),
        *_linear("mtp.eh_proj", 2 * h, h, bias=False, column=True),
        *inner.weights,
        _norm(model, "mtp.final_layernorm", h),
    )
    return LayerParams("mtp", weights, num_experts=inner.num_experts)


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts of a model: totals, actives and per-rank pieces, all from the same inventory."""

    model: ModelSpec

    @cached_property
    def dense(self) -> LayerParams | None:
        return dense_layer(self.model) if self.model.has_dense_layers else None

    @cached_property
    def moe(self) -> LayerParams | None:
        return moe_layer(self.model) if self.model.num_moe_layers else None

    @cached_property
    def mtp(self) -> LayerParams | None:
        return mtp_block(self.model) if self.model.mtp_num_layers else None

    def layer(self, index: int) -> LayerParams:
        layer = self.moe if self.model.moe_layers[index] else self.dense
        assert layer is not None
        return layer

    # --- embedding, positions, output ---

    @property
    def embedding_row(self) -> int:
        return self.model.hidden_size

    def embedding(self, vocab: int | None = None) -> int:
        """Word embedding (and its LayerNorm, BLOOM-style) for a given (padded) vocabulary size."""
        v = self.model.vocab_size if vocab is None else vocab
        extra = (2 if self.model.normalization == "LayerNorm" else 1) * self.model.hidden_size \
            if self.model.embedding_layernorm else 0
        return v * self.model.hidden_size + extra

    @property
    def position_embedding(self) -> int:
        if self.model.position_embedding_type != "learned_absolute":
            return 0
        return (self.model.max_position_embeddings or 0) * self.model.hidden_size

    def output_layer(self, vocab: int | None = None) -> int:
        """The output projection (and its bias, PhiMoE); zero when tied to the embedding (stored once per
        rank that holds it). A bias on a tied output layer is its own parameter, counted here."""
        v = self.model.vocab_size if vocab is None else vocab
        bias = v if self.model.output_layer_bias else 0
        if not self.model.untie_embeddings_and_output_weights:
            return bias
        return v * self.model.hidden_size + bias

    @property
    def final_norm(self) -> int:
        return (2 if self.model.normalization == "LayerNorm" else 1) * self.model.hidden_size

    # --- totals ---

    @cached_property
    def decoder_total(self) -> int:
        m = self.model
        dense = self.dense.total() * m.num_dense_layers if self.dense else 0
        moe = self.moe.total() * m.num_moe_layers if self.moe else 0
        return dense + moe

    @cached_property
    def mtp_total(self) -> int:
        """MTP modules' own parameters (the shared embedding and output layer are not counted again)."""
        return self.mtp.total() * self.model.mtp_num_layers if self.mtp else 0

    @cached_property
    def total(self) -> int:
        """Published-convention total: unpadded vocabulary, tied weights once, MTP modules excluded."""
        return (self.embedding() + self.position_embedding + self.decoder_total + self.final_norm
                + self.output_layer())

    @cached_property
    def active(self) -> int:
        """Parameters one token touches: the total minus the routed experts it is not sent to
        (embedding, output layer, router and norms included; MTP excluded)."""
        if not self.moe:
            return self.total
        unused = (self.model.num_experts or 0) - self.model.topk
        return self.total - unused * self.moe.expert_params() * self.model.num_moe_layers

    @cached_property
    def active_without_input_embedding(self) -> int:
        """`active` without the input word-embedding table (vocab × hidden): the convention of DeepSeek,
        Moonshot and OpenAI, whose published active counts leave the lookup out (a lookup is not a
        GEMM a token runs) and keep the output projection. A tied table is the output projection too,
        so it stays."""
        lookup = self.model.vocab_size * self.model.hidden_size if self.model.untie_embeddings_and_output_weights \
            else 0
        return self.active - lookup

    @cached_property
    def embedding_total(self) -> int:
        return self.embedding() + self.position_embedding + self.output_layer()

    def by_kind(self) -> dict[str, int]:
        """Totals per part, for `models show`."""
        out = {"embedding": self.embedding() + self.position_embedding}
        if self.dense:
            out["dense_layer"] = self.dense.total()
            out["dense_layers"] = self.dense.total() * self.model.num_dense_layers
        if self.moe:
            out["moe_layer"] = self.moe.total()
            out["moe_layers"] = self.moe.total() * self.model.num_moe_layers
            out["routed_expert"] = self.moe.expert_params()
        out["final_norm"] = self.final_norm
        out["output_layer"] = self.output_layer()
        if self.mtp:
            out["mtp_layers"] = self.mtp_total
        return out

    def matmul_params_per_token(self) -> int:
        """Weights in GEMMs one token passes through in the forward pass (active, without the embedding
        lookup and norms, with the output projection even when tied): 2 FLOPs each."""
        m = self.model
        total = 0
        for idx in range(m.num_layers):
            layer = self.layer(idx)
            for w in layer.weights:
                if not w.name.endswith(".weight") or "layernorm" in w.name:
                    continue
                if w.shard is Shard.EXPERT_TP:
                    total += w.count * m.topk
                else:
                    total += w.count
        total += m.vocab_size * m.hidden_size
        return total

    def mtp_matmul_params_per_token(self) -> int:
        """The same for the multi-token prediction modules: each one's GEMM weights (its 2h x h projection
        and its decoder layer) and one more pass through the shared output layer."""
        if self.mtp is None:
            return 0
        m = self.model
        per = sum(w.count * (m.topk if w.shard is Shard.EXPERT_TP else 1) for w in self.mtp.weights
                  if w.name.endswith(".weight") and "layernorm" not in w.name and "norm" not in w.name.split(".")[-2])
        return m.mtp_num_layers * (per + m.vocab_size * m.hidden_size)


def count_params(model: ModelSpec) -> ParamCount:
    return ParamCount(model)
