"""Frontier-scale answers (issue 16): the bounded search returns what exhaustive scoring would, the
enumerator's explanations equal the violation matrix's, and fixes keep the user's layout."""

from __future__ import annotations

import json

import pytest

from primus.job import job_from_mapping, load_job
from primus.projection.bound import SpeedBound
from primus.projection.complete import RESIMULATE, complete_and_project, rank_layouts, speed_of
from primus.projection.project import projector_for
from primus.solver.api import Question
from primus.solver.core import minimal_core as matrix_core
from primus.solver.core import violations
from primus.solver.explain import Asker
from primus.solver.explain import minimal_core as enumerated_core
from primus.solver.fit import fit
from tests.conftest import EXAMPLES

SMALL_JOBS = [
    {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64},
    {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 4096, "global_batch_size": 64},
    {"model": "llama3.1-70b", "hardware": "mi300x", "nodes": 2, "seq_len": 8192, "global_batch_size": 32},
]


def _exhaustive(job):  # type: ignore[no-untyped-def]
    """The fastest completion by scoring every legal layout: the RESIMULATE leaders of the fast ranking
    re-timed, the most tokens/s/GPU first, equal numbers in canonical layout order."""
    legal = Question(job).legal()
    proj = projector_for(job)
    ranked = rank_layouts(job, legal, method="fast", resimulate=0)
    finals = [proj.project(p.layout, "auto", peak=(p.peak_bytes, True)) for p in ranked[:RESIMULATE]]
    return min(finals, key=lambda p: (-p.tokens_per_s_per_gpu, p.layout.key()))


@pytest.mark.parametrize("data", SMALL_JOBS, ids=lambda d: d["model"])
def test_the_bounded_search_returns_the_layout_exhaustive_scoring_returns(data):
    job = job_from_mapping(data, "job.yaml")
    bounded = complete_and_project(job)
    exhaustive = _exhaustive(job)
    assert bounded.layout == exhaustive.layout
    assert bounded.step_time_s == exhaustive.step_time_s


@pytest.mark.parametrize("data", SMALL_JOBS, ids=lambda d: d["model"])
def test_the_bound_is_never_below_the_projection(data):
    job = job_from_mapping(data, "job.yaml")
    q = Question(job)
    cands = q.candidates
    speed = speed_of(job)
    assert speed is not None
    bounds = SpeedBound(projector_for(job))
    coarse = bounds.group_bounds(cands)
    unsharded = bounds.unsharded_bounds(cands)
    for i in range(0, cands.n, max(1, cands.n // 300)):
        layout = cands.layout(i)
        fine = bounds.upper_bound(layout)
        tokens = speed(layout, int(cands.cols["peak_bytes"][i]))
        assert tokens <= fine * (1 + 1e-12) and fine <= unsharded(i) * (1 + 1e-12), layout
        assert unsharded(i) <= coarse[i] * (1 + 1e-12), layout


@pytest.mark.parametrize("parallel", [
    {"tp": 1, "pp": 1, "sp": False, "mbs": 1, "recompute": "selective", "sharding": "dist_opt"},
    {"tp": 8, "pp": 4, "dp": 4},
    {"cp": 32},
    {"tp": 16},
])
def test_the_enumerated_core_is_the_violation_matrix_core(parallel):
    job = job_from_mapping({"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 8192,
                            "global_batch_size": 128, "parallel": parallel}, "job.yaml")
    q = Question(job)
    assert enumerated_core(Asker(q)) == matrix_core(violations(q))


@pytest.fixture(scope="module")
def deepseek_pp8vp4():  # type: ignore[no-untyped-def]
    job = load_job(EXAMPLES / "deepseek-v3-h100-1024-pp8vp4.yaml")
    return job, fit(Question(job), speed=speed_of(job), speed_for=speed_of)


def test_the_first_fix_of_deepseek_v3_at_pp8_vp4_keeps_the_layout_and_sets_a_pipeline_option(deepseek_pp8vp4):
    # 61 decoder layers do not split over PP8 x VP4 = 32 chunks; counting the embedding and the loss
    # (63) or uneven first/last stages cannot fix it either, a pipeline layout string can
    job, result = deepseek_pp8vp4
    assert not result.fits and "pipeline-split" in result.violated_rules
    first = result.alternatives[0]
    assert (first.layout.pp, first.layout.vp, first.layout.tp, first.layout.ep) == (8, 4, 2, 64)
    assert first.changed == ("pipeline.layout",) and set(first.options) == {"pipeline.layout"}
    assert first.keeps_pins
    # completed by the fastest layout with room: a tight completion is taken only when none has room
    assert not first.tight and first.headroom_bytes >= Question(job).space.reserves.tight_band_bytes


def test_fixes_that_keep_every_pin_rank_before_fixes_that_change_one(deepseek_pp8vp4):
    _, result = deepseek_pp8vp4
    keeps = [a.keeps_pins for a in result.alternatives]
    assert keeps == sorted(keeps, reverse=True) and keeps[0] and not keeps[-1]
    doc = result.to_json(0)
    assert doc["alternatives"][0]["options"] == {"pipeline.layout": result.alternatives[0].options["pipeline.layout"]}
    assert all(a["options"] == {} for a in doc["alternatives"][1:] if "." not in "".join(a["changed"]))


def test_the_fix_exported_to_megatron_carries_the_pipeline_layout(run_cli, deepseek_pp8vp4):
    _, result = deepseek_pp8vp4
    layout_text = result.alternatives[0].options["pipeline.layout"]
    code, out, err = run_cli("export", str(EXAMPLES / "deepseek-v3-h100-1024-pp8vp4.yaml"), "--to", "megatron",
                             "--fix", "1")
    assert code == 0, err
    assert "--pipeline-model-parallel-layout" in out and layout_text in out
    assert "--pipeline-model-parallel-size 8" in out  # VP 4 follows from the layout's 32 chunks


def test_126_layers_over_pp16_are_fixed_first_by_counting_the_embedding_and_the_loss():
    # Llama 3.1 405B's 126 layers + embedding + loss = 128 = 16 x 8 (Megatron-Bridge's default split)
    job = job_from_mapping({"model": "llama3.1-405b", "hardware": "h100-80gb", "gpus": 1024, "seq_len": 8192,
                            "global_batch_size": 512, "parallel": {"tp": 8, "pp": 16}}, "job.yaml")
    result = fit(Question(job), speed=speed_of(job), speed_for=speed_of)
    first = result.alternatives[0]
    assert first.options == {"pipeline.account_for_embedding_in_pipeline_split": True,
                             "pipeline.account_for_loss_in_pipeline_split": True}
    assert (first.layout.tp, first.layout.pp) == (8, 16)
    kept = [a for a in result.alternatives if a.keeps_pins]
    speeds = [a.tokens_per_s_per_gpu for a in kept]
    assert len(kept) >= 2 and speeds == sorted(speeds, reverse=True)


def test_fit_json_lists_options_for_every_alternative(run_cli, write_job):
    job = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 8192, "global_batch_size": 128,
           "parallel": {"tp": 1, "pp": 1, "sp": False, "mbs": 1, "recompute": "selective", "sharding": "dist_opt"}}
    doc = json.loads(run_cli("fit", write_job(job), "--format", "json")[1])
    assert doc["alternatives"] and all("options" in a and "changed" in a for a in doc["alternatives"])
