"""Fixes that keep the user's layout (issue 16): partial full recompute, Megatron's
`--recompute-granularity full --recompute-method block --recompute-num-layers N`, re-runs the first N
decoder layers of each virtual stage and keeps every other parallel axis the user pinned (the pinned
recompute itself changes, and the fix says so: review 01, item 20); PyTorch's expandable segments would
keep the layout as asked, and are offered only while the evidence gives them a smaller reserve."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from primus.job import job_from_mapping
from primus.launch import import_launch
from primus.memory.evaluate import MemoryModel
from primus.projection.complete import speed_of
from primus.solver.api import Question
from primus.solver.fit import fit, option_fixes
from primus.solver.options import apply_options, partial_recompute

GIB = 2**30
# Llama 3.1 70B in bf16 on 64 H100 at Megatron-Bridge's 70B layout (TP4 PP8 VP5 CP1 MBS1), the
# distributed optimizer and no recompute: 80 layers in 40 chunks of 2, stage 0 over by 4.64 GiB.
BASE = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192, "global_batch_size": 128}
PINS = {"tp": 4, "pp": 8, "vp": 5, "cp": 1, "mbs": 1, "sp": True, "recompute": "none", "sharding": "dist_opt"}
KEPT = ("tp", "pp", "vp", "cp", "mbs", "sp", "sharding")


def _fit(parallel):  # type: ignore[no-untyped-def]
    job = job_from_mapping({**BASE, "parallel": parallel}, "job.yaml")
    return job, fit(Question(job), speed=speed_of(job), speed_for=speed_of)


def _recompute_fix(result):  # type: ignore[no-untyped-def]
    return next(a for a in result.alternatives if "parallel.recompute_num_layers" in a.options)


def _fix_number(run_cli, path: str, option: str) -> int:  # type: ignore[no-untyped-def]
    """The 1-based number of the fix that sets `option`, as `fit --format json` lists it."""
    _, out, _ = run_cli("fit", path, "--format", "json")
    return 1 + next(i for i, a in enumerate(json.loads(out)["alternatives"]) if option in a["options"])


@pytest.fixture(scope="module")
def pp8_vp5():  # type: ignore[no-untyped-def]
    return _fit(PINS)


def test_a_70b_layout_4_6_gib_over_is_fixed_by_recomputing_one_layer_per_virtual_stage(pp8_vp5):
    job, result = pp8_vp5
    capacity = Question(job).space.reserves.capacity_bytes
    assert not result.fits and "memory" in result.violated_rules
    assert result.report is not None and 4 * GIB < result.report.peak_bytes - capacity < 5 * GIB
    fix = _recompute_fix(result)
    assert fix.options == {"parallel.recompute": "full", "parallel.recompute_method": "block",
                           "parallel.recompute_num_layers": 1}
    parallel = fix.layout.as_parallel()
    assert {k: parallel[k] for k in KEPT} == {k: PINS[k] for k in KEPT}
    assert fix.layout.recompute == "full" and fix.layout.recompute_num_layers == 1
    assert fix.peak_bytes <= capacity


def test_the_recompute_fix_names_its_axes_by_name_and_changes_the_recompute_pin(pp8_vp5):
    fix = _recompute_fix(pp8_vp5[1])
    assert fix.changed == ("recompute", "parallel.recompute_method", "recompute_num_layers")
    assert fix.pins_changed == ("recompute",) and not fix.keeps_pins


def test_the_fix_is_the_ledgers_bytes_for_the_job_with_the_options_set(pp8_vp5):
    job, result = pp8_vp5
    first = _recompute_fix(result)
    fixed = apply_options(job, first.options)
    assert fixed.spec.parallel.recompute_method == "block"
    assert MemoryModel(fixed).evaluate(first.layout, strict=False).peak_bytes == first.peak_bytes


def test_the_fewest_recomputed_layers_that_fit_are_named():
    # at PP4 VP5 (4 layers a chunk) recomputing 1 layer a chunk is still over; 2 fit
    job = job_from_mapping({**BASE, "parallel": {**PINS, "pp": 4}}, "job.yaml")
    first = next(a for a in option_fixes(Question(job), ("memory",), speed_of)
                 if "parallel.recompute_num_layers" in a.options)
    assert first.pins_changed == ("recompute",) and first.options["parallel.recompute_num_layers"] == 2
    capacity = Question(job).space.reserves.capacity_bytes
    one = apply_options(job, partial_recompute(1))
    layout = replace(first.layout, recompute_num_layers=1)
    assert MemoryModel(one).evaluate(layout, strict=False).peak_bytes > capacity >= first.peak_bytes


def test_recomputing_every_layer_of_a_chunk_is_not_offered_as_an_option():
    # TP2 PP8 MBS4 fits only when all 10 layers of each stage are recomputed: that is full recompute,
    # a change of the recompute pin among the nearest layouts, not a partial-recompute option
    job = job_from_mapping({**BASE, "parallel": {**PINS, "tp": 2, "vp": 1, "mbs": 4}}, "job.yaml")
    q = Question(job)
    assert not any("parallel.recompute_num_layers" in a.options for a in option_fixes(q, ("memory",), speed_of))
    full = job_from_mapping({**BASE, "parallel": {**PINS, "tp": 2, "vp": 1, "mbs": 4, "recompute": "full"}}, "j.yaml")
    assert Question(full).most_headroom() is not None


def test_the_recompute_fix_exported_to_megatron_carries_the_block_method(run_cli, write_job):
    path = write_job({**BASE, "parallel": PINS})
    n = _fix_number(run_cli, path, "parallel.recompute_num_layers")
    code, out, err = run_cli("export", path, "--to", "megatron", "--fix", str(n))
    assert code == 0, err
    assert "--recompute-granularity full" in out and "--recompute-method block" in out
    assert "--recompute-num-layers 1" in out and "--num-virtual-stages-per-pipeline-rank 5" in out


# The same 70B layout in FP8 with selective recompute: 72.57 GiB, within the 73.50 GiB the default
# allocator's 6% reserve leaves (stacks/allocators.yaml) but with less headroom than that reserve: tight.
FP8_SELECTIVE = {**BASE, "precision": "fp8", "parallel": {**PINS, "recompute": "selective"}}
# Llama 3.1 70B at 6,144 tokens, TP1 PP8 MBS1 without recompute on 64 H100: over; changing TP alone fits
# with less headroom than the reserve (tight), TP with SP or with CP fits with room.
TP1_6K = {**BASE, "seq_len": 6144, "parallel": {"tp": 1, "pp": 8, "cp": 1, "mbs": 1, "sp": False,
                                                "recompute": "none", "sharding": "dist_opt"}}


@pytest.fixture(scope="module")
def tp1_6k():  # type: ignore[no-untyped-def]
    job = job_from_mapping(TP1_6K, "job.yaml")
    return job, fit(Question(job), speed=speed_of(job), speed_for=speed_of)


def test_a_layout_within_the_allocator_reserve_fits_tight_at_the_default_allocator():
    job = job_from_mapping(FP8_SELECTIVE, "job.yaml")
    result = fit(Question(job), speed=speed_of(job), speed_for=speed_of)
    reserves = Question(job).space.reserves
    assert result.fits and reserves.allocator == "default"
    assert result.report is not None and 0 < reserves.capacity_bytes - result.report.peak_bytes < 2 * GIB


def test_expandable_segments_is_not_offered_while_its_reserve_is_no_smaller_than_the_defaults(pp8_vp5):
    # stacks/allocators.yaml: the runs that ran bound the default allocator at 7.00% (6%), and torchtitan's
    # reserved peaks put expandable segments at 6%: switching gains no bytes, so it is no fix
    _, result = pp8_vp5
    assert not [a for a in result.alternatives if "allocator.expandable_segments" in a.options]


def test_a_tight_fix_ranks_after_every_roomy_one_even_when_it_changes_fewer_pins(tp1_6k):
    _, result = tp1_6k
    tight = [a.tight for a in result.alternatives]
    assert tight == sorted(tight) and tight[-1] and not tight[0]
    tp_only = next(a for a in result.alternatives if a.changed == ("tp",))
    assert tp_only.tight and tp_only.headroom_bytes > 0
    assert all(len(a.pins_changed) >= 2 for a in result.alternatives if not a.tight)


def test_fixes_that_change_as_many_pins_rank_fastest_first(tp1_6k):
    _, result = tp1_6k
    roomy = [a for a in result.alternatives if not a.tight]
    keys = [(len(a.pins_changed), -(a.tokens_per_s_per_gpu or 0.0)) for a in roomy]
    assert keys == sorted(keys)


def test_a_job_that_runs_expandable_segments_exports_pytorchs_allocator(run_cli, write_job):
    path = write_job({**FP8_SELECTIVE, "allocator": {"expandable_segments": True}})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 0, err
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out


def test_the_same_job_fits_when_it_runs_expandable_segments():
    job = job_from_mapping({**FP8_SELECTIVE, "allocator": {"expandable_segments": True}}, "job.yaml")
    result = fit(Question(job), speed=speed_of(job), speed_for=speed_of)
    assert result.fits  # 72.57 GiB within the 73.50 GiB expandable segments leave


def test_the_exported_allocator_setting_reads_back_as_the_same_job(run_cli, write_job, tmp_path):
    path = write_job({**FP8_SELECTIVE, "allocator": {"expandable_segments": True}})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 0, err
    line = tmp_path / "launch.sh"
    line.write_text(out.split("\n", 4)[-1])  # drop the comments, the primus-job header among them
    config = import_launch("megatron", line, hardware="h100-80gb")
    assert config.job["allocator"] == {"expandable_segments": True}
    assert not any("PYTORCH_CUDA_ALLOC_CONF" in item for item in config.unmodelled)
    assert fit(Question(job_from_mapping(config.job, "launch.sh"))).fits


def test_a_stack_that_runs_expandable_segments_exports_them_with_the_launch(run_cli, write_job):
    # Megatron-Bridge 26.06's performance scripts set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for
    # every workload (scripts/performance/utils/executors.py PERF_ENV_VARS, stacks/megatron-bridge.yaml), and
    # fit's reserve assumes it: the launch line must run the allocator the verdict assumed.
    job = {**FP8_SELECTIVE, "stack": "megatron-bridge@26.06"}
    code, out, err = run_cli("fit", write_job(job), "--format", "json")
    assert code == 0, err
    code, out, err = run_cli("export", write_job(job), "--to", "megatron")
    assert code == 0, err
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    own = {**job, "allocator": {"expandable_segments": False}}  # the job's own setting wins over its stack's
    code, out, err = run_cli("export", write_job(own), "--to", "megatron")
    assert code == 0, err
    assert "PYTORCH_CUDA_ALLOC_CONF" not in out


def test_fix_of_a_job_fit_has_no_suggestion_for_is_a_negative_answer(run_cli, write_job):
    # Llama 3.1 70B on one H100: 1,153.55 GB at its peak (optimizer state alone 564.43 GB), nothing at 1 GPU
    # fits; fit's smallest size is 16 GPUs (its FSDP shards), which `fit` prints too
    job = write_job({"model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 1, "seq_len": 8192,
                     "global_batch_size": 16})
    code, out, err = run_cli("export", job, "--to", "megatron", "--fix", "1")
    assert (code, out) == (1, "")
    assert "no suggestion for this job (--fix 1): no layout fits on 1 GPU" in err
    assert "the smallest size at which one does: 16 GPUs (2 nodes of 8)" in err
    code, fit_out, _ = run_cli("fit", job)
    assert code == 1 and "the smallest size at which one does: 16 GPUs (2 nodes of 8)" in fit_out


def test_fix_past_the_last_suggestion_is_bad_input(run_cli, write_job):
    code, out, err = run_cli("export", write_job({**BASE, "parallel": PINS}), "--to", "megatron", "--fix", "100")
    assert (code, out, err.count("\n")) == (2, "", 1) and "--fix: 100: fit has" in err


def test_a_fix_is_shown_at_the_speed_project_gives_its_layout(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # review 46, M5: Llama 3.1 405B on 64 nodes of H200 at TP8 PP8 with first/last stages of 14 (which 126
    # layers cannot split evenly): fit showed the first/last-15 fix at its fast-path number (183.46) while
    # project and tune showed the same layout simulated (181.04); it is now shown as `project` gives it
    job = {"model": "llama3.1-405b", "hardware": "h200", "nodes": 64, "seq_len": 8192, "global_batch_size": 512,
           "precision": "bf16", "parallel": {"tp": 8, "pp": 8, "vp": 1, "cp": 1, "mbs": 1, "sp": True,
                                             "recompute": "none", "sharding": "dist_opt"},
           "pipeline": {"decoder_first_pipeline_num_layers": 14, "decoder_last_pipeline_num_layers": 14}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    assert code == 1
    first = json.loads(out)["alternatives"][0]
    assert first["options"] == {"pipeline.decoder_first_pipeline_num_layers": 15,
                                "pipeline.decoder_last_pipeline_num_layers": 15}
    fixed = {**job, "parallel": first["parallel"],
             "pipeline": {"decoder_first_pipeline_num_layers": 15, "decoder_last_pipeline_num_layers": 15}}
    code, out, _ = run_cli("project", write_job(fixed), "--format", "json")
    assert code == 0 and json.loads(out)["tokens_per_s_per_gpu"] == pytest.approx(first["tokens_per_s_per_gpu"],
                                                                                 rel=1e-9)
