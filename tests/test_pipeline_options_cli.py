"""The job's pipeline options decide which PP x VP a search may use, at PP 1 too, and options no PP can
satisfy are bad input in every command (review 44: `fit` answered PP 1 for a two-stage layout that
`export` then refused, and a malformed layout only `memory` refused)."""

from __future__ import annotations

from typing import Any

from tests.conftest import as_json

# Llama 3.1 70B (80 decoder layers) on 16 MI300X, everything but PP pinned
JOB: dict[str, Any] = {"model": "llama3.1-70b", "hardware": "mi300x", "nodes": 2, "seq_len": 8192,
                       "global_batch_size": 128,
                       "parallel": {"tp": 8, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "full",
                                    "sharding": "dist_opt"}}


def test_a_two_stage_layout_string_is_legal_only_at_pp_2(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Megatron-LM d98e8a6 arguments.py: the layout's stage count is PP x VP; "Et*40|t*40L" has 2 stages
    path = write_job({**JOB, "pipeline": {"layout": "Et*40|t*40L"}})
    code, out, _ = run_cli("enumerate", path, "--format", "json")
    assert code == 0 and {c["parallel"]["pp"] for c in as_json(out)["layouts"]} == {2}
    code, out, _ = run_cli("fit", path, "--format", "json")
    assert code == 0 and as_json(out)["parallel"]["pp"] == 2


def test_a_layout_string_pinned_to_the_wrong_pp_does_not_fit_and_says_why(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**JOB, "parallel": {**JOB["parallel"], "pp": 1}, "pipeline": {"layout": "Et*40|t*40L"}})
    code, out, _ = run_cli("fit", path, "--format", "json")
    assert code == 1 and "pipeline-split" in as_json(out)["violated_rules"]


def test_a_layout_string_that_does_not_match_the_model_is_bad_input_in_fit(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**JOB, "pipeline": {"layout": "Et*3|tL"}})  # 4 decoder layers of 80
    code, out, err = run_cli("fit", path, "--format", "json")
    assert (code, out) == (2, "") and "has 4 decoder layers 't' but the model has num_layers=80" in err


def test_first_and_last_stages_larger_than_the_model_are_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**JOB, "pipeline": {"decoder_first_pipeline_num_layers": 500}})
    code, out, err = run_cli("enumerate", path, "--count")
    assert (code, out) == (2, "") and "pipeline.decoder_first_pipeline_num_layers" in err and "500" in err


def test_an_uneven_first_stage_rules_out_pp_1(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # transformer_config.py (d98e8a6): with PP 1 no middle stage is left for the layers after the first stage's
    path = write_job({**JOB, "pipeline": {"decoder_first_pipeline_num_layers": 20}})
    code, out, _ = run_cli("enumerate", path, "--format", "json")
    assert code == 0 and 1 not in {c["parallel"]["pp"] for c in as_json(out)["layouts"]}
