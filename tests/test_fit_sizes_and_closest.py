"""When nothing fits at the size asked for (review 01, items 3 and 16): `fit` names the nearest sizes
below and above at which a layout does, offers the pipeline options that make a free job legal, and
its closest evaluation of the request keeps every structural rule it can, naming the ones it breaks."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES

# Llama 3.1 8B on 96 H100 (12 nodes) at global batch 64, every axis free: DP divides 64 and TP, CP are
# powers of two (scale-up domain of 8; seq 4,096 in 2 x CP chunks), so the factor 3 falls to PP, and
# 32 layers do not split over 3, 6, 12 or 24 stages evenly.
FREE96 = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 96, "seq_len": 4096, "global_batch_size": 64,
          "precision": "bf16"}


def _fit(run_cli, path: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    code, out, _ = run_cli("fit", path, "--format", "json")
    assert code == 1
    return json.loads(out)  # type: ignore[no-any-return]


def test_the_nearest_sizes_below_and_above_are_named(run_cli, write_job):
    doc = _fit(run_cli, write_job(FREE96))
    assert doc["nearest_sizes"] == {"below": 64, "above": 128}
    assert "min_gpus" not in doc  # 64 fits: 128 is not the smallest size that does
    _, text, _ = run_cli("fit", write_job(FREE96))
    assert ("no layout fits on 96 GPUs (12 nodes of 8); the nearest sizes at which one does: "
            "64 GPUs (8 nodes of 8) below, 128 GPUs (16 nodes of 8) above") in text


def test_no_size_between_the_nearest_ones_fits(run_cli, write_job):
    for gpus, count_exit in ((64, 0), (72, 1), (80, 1), (88, 1), (104, 1), (112, 1), (120, 1), (128, 0)):
        assert run_cli("enumerate", write_job({**FREE96, "gpus": gpus}), "--count")[0] == count_exit, gpus


def test_a_pinned_job_gets_the_sizes_with_its_pins_released(run_cli, write_job):
    doc = _fit(run_cli, write_job({**FREE96, "parallel": {"tp": 8, "pp": 1, "dp": 4, "cp": 3}}))
    assert doc["alternatives"] == [] and doc["nearest_sizes"] == {"below": 64, "above": 128}


def test_a_free_job_is_offered_the_pipeline_options_that_make_it_legal(run_cli, write_job):
    doc = _fit(run_cli, write_job(FREE96))
    assert doc["alternatives"]
    for alt in doc["alternatives"]:
        assert alt["pins_changed"] == [] and alt["options"]
        assert all(path.startswith("pipeline.") for path in alt["options"])
        assert 32 % alt["parallel"]["pp"]  # a pipeline the even split refuses


def test_a_pipeline_option_fix_of_a_free_job_fits_as_written(run_cli, write_job):
    alt = _fit(run_cli, write_job(FREE96))["alternatives"][0]
    pipeline = {path.split(".", 1)[1]: value for path, value in alt["options"].items()}
    code, out, _ = run_cli("fit", write_job({**FREE96, "parallel": alt["parallel"], "pipeline": pipeline}),
                           "--format", "json")
    assert code == 0 and json.loads(out)["peak_bytes"] == alt["peak_bytes"]


def test_the_closest_evaluation_of_a_free_job_breaks_only_the_pipeline_split(run_cli, write_job):
    doc = _fit(run_cli, write_job(FREE96))
    assert doc["closest_breaks"] == ["pipeline-split"]
    assert doc["parallel"]["tp"] <= 8 and doc["parallel"]["pp"] == 3
    _, text, _ = run_cli("fit", write_job(FREE96))
    assert "closest evaluation of the request (breaks pipeline-split): TP8 PP3" in text


def test_the_closest_evaluation_of_deepseek_v3_keeps_cp_within_the_attention_tile(run_cli):
    # 61 layers over PP8 x VP4 fail the split; the closest evaluation holds every other rule: CP at most
    # 4,096 / (2 x 128) = 16 (cp-chunk-tile), not CP 64's 32-token chunks
    doc = _fit(run_cli, str(EXAMPLES / "deepseek-v3-h100-1024-pp8vp4.yaml"))
    assert doc["closest_breaks"] == ["pipeline-split"]
    assert 2 * 128 * doc["parallel"]["cp"] <= 4096
    assert (doc["parallel"]["pp"], doc["parallel"]["vp"]) == (8, 4)


def test_a_closest_evaluation_that_passes_every_rule_breaks_none(run_cli, write_job):
    doc = _fit(run_cli, write_job({**FREE96, "gpus": 8, "parallel": {"tp": 1, "pp": 1, "dp": 8, "cp": 1,
                                                                     "recompute": "none", "sharding": "dist_opt"}}))
    assert doc["closest_breaks"] == [] and "memory" in doc["violated_rules"]
