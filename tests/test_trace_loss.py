"""The eager cross-entropy term of the ledger against torch itself: MemTracker's peak of one
forward and backward of `F.cross_entropy` over fp32-cast logits (torchtitan's loss before it was
compiled), under FakeTensorMode so nothing is allocated."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

from primus.measure.trace import ACTIVATION, category_bytes  # noqa: E402
from primus.memory.activations import FP32, ActContext, loss_working_bytes  # noqa: E402
from primus.memory.numerics import nbytes, numerics_for  # noqa: E402


def traced_loss_peak(tokens: int, vocab: int) -> int:
    """Peak bytes of activations and temporaries while the output layer's logits go through an eager
    fp32 cross-entropy and back (the layer's weight and input are external: not counted)."""
    with FakeTensorMode():
        out = torch.nn.Linear(64, vocab, bias=False, dtype=torch.bfloat16)
        h = torch.randn(tokens, 64, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (tokens,))
        tracker = MemTracker()
        tracker.track_external(out, h, labels)
        with tracker:
            pred = out(h).float()  # torchtitan 2024: the model returned fp32 logits
            loss = torch.nn.functional.cross_entropy(pred, labels)
            del pred  # as torchtitan's train loop does before backward
            loss.backward()
        peak = tracker.get_tracker_snapshot("peak")
    return category_bytes(peak, ACTIVATION) + category_bytes(peak, "Temp")


@pytest.mark.parametrize(("tokens", "vocab"), [(4096, 32000), (2048, 128256)])
def test_eager_cross_entropy_peak_is_what_the_ledger_holds(tokens: int, vocab: int) -> None:
    ctx = ActContext(seq_len=tokens, mbs=1, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None),
                     eager_cross_entropy=True)
    kept = nbytes(tokens * vocab, FP32)  # the log-softmax, in `loss_bytes`
    ledger = kept + loss_working_bytes(ctx, vocab)
    traced = traced_loss_peak(tokens, vocab)
    assert ledger == 12 * tokens * vocab
    assert 0 <= traced - ledger <= 64  # the scalar loss and its gradient
