"""Which layers full recompute re-runs — Megatron's block and uniform methods and Primus-LM's listed
layer ids — defined once (primus.memory.recompute) and read by both the byte ledger and the projection;
and AMD's published DeepSeek-V3 recipe rows (ground_truth/amd_runs_dev.csv) built with them.

Source for the listed-layer form: AMD-AGI/Primus docs/tech_blogs/moe_package_2.0/moe_package.md
("Fine-grained recompute with --recompute_layer_ids"): DeepSeek-V3, TP1/PP16/VPP2/EP8, MBS 2, seq 4096;
the default recomputes one layer per virtual stage (32 of 61 layers), the tuned run at 32 nodes the
15 listed layers 0,1,2,4,6,8,10,12,14,16,34,36,38,40,50.
"""

from __future__ import annotations

from typing import Any

from primus.fidelity.jobs import build
from primus.fidelity.runs import read_runs
from primus.job import Job, job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.recompute import recomputed_mask
from primus.projection.project import Projector
from primus.schedule.layout import build_layout

AMD_RUNS = "primus/fidelity/data/amd_runs_dev.csv"
TUNED_IDS = (0, 1, 2, 4, 6, 8, 10, 12, 14, 16, 34, 36, 38, 40, 50)


def dsv3(**parallel: Any) -> Job:
    """DeepSeek-V3 without MTP on 256 MI355X, the blog's TP1/PP16/VPP2/EP8 layout and default split."""
    return job_from_mapping({
        "model": {"base": "deepseek-v3", "mtp_num_layers": 0}, "hardware": "mi355x", "gpus": 256,
        "seq_len": 4096, "global_batch_size": 4096, "precision": "bf16",
        "pipeline": {"layout": "Et|(tt|)*14,t|(tt|)*15,tL"},
        "parallel": {"tp": 1, "pp": 16, "vp": 2, "cp": 1, "ep": 8, "etp": 1, "mbs": 2, "sharding": "dist_opt",
                     "recompute": "full", **parallel}}, "test")


def test_block_takes_the_first_layers_of_a_chunk_uniform_all_and_listed_ids_win() -> None:
    assert recomputed_mask((4, 5, 6), "block", 2, None) == (True, True, False)
    assert recomputed_mask((4, 5, 6), "block", None, None) == (True, False, False)
    assert recomputed_mask((4, 5, 6), "uniform", 2, None) == (True, True, True)
    assert recomputed_mask((4, 5, 6), "block", 1, frozenset({5, 50})) == (False, True, False)


def test_listing_the_first_layer_of_every_chunk_is_the_block_method_of_one_layer() -> None:
    layout = build_layout(61, 16, 2, layout="Et|(tt|)*14,t|(tt|)*15,tL")
    firsts = tuple(layout.decoder_layers(c)[0] for c in range(32))
    block, listed = dsv3(recompute_method="block", recompute_num_layers=1), dsv3(recompute_layer_ids=firsts)
    mem_b = MemoryModel(block).evaluate(pinned_layout(block))
    mem_l = MemoryModel(listed).evaluate(pinned_layout(listed))
    assert [s.bytes for s in mem_b.stages] == [s.bytes for s in mem_l.stages]
    t_b = Projector(block).project(pinned_layout(block)).step_time_s
    t_l = Projector(listed).project(pinned_layout(listed)).step_time_s
    assert t_b == t_l


def test_fewer_listed_layers_keep_more_bytes_and_recompute_less() -> None:
    every = dsv3()
    listed = dsv3(recompute_layer_ids=TUNED_IDS)
    m_every = MemoryModel(every).evaluate(pinned_layout(every))
    m_listed = MemoryModel(listed).evaluate(pinned_layout(listed))
    assert m_listed.peak_bytes > m_every.peak_bytes
    p_every = Projector(every).project(pinned_layout(every))
    p_listed = Projector(listed).project(pinned_layout(listed))
    assert p_listed.breakdown["recompute"] < p_every.breakdown["recompute"]
    assert p_listed.step_time_s < p_every.step_time_s


def test_a_listed_id_beyond_the_model_is_refused() -> None:
    import pytest

    from primus.errors import InputError

    with pytest.raises(InputError, match="recompute_layer_ids"):
        MemoryModel(dsv3(recompute_layer_ids=(61,)))


def _amd(run_id: str) -> Any:
    return next(r for r in read_runs(AMD_RUNS) if r.run_id == run_id)


def test_amd_rows_state_their_recompute_and_layout_and_the_jobs_use_them() -> None:
    default, tuned = _amd("moe2_mi355x_dsv3_32n_default"), _amd("moe2_mi355x_dsv3_32n_tuned")
    assert (default.recompute_method, default.integer("recompute_num_layers")) == ("block", 1)
    assert default.pipeline_layout == "Et|(tt|)*14,t|(tt|)*15,tL"
    assert tuned.recompute_layer_ids == TUNED_IDS and tuned.pipeline_layout == "Et|t|(tt|)*29,tL"
    d, t = build(default).project.spec, build(tuned).project.spec
    assert (d.parallel.recompute_method, d.parallel.recompute_num_layers) == ("block", 1)
    assert t.parallel.recompute_layer_ids == TUNED_IDS and t.pipeline.layout == "Et|t|(tt|)*29,tL"


def test_the_tuned_amd_run_is_projected_faster_than_the_default_as_measured() -> None:
    # measured: 23.21 s -> 22.59 s per step at 32 nodes (1.028x)
    times = {}
    for run_id in ("moe2_mi355x_dsv3_32n_default", "moe2_mi355x_dsv3_32n_tuned"):
        job = build(_amd(run_id)).project
        times[run_id] = Projector(job).project(pinned_layout(job)).step_time_s
    assert times["moe2_mi355x_dsv3_32n_tuned"] < times["moe2_mi355x_dsv3_32n_default"]
