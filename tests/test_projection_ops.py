"""Specification of primus.projection.ops: sharded shapes agree with the one parameter counter and the
model-FLOP convention, and attention work splits as Megatron's context parallelism splits it."""

from __future__ import annotations

import pytest

from primus.catalog.models import resolve_model
from primus.memory.activations import ActContext
from primus.memory.numerics import numerics_for
from primus.memory.units import param_units
from primus.projection.ends import embedding_block, loss_block, mtp_block
from primus.projection.ops import OpContext, avg_keys, gemm_weights, layer_block, unfused_permutation_rows
from primus.specs.flops import flops_per_token
from primus.specs.model import ModelSpec


def model(name: str) -> ModelSpec:
    return resolve_model(name, "test")


def ctx(m: ModelSpec, *, tp: int = 1, cp: int = 1, sp: bool = False, ep: int = 1, etp: int = 1, mbs: int = 1,
        seq: int = 4096, flash: bool = True, precision: str = "bf16") -> OpContext:
    act = ActContext(seq_len=seq, mbs=mbs, tp=tp, cp=cp, sp=sp, etp=etp, numerics=numerics_for(precision, None),
                     flash_attention=flash)
    return OpContext(act, ep, m.padded_vocab_size(tp), precision != "bf16")


# qwen3-30b-a3b (4 query groups) at TP 8: Megatron-Core core_v0.16.0 and later sub-shard its key/value heads
GEMM_CASES = [(name, tp, ep, etp)
              for name in ("llama3.1-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b")
              for tp, ep, etp in ((1, 1, 1), (2, 2, 1), (4, 8, 2), (8, 8, 1))]


@pytest.mark.parametrize(("name", "tp", "ep", "etp"), GEMM_CASES)
def test_gemm_weights_equal_the_parameter_counter(name: str, tp: int, ep: int, etp: int) -> None:
    m = model(name)
    if not m.is_moe:
        ep = etp = 1
    # Qwen3-30B-A3B has 4 key/value heads: TP 8 sub-shards them (Megatron-Core core_v0.16.0 and later)
    assert m.multi_latent_attention or m.query_groups % tp == 0 or tp % m.query_groups == 0
    pu = param_units(m, tp, ep, etp)
    c = ctx(m, tp=tp, sp=tp > 1, ep=ep, etp=etp)
    if m.has_dense_layers:
        assert gemm_weights(layer_block(m, "dense", c)) == pu.gemm_dense_layer
    if m.is_moe:
        block = layer_block(m, "moe", c)
        router = m.hidden_size * (m.num_experts or 0)  # the parameter counter lists the router apart
        assert gemm_weights(block) == pu.gemm_moe_dense + pu.gemm_moe_expert + router
    assert gemm_weights(loss_block(m, c)) == m.padded_vocab_size(tp) // tp * m.hidden_size
    assert gemm_weights(embedding_block(m, c)) == 0


@pytest.mark.parametrize("name", ["llama3.1-70b", "gpt3-175b", "mixtral-8x7b", "deepseek-v3"])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_forward_gemm_flops_across_tp_ranks_are_the_model_gemm_flops(name: str, tp: int) -> None:
    """Summed over the TP ranks, one microbatch's GEMMs (unpadded vocab) are Megatron's model GEMM FLOPs:
    replicated MLA down-projections run on each rank's own tokens (sequence parallel), so nothing is
    counted twice."""
    m = model(name)
    seq = 2048
    c = ctx(m, tp=tp, sp=tp > 1, seq=seq)
    total = 0
    for i in range(m.num_layers):
        block = layer_block(m, "moe" if m.moe_layers[i] else "dense", c)
        total += sum(g.flops for g in block.gemms) * tp
    out = loss_block(m, c).gemms[0]
    total += 2 * seq * m.vocab_size * m.hidden_size  # model FLOPs use the unpadded vocabulary
    assert out.m == seq
    # the decoder layers and the output layer summed here; a multi-token prediction module's GEMMs, which model
    # FLOPs count too, run in its own block
    expected = flops_per_token(m.model_copy(update={"mtp_num_layers": 0}), seq).gemm * seq
    if m.is_moe:  # one rank holds all experts (EP 1): routed GEMMs see top-k copies of its tokens
        assert total == pytest.approx(expected, rel=1e-9)
    else:
        assert total == expected


@pytest.mark.parametrize("cp", [1, 2, 4, 8])
def test_context_parallel_gives_each_rank_one_cp_th_of_the_causal_attention(cp: int) -> None:
    m = model("llama3.1-8b")
    seq = 16384
    one = layer_block(m, "dense", ctx(m, seq=seq)).attention[0]
    split = layer_block(m, "dense", ctx(m, cp=cp, seq=seq)).attention[0]
    assert split.fwd_flops * cp == pytest.approx(one.fwd_flops, rel=1e-12)
    causal_full = 2 * seq * (seq + 1) / 2 * m.num_attention_heads * 2 * m.head_dim
    assert one.fwd_flops == pytest.approx(causal_full, rel=1e-12)
    comms = [c for c in layer_block(m, "dense", ctx(m, cp=cp, seq=seq)).comms if c.name == "cp_comm"]
    assert len(comms) == (cp > 1)
    if cp > 1:
        kv = seq // cp * m.query_groups * 2 * m.head_dim * 2
        assert comms[0].nbytes == kv and comms[0].fwd == cp - 1 and comms[0].bwd == 2 * (cp - 1)


def test_flash_attention_backward_is_five_matmuls_to_two() -> None:
    m = model("llama3.1-8b")
    a = layer_block(m, "dense", ctx(m)).attention[0]
    assert a.bwd_flops == pytest.approx(2.5 * a.fwd_flops)


def test_sliding_window_and_causal_average_keys() -> None:
    assert avg_keys(4096, None) == pytest.approx(4097 / 2)
    assert avg_keys(8, 1) == 1.0
    assert avg_keys(4096, 128) == pytest.approx(128 - 128 * 127 / (2 * 4096))


def test_unfused_attention_is_two_bmms_over_the_full_scores_plus_softmax() -> None:
    m = model("gpt3-175b")
    block = layer_block(m, "dense", ctx(m, tp=8, seq=2048, flash=False))
    assert not block.attention
    bmm = [g for g in block.gemms if g.cat == "attention"]
    assert [g.name for g in bmm] == ["attention.scores", "attention.context"]
    assert all(not g.weight and not g.low for g in bmm)
    assert any(op.name == "attention.softmax" for op in block.memops)


def test_sequence_parallel_turns_all_reduces_into_gather_scatter() -> None:
    m = model("llama3.1-70b")
    no_sp = layer_block(m, "dense", ctx(m, tp=4))
    sp = layer_block(m, "dense", ctx(m, tp=4, sp=True))
    assert {c.kind for c in no_sp.comms} == {"all_reduce"}
    assert sum(c.fwd + c.bwd for c in no_sp.comms) == 4
    assert {c.kind for c in sp.comms} == {"all_gather", "reduce_scatter"}
    assert sum(c.fwd for c in sp.comms) == 4  # AG before QKV and FC1, RS after proj and FC2
    assert sum(1 for c in sp.comms if c.overlap == "wgrad") == 2


def test_moe_layer_routes_topk_copies_through_local_experts() -> None:
    m = model("mixtral-8x7b")
    c = ctx(m, tp=2, sp=True, ep=4, etp=1, seq=4096)
    block = layer_block(m, "moe", c)
    fc1 = next(g for g in block.gemms if g.name == "mlp.experts.linear_fc1")
    assert fc1.count == 8 // 4
    assert fc1.m * fc1.count == 4096 // 2 * m.topk
    a2a = next(x for x in block.comms if x.kind == "all_to_all")
    assert a2a.nbytes == 4096 // 2 * m.topk * m.hidden_size * 2 and a2a.fwd == 2 and a2a.bwd == 2


def test_fp8_keeps_router_and_output_layer_in_high_precision() -> None:
    m = model("deepseek-v3")
    c = ctx(m, tp=2, sp=True, ep=8, precision="fp8")
    block = layer_block(m, "moe", c)
    assert not next(g for g in block.gemms if g.name == "mlp.router").low
    assert not loss_block(m, c).gemms[0].low
    assert mtp_block(m, c).gemms  # MTP: projection, a layer, an output layer


@pytest.mark.parametrize(("dispatcher", "kinds"), [("alltoall", {"all_to_all"}), ("flex", {"dispatch"}),
                                                   ("allgather", {"all_gather", "reduce_scatter"})])
def test_token_dispatchers(dispatcher: str, kinds: set[str]) -> None:
    m = model("qwen3-30b-a3b")
    base = ctx(m, ep=16)
    c = OpContext(base.act, 16, base.padded_vocab, False, dispatcher)
    assert {x.kind for x in layer_block(m, "moe", c).comms if x.name == "ep_a2a"} == kinds


def test_unfused_permutation_moves_the_torch_paths_extra_rows() -> None:
    """Megatron-Core core_v0.14.0 moe_utils.py without --moe-permute-fusion: `index_select` reads every top-k
    copy's row (copies - Tn more than the fused kernel), its backward and `unpermute`'s `zeros` +
    `scatter_add_` write a zeroed buffer and read it back (2 Tn more each), and `unpermute`'s backward
    gathers the copies' gradients (copies - Tn more)."""
    m = model("qwen3-30b-a3b")
    base = ctx(m, ep=8, mbs=2)
    fused = layer_block(m, "moe", base)
    unfused = layer_block(m, "moe", OpContext(base.act, 8, base.padded_vocab, False, permute_fusion=False))
    tn, copies, row = 2 * 4096, 2 * 4096 * m.topk, m.hidden_size * 2
    extra = {(a.name, d): getattr(b, d) - getattr(a, d) for a, b in zip(fused.memops, unfused.memops, strict=True)
             for d in ("fwd_bytes", "bwd_bytes")}
    assert unfused_permutation_rows(tn, copies) == (copies - tn, 2 * tn, 2 * tn, copies - tn)
    assert extra[("mlp.permute", "fwd_bytes")] == (copies - tn) * row
    assert extra[("mlp.permute", "bwd_bytes")] == 2 * tn * row
    assert extra[("mlp.unpermute", "fwd_bytes")] == 2 * tn * row
    assert extra[("mlp.unpermute", "bwd_bytes")] == (copies - tn) * row
    assert sum(extra.values()) == (2 * copies + 2 * tn) * row
