"""The eager cross-entropy term of the ledger against torch itself: MemTracker's peak of one forward
and backward of `F.cross_entropy` over fp32-cast logits (torchtitan's loss before it was compiled),
on one rank and, across TP, under DTensor's `loss_parallel` on the vocabulary shards (a fake process
group of 8 ranks, so one process plays rank 0)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402
from torch.distributed.tensor.parallel import loss_parallel  # noqa: E402
from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: E402

from primus.measure.trace import ACTIVATION, category_bytes  # noqa: E402
from primus.memory.activations import FP32, ActContext, loss_working_bytes  # noqa: E402
from primus.memory.numerics import nbytes, numerics_for  # noqa: E402

TP = 8


@pytest.fixture(scope="module")
def mesh() -> Iterator[DeviceMesh]:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=TP)
    try:
        yield init_device_mesh("cpu", (TP,))
    finally:
        dist.destroy_process_group()


def traced_loss_peak(tokens: int, vocab: int, mesh: DeviceMesh | None = None) -> int:
    """Peak bytes of activations and temporaries while the output layer's logits (this rank's vocabulary
    shard under `mesh`) go through an eager fp32 cross-entropy and back; the layer's weight and input
    are external, not counted. Small shapes: the tensors are real (the fake process group needs them)."""
    shard = vocab // TP if mesh is not None else vocab
    weight = torch.randn(64, shard, dtype=torch.bfloat16, requires_grad=True)
    h = torch.randn(tokens, 64, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    tracker = MemTracker()
    tracker.track_external(weight, h, labels)
    with tracker:
        if mesh is None:
            pred = (h @ weight).float()  # torchtitan 2024: the model returned fp32 logits
            loss = torch.nn.functional.cross_entropy(pred, labels)
            del pred  # as torchtitan's train loop does before backward
            loss.backward()
        else:
            pred = DTensor.from_local(h @ weight, mesh, [Shard(-1)]).float()
            with loss_parallel():
                loss = torch.nn.functional.cross_entropy(pred, distribute_tensor(labels, mesh, [Replicate()]))
                del pred
                loss.backward()
    peak = tracker.get_tracker_snapshot("peak")
    return category_bytes(peak, ACTIVATION) + category_bytes(peak, "Temp")


def ledger_loss_bytes(tokens: int, vocab: int, tp: int) -> int:
    """What the ledger holds for the loss: the kept fp32 log-softmax plus the loss's working set."""
    ctx = ActContext(seq_len=tokens, mbs=1, tp=tp, cp=1, sp=tp > 1, etp=1, numerics=numerics_for("bf16", None),
                     eager_cross_entropy=True)
    return nbytes(tokens * vocab // tp, FP32) + loss_working_bytes(ctx, vocab)


@pytest.mark.parametrize(("tokens", "vocab"), [(4096, 32000), (2048, 128256)])
def test_eager_cross_entropy_peak_is_what_the_ledger_holds(tokens: int, vocab: int) -> None:
    ledger = ledger_loss_bytes(tokens, vocab, 1)
    assert ledger == 12 * tokens * vocab
    assert 0 <= traced_loss_peak(tokens, vocab) - ledger <= 64  # the scalar loss and its gradient


@pytest.mark.parametrize(("tokens", "vocab"), [(4096, 32000), (1024, 128256)])
def test_loss_parallel_cross_entropy_peak_is_what_the_ledger_holds(mesh: DeviceMesh, tokens: int,
                                                                   vocab: int) -> None:
    ledger = ledger_loss_bytes(tokens, vocab, TP)
    assert ledger == 16 * tokens * (vocab // TP)
    traced = traced_loss_peak(tokens, vocab, mesh)
    assert abs(traced - ledger) <= 64 * tokens  # per-token max / sum-exp / target vectors
