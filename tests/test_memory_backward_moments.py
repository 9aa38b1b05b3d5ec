"""When a stage's memory peaks, found by a hostile review of the ledger:

- Interleaved 1F1B with chunks of different sizes on one rank reaches its peak count of in-flight chunk passes
  several times with different mixes; the steady state holds more of the larger chunk than the first moment does.
  Llama 3 8B (meta-llama/Meta-Llama-3-8B: 32 layers) at TP2 PP4 VP2 with Megatron's layout
  "Et*6|t*4|t*4|t*4|t*2|t*4|t*4|t*4L": rank 0's first peak holds 7 passes of its 6-layer chunk and 4 of its
  2-layer chunk, its steady state 8 and 3. The ledger now replays the schedule (`primus.schedule.peak_activation`
  is the independent check): stage 0 peaks at 43,080,482,816 B, where the first-peak mix said 40,798,584,832.
- On the loss stage the cross-entropy's saved state, the logits' gradient and the output layer's input are freed
  by the output layer's backward before the last layers run theirs, so the layer full recompute rematerialises
  (and the layer's working set) never coexist with that microbatch's loss state. Llama 3 8B at TP2 PP4 with full
  uniform recompute of 2 layers: stage 3 peaks at 18,664,521,728 B, the larger of the loss backward (the loss
  state and its working set) and the layer backward (the rematerialised pair and the layer's working set), not
  19,806,486,528 (all of them together).
"""

from __future__ import annotations

from typing import Any

from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.shapes import pipeline_schedule, split_layout
from primus.memory.units import act_units
from primus.schedule import peak_activation

BASE: dict[str, Any] = {"model": "llama3-8b", "hardware": "h100-80gb", "seq_len": 8192, "precision": "bf16"}
UNEVEN = {**BASE, "gpus": 32, "global_batch_size": 64, "pipeline": {"layout": "Et*6|t*4|t*4|t*4|t*2|t*4|t*4|t*4L"},
          "parallel": {"tp": 2, "pp": 4, "vp": 2, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                       "sharding": "dist_opt"}}
FULL_RECOMPUTE = {**BASE, "gpus": 16, "global_batch_size": 32,
                  "parallel": {"tp": 2, "pp": 4, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "full",
                               "recompute_num_layers": 2, "sharding": "dist_opt"}}
NO_RECOMPUTE = {**FULL_RECOMPUTE, "parallel": {**FULL_RECOMPUTE["parallel"], "recompute": "none",
                                               "recompute_num_layers": None}}


def _report(data: dict[str, Any]) -> tuple[Any, Any, Any]:
    job = job_from_mapping(data, "job.yaml")
    layout = pinned_layout(job)
    return job, layout, MemoryModel(job).evaluate(layout)


def test_uneven_interleaved_chunks_peak_where_the_schedule_replay_says() -> None:
    job, lay, report = _report(UNEVEN)
    split, _ = split_layout(job.model, job.pipeline_at(lay.pp, lay.vp), lay.pp, lay.vp)
    schedule, _ = pipeline_schedule(lay.pp, split.vp, lay.num_microbatches(job.spec.global_batch_size))
    au = act_units(job.model, MemoryModel(job).act_context(lay), lay.recompute, job.model.padded_vocab_size(lay.tp))

    def chunk_bytes(c: int) -> int:
        held = split.chunks[c]
        return (len(split.decoder_layers(c)) * au.dense + ("E" in held) * au.embedding
                + ("L" in held) * au.loss)

    for rank, stage in enumerate(report.stages[:-1]):  # the loss stage's loss state is read at its backward
        t = stage.terms
        assert t["activations.dense_layers"] + t["activations.embedding"] == peak_activation(schedule, rank,
                                                                                              chunk_bytes)
    assert report.stages[0].bytes == 43_080_482_816


def test_full_recompute_on_the_loss_stage_rematerialises_after_the_loss_state_is_freed() -> None:
    _, _, report = _report(FULL_RECOMPUTE)
    t = report.stages[3].terms
    # the loss moment (2,168,537,088 B of loss state and the loss's working set) outweighs the layer moment
    # (1,141,964,800 B of two rematerialised layers and a 1,050,673,152 B working set); they are not added
    assert report.stages[3].bytes == 18_664_521_728
    assert t["other.logits_and_loss"] == 2_168_537_088
    assert t["activations.recompute_transient"] == 0
    assert t["other.logits_and_loss"] + t["activations.backward_working_set"] >= 1_141_964_800 + 1_050_673_152
    # stages without the loss keep the rematerialised layers on top of their working set
    assert report.stages[1].terms["activations.recompute_transient"] == 1_141_964_800


def test_without_recompute_the_loss_moment_can_be_the_peak() -> None:
    # 1F1B holds one microbatch on the last stage: its fp32 softmax over 128,256 / 2 tokens' worth of vocabulary
    # and the loss's working set outweigh a layer's backward working set
    _, _, report = _report(NO_RECOMPUTE)
    last = report.stages[3].terms
    assert last["activations.recompute_transient"] == 0 and last["activations.offload_reload"] == 0
    assert last["other.logits_and_loss"] > 0
    assert last["activations.backward_working_set"] > 0
