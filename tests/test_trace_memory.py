"""The ledger's per-layer activation bytes against a MemTracker trace of a torch reference layer.

Three things are pinned here: (1) the behaviour of torch's private MemTracker that the trace relies on,
(2) that every reference function's backward is correct (gradcheck in float64), so its saved set is
provably sufficient, and (3) that ledger and trace agree within 3% for dense and MoE layers of several
shapes — and exactly where they do not.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.autograd import gradcheck  # noqa: E402
from torch.autograd.graph import saved_tensors_hooks  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

from primus.catalog.models import resolve_model  # noqa: E402
from primus.cli.trace_cmd import MEASURE_HINT, trace_cmd  # noqa: E402
from primus.measure import functions as F  # noqa: E402
from primus.measure import routing as R  # noqa: E402
from primus.measure.reference import ReferenceLayer, rope_tables  # noqa: E402
from primus.measure.trace import category_bytes, trace_activation_bytes  # noqa: E402
from primus.specs.model import ModelSpec  # noqa: E402

pytestmark = pytest.mark.measure
D64 = torch.float64


def spec(name: str, h: int, heads: int, groups: int, **kw: Any) -> ModelSpec:
    base: dict[str, Any] = dict(
        name=name, num_layers=2, hidden_size=h, num_attention_heads=heads, num_query_groups=groups,
        vocab_size=1000, position_embedding_type="rope", normalization="RMSNorm", swiglu=True,
        add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0)
    base.update(kw)
    return ModelSpec(**base)


def gpt_like(name: str, h: int, heads: int, groups: int, **kw: Any) -> ModelSpec:
    base: dict[str, Any] = dict(normalization="LayerNorm", swiglu=False, add_bias_linear=True,
                                hidden_dropout=0.1, attention_dropout=0.1,
                                position_embedding_type="learned_absolute", max_position_embeddings=4096)
    return spec(name, h, heads, groups, **{**base, **kw})


def moe(name: str, h: int, heads: int, groups: int, **kw: Any) -> ModelSpec:
    return spec(name, h, heads, groups, num_experts=8, moe_router_topk=2, **kw)


# ---- (1) MemTracker behaviour the trace relies on (private API: torch.distributed._tools) ---------


class _KeepDoubled(torch.autograd.Function):
    """Saves a fresh tensor (2 × input) and a view of it; backward needs only that tensor."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        y = x * 2
        ctx.save_for_backward(y, y[:1])
        return y.sum(-1)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        y, _ = ctx.saved_tensors
        return 2 * g[..., None].expand_as(y)


def test_memtracker_counts_exactly_what_the_graph_keeps_under_fake_tensors() -> None:
    with FakeTensorMode():
        w = torch.nn.Linear(4, 8, bias=False, dtype=torch.bfloat16)      # 64 B of parameters
        x0 = torch.empty(5, 4, dtype=torch.bfloat16, requires_grad=True)  # 40 B, external
        tracker = MemTracker()
        tracker.track_external(w, x0)
        with tracker:
            x = x0.clone()                  # 40 B activation; mm saves it
            h = w(x)                        # 80 B, not saved by anyone: freed once dead
            out = _KeepDoubled.apply(h)     # saves y (80 B) and a view of y (no extra storage); out 10 B
            del h
            with_out = tracker.get_tracker_snapshot()
            graph = out.grad_fn
            del out, x
            after = tracker.get_tracker_snapshot()
        del graph
    # Exact bytes on CPU (no 512-byte CUDA rounding), categories by their string value, frees seen
    # through storage weakrefs even though fake tensors own no memory.
    assert category_bytes(with_out, "Activation") == 40 + 80 + 10
    assert category_bytes(after, "Activation") == 40 + 80
    assert category_bytes(after, "Parameter") == 64
    assert category_bytes(after, "Other") == 40
    assert category_bytes(after, "Temp") == 0
    names = {getattr(k, "value", k) for k in next(iter(after.values()))}
    assert names >= {"Activation", "Parameter", "Other", "Temp"}


# ---- (2) backward passes are correct: the saved set suffices -------------------------------------


def r(*shape: int, grad: bool = True, away_from_zero: bool = False) -> Any:
    t = torch.randn(*shape, dtype=D64)
    if away_from_zero:
        t = t.sign() * (t.abs() + 0.2)
    return t.requires_grad_(grad)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.mark.parametrize("rms", [True, False])
def test_norm_functions_backward(rms: bool) -> None:
    beta = None if rms else r(6)
    assert gradcheck(lambda x, g, b, w, bias: F.NormLinearFn.apply(x, g, b, w, bias, 1e-5, rms, "n"),
                     (r(3, 2, 6), r(6), beta, r(5, 6), r(5)))
    assert gradcheck(lambda x, g, b: F.NormFn.apply(x, g, b, 1e-5, rms, "i", "s"), (r(3, 2, 6), r(6), beta))


def test_linear_functions_backward() -> None:
    assert gradcheck(lambda x, w, b: F.LinearFn.apply(x, w, b, "x"), (r(3, 2, 4), r(5, 4), r(5)))
    assert gradcheck(lambda x, w: F.GroupedLinearFn.apply(x, w, (2, 0, 3), "x"), (r(5, 4), r(3, 6, 4)))


@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_backward_from_q_k_v_out_lse(causal: bool) -> None:
    assert gradcheck(lambda q, k, v: F.FlashAttentionFn.apply(q, k, v, causal, "a"),
                     (r(5, 2, 4, 3), r(5, 2, 2, 3), r(5, 2, 2, 3)))


def test_rope_and_activation_backward() -> None:
    cos, sin = rope_tables(4, 6, D64)
    assert gradcheck(lambda x: F.RopeFn.apply(x, cos, sin), (r(4, 2, 3, 6),))
    assert gradcheck(lambda x: F.SwiGLUFn.apply(x, "a"), (r(3, 8),))
    assert gradcheck(lambda x, w: F.WeightedSwiGLUFn.apply(x, w, "a", "p"), (r(3, 8), r(3, 1)))
    assert gradcheck(lambda x: F.GeluFn.apply(x, "a"), (r(3, 8),))
    assert gradcheck(lambda x: F.SquaredReLUFn.apply(x, "a"), (r(3, 8, away_from_zero=True),))


def test_dropout_add_backward() -> None:
    def fn(x: Any, res: Any) -> Any:
        torch.manual_seed(1)  # the same mask on every gradcheck evaluation
        return F.BiasDropoutAddFn.apply(x, res, 0.3, "m")

    assert gradcheck(fn, (r(4, 6), r(4, 6)))
    assert gradcheck(lambda x, res: F.BiasDropoutAddFn.apply(x, res, 0.0, "m"), (r(4, 6), r(4, 6)))


def test_routing_functions_backward() -> None:
    tokens, experts = 4, 3
    flat = torch.tensor([0, 2, 1, 4 + 3, 4 + 0, 8 + 1, 8 + 2, 8 + 3])  # expert-major e*T + t, top-2
    assert gradcheck(lambda lg: R.TopKRouterFn.apply(lg, 2)[0], (r(5, 6),))
    assert gradcheck(lambda x: R.PermuteFn.apply(x, flat, "m"), (r(tokens, 3),))
    assert gradcheck(lambda p: R.GatherProbsFn.apply(p, flat), (r(tokens, experts),))
    assert gradcheck(lambda y, p: R.UnpermuteFn.apply(y, flat, p, tokens, "y"), (r(8, 3), r(tokens, experts)))
    assert gradcheck(lambda y: R.UnpermuteFn.apply(y, flat, None, tokens, "y"), (r(8, 3),))


@pytest.mark.parametrize("model,kind,moe_probs", [
    (spec("d", 8, 4, 2, ffn_hidden_size=12, qk_layernorm=True), "dense", "unpermute"),
    (gpt_like("g", 8, 2, 2, ffn_hidden_size=16, hidden_dropout=0.0), "dense", "unpermute"),
    (moe("m", 8, 2, 1, moe_ffn_hidden_size=6, moe_shared_expert_intermediate_size=4), "moe", "unpermute"),
    (moe("m", 8, 2, 1, moe_ffn_hidden_size=6), "moe", "activation"),
], ids=["dense-swiglu-qknorm", "dense-layernorm-gelu", "moe-shared", "moe-probs-in-activation"])
def test_whole_reference_layer_backward(model: ModelSpec, kind: str, moe_probs: str) -> None:
    layer = ReferenceLayer(model, kind, moe_probs=moe_probs, dtype=D64)
    with torch.no_grad():  # O(1) weights, so a wrong gradient on any path exceeds gradcheck's tolerance
        for p in layer.parameters():
            p.add_(0.5 * torch.randn_like(p))
    rope = rope_tables(5, model.head_dim, D64) if model.position_embedding_type == "rope" else None
    assert gradcheck(lambda x: layer(x, rope), (r(5, 2, 8),), fast_mode=True)


# ---- (3) ledger against trace --------------------------------------------------------------------

DENSE = [
    (spec("swiglu-h256-mqa", 256, 4, 1, ffn_hidden_size=640), 128, 1),
    (spec("swiglu-h512-gqa4", 512, 8, 2, ffn_hidden_size=1376), 512, 2),
    (spec("swiglu-h1024-gqa4", 1024, 16, 4, ffn_hidden_size=2816), 1024, 1),
    (spec("swiglu-h1024-mha-qknorm", 1024, 16, 16, ffn_hidden_size=4096, qk_layernorm=True), 256, 2),
    (gpt_like("layernorm-gelu-dropout-h512", 512, 8, 8, ffn_hidden_size=2048), 512, 2),
    (gpt_like("layernorm-gelu-dropout-h1024-gqa4", 1024, 16, 4, ffn_hidden_size=4096), 1024, 1),
    (gpt_like("layernorm-sqrelu-dropout-h256", 256, 4, 2, ffn_hidden_size=1024, squared_relu=True), 256, 2),
]
MOE = [
    (moe("moe-8x2-h256", 256, 4, 2, moe_ffn_hidden_size=512), 256, 2),
    (moe("moe-8x2-h512-shared", 512, 8, 2, moe_ffn_hidden_size=768, moe_shared_expert_intermediate_size=1024),
     512, 1),
    (moe("moe-8x2-h1024-shared-dropout", 1024, 16, 4, moe_ffn_hidden_size=1024,
         moe_shared_expert_intermediate_size=2048, hidden_dropout=0.1), 1024, 2),
]


def check(model: ModelSpec, seq: int, mbs: int, kind: str, moe_probs: str = "activation") -> Any:
    res = trace_activation_bytes(model, seq, mbs, kind, moe_probs=moe_probs)
    assert res.traced_bytes == res.witness_bytes  # MemTracker and saved_tensors_hooks see the same bytes
    assert res.unattributed_bytes == 0            # every saved storage has a ledger name
    return res


@pytest.mark.parametrize("model,seq,mbs", DENSE, ids=[m.name for m, _, _ in DENSE])
def test_dense_ledger_matches_trace(model: ModelSpec, seq: int, mbs: int) -> None:
    res = check(model, seq, mbs, "dense")
    assert abs(res.error) <= 0.03
    assert res.diffs() == []  # tensor by tensor, to the byte


@pytest.mark.parametrize("model,seq,mbs", MOE, ids=[m.name for m, _, _ in MOE])
def test_moe_ledger_matches_trace(model: ModelSpec, seq: int, mbs: int) -> None:
    res = check(model, seq, mbs, "moe")
    assert abs(res.error) <= 0.03
    assert res.diffs() == []  # tensor by tensor, to the byte (row map and routing probabilities included)


@pytest.mark.parametrize("slug,kind,seq", [("llama3-8b", "dense", 2048), ("mixtral-8x7b", "moe", 1024),
                                           ("qwen3-30b-a3b", "moe", 512)])
def test_catalog_models_match_trace(slug: str, kind: str, seq: int) -> None:
    res = check(resolve_model(slug, "test"), seq, 1, kind)
    assert abs(res.error) <= 0.03


def test_probs_inside_the_experts_drop_the_expert_output() -> None:
    """Current Megatron-Core (every token dispatcher) weights the experts' SwiGLU by the routing
    probabilities: the FC2 output is no longer kept, the permuted fp32 probabilities are (what the ledger
    counts). Older releases applied them in the unpermute and kept the expert output; this pins the
    size of that difference."""
    model, seq, mbs = MOE[0]
    old = check(model, seq, mbs, "moe", "unpermute")
    new = check(model, seq, mbs, "moe", "activation")
    rows = seq * mbs * model.topk
    assert new.named.get("experts.output", 0) == 0
    assert new.named["experts.probs"] == 4 * rows
    assert old.traced_bytes - new.traced_bytes == rows * model.hidden_size * 2 - 4 * rows
    assert new.error == 0


# ---- CLI ------------------------------------------------------------------------------------------


def job_file(tmp_path: Any, model: str, seq: int, mbs: int | None = 2) -> str:
    pins = f"parallel: {{mbs: {mbs}}}\n" if mbs else ""
    path = tmp_path / "job.yaml"
    path.write_text(f"model: {model}\nhardware: mi300x\ngpus: 8\nseq_len: {seq}\n"
                    f"global_batch_size: 16\n{pins}")
    return str(path)


def test_cli_json_and_exit_status(tmp_path: Any) -> None:
    runner = CliRunner()
    res = runner.invoke(trace_cmd, [job_file(tmp_path, "llama3-8b", 512), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["mbs"] == 2 and doc["agree"] and [x["kind"] for x in doc["layers"]] == ["dense"]
    moe_job = job_file(tmp_path, "mixtral-8x7b", 512, mbs=None)
    res = runner.invoke(trace_cmd, [moe_job, "--moe-probs", "unpermute"])
    assert res.exit_code == 1 and "experts.output" in res.output  # a negative answer, printed anyway
    res = runner.invoke(trace_cmd, [moe_job, "--kinds", "dense"])
    assert res.exit_code == 2


def test_cli_without_torch_exits_2_with_one_line(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    res = CliRunner().invoke(trace_cmd, [job_file(tmp_path, "llama3-8b", 512)])
    assert res.exit_code == 2
    assert res.output.strip() == MEASURE_HINT


def test_weights_are_saved_by_reference_not_copied() -> None:
    """Weights reach autograd as the parameters themselves (no cast or transpose copies that would add
    weight-sized activations the ledger does not have)."""
    model = spec("p", 64, 4, 2, ffn_hidden_size=128)
    with FakeTensorMode():
        layer = ReferenceLayer(model, "dense")
        params = {id(p.untyped_storage()) for p in layer.parameters()}
        seen: list[int] = []

        def pack(t: Any) -> Any:
            seen.append(id(t.untyped_storage()))
            return t

        x = torch.empty(16, 1, 64, dtype=torch.bfloat16, requires_grad=True)
        with saved_tensors_hooks(pack, lambda t: t):
            layer(x, rope_tables(16, 16, torch.bfloat16))
    assert params <= set(seen)
