"""`primus tune` and the job's pipeline options (`pipeline:`): the search covers the job as written, its
certificate says so, and the layouts other pipeline options make legal that are projected faster are
named beside it with every option they change, re-checkable by `primus audit verify`.

The case is the review's: Llama 3.1 405B (126 layers) on 64 DGX H200 nodes, TP8 PP8 pinned with first
and last stages of 14 layers, which no PP 8 split can hold (98 middle layers over 6 stages). Tune's
best under those options is a PP16 layout at 113 tokens/s/GPU, while the reference's nearest legal
variant (first and last stages of 15, PP8: fit's fix that changes the fewest options) is projected at 181
and counting the embedding and the loss in the split (Megatron-Core's account_for_* options: 128 units
over any power of two) reaches 218."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import as_json

L405_FIRST_LAST_14 = {
    "model": "llama3.1-405b", "hardware": "h200", "nodes": 64, "seq_len": 8192, "global_batch_size": 512,
    "precision": "bf16",
    "parallel": {"tp": 8, "pp": 8, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                 "sharding": "dist_opt"},
    "pipeline": {"decoder_first_pipeline_num_layers": 14, "decoder_last_pipeline_num_layers": 14},
}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    from click.testing import CliRunner

    from primus.cli.main import cli

    root = tmp_path_factory.mktemp("l405")
    job = root / "l405p.yaml"
    import yaml

    job.write_text(yaml.safe_dump(L405_FIRST_LAST_14, sort_keys=False))
    out = root / "t"
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--out", str(out), "--format", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    return as_json(result.stdout), out, str(job)


def test_the_certificate_names_the_pipeline_options_it_covers(tuned) -> None:
    doc, _, _ = tuned
    cert = doc["certificate"]
    assert cert["scope"] == ("the job's pipeline options (pipeline.decoder_first_pipeline_num_layers=14, "
                             "pipeline.decoder_last_pipeline_num_layers=14)")
    assert cert["faster_with_changed_options"] is True


def test_no_layout_shown_on_the_page_is_faster_than_the_best_without_being_named_as_needing_other_options(tuned):
    doc, _, _ = tuned
    best = doc["best"]["tokens_per_s_per_gpu"]
    near = doc["reference"]["nearest_legal"]
    assert near["options"] and near["tokens_per_s_per_gpu"] > best  # 181 vs 113
    named = {(json.dumps(v["parallel"], sort_keys=True), json.dumps(v["options"], sort_keys=True))
             for v in doc["faster_with_changed_options"]}
    # fit's fixes name every option they change (the job's own first/last counts too), so the variant
    # carries the nearest fix's options as they are
    assert (json.dumps(near["parallel"], sort_keys=True), json.dumps(near["options"], sort_keys=True)) in named


def test_the_fastest_variant_counts_the_embedding_and_the_loss_and_names_the_dropped_first_last_counts(tuned):
    doc, _, _ = tuned
    top = doc["faster_with_changed_options"][0]
    assert top["options"] == {"pipeline.account_for_embedding_in_pipeline_split": True,
                              "pipeline.account_for_loss_in_pipeline_split": True,
                              "pipeline.decoder_first_pipeline_num_layers": None,
                              "pipeline.decoder_last_pipeline_num_layers": None}
    assert round(top["tokens_per_s_per_gpu"]) == 218
    speeds = [v["tokens_per_s_per_gpu"] for v in doc["faster_with_changed_options"]]
    assert speeds == sorted(speeds, reverse=True) and min(speeds) > doc["best"]["tokens_per_s_per_gpu"]


def test_the_variant_with_its_options_set_in_the_job_file_is_what_fit_proves(tuned, run_cli, write_job) -> None:
    doc, _, _ = tuned
    top = doc["faster_with_changed_options"][0]
    pipeline = {k.removeprefix("pipeline."): v for k, v in top["options"].items() if v is not None}
    job = {**L405_FIRST_LAST_14, "pipeline": pipeline,
           "parallel": {k: v for k, v in top["parallel"].items() if k not in ("dp", "ep", "etp")}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    assert code == 0
    assert as_json(out)["peak_bytes"] == top["peak_bytes"]


def test_the_report_states_the_scope_and_lists_the_variants(tuned) -> None:
    _, out, _ = tuned
    md = (out / "report.md").read_text()
    assert "Certificate: under the job's pipeline options" in md
    assert "### Faster with other pipeline options" in md
    assert "no legal layout is projected faster" not in md


def test_audit_verify_rechecks_the_variants_and_catches_a_forged_number(tuned, run_cli, tmp_path) -> None:
    _, out, _ = tuned
    code, _, _ = run_cli("audit", "verify", str(out))
    assert code == 0
    import shutil

    forged = tmp_path / "forged"
    shutil.copytree(out, forged)
    path = forged / "result.json"
    doc = json.loads(path.read_text())
    doc["faster_with_changed_options"][0]["tokens_per_s_per_gpu"] *= 1.5
    path.write_text(json.dumps(doc, indent=1))
    code, stdout, stderr = run_cli("audit", "verify", str(forged))
    assert code == 1
    assert "faster_with_changed_options[0]: tokens_per_s_per_gpu recorded" in stdout + stderr


def test_a_job_whose_options_split_every_pipeline_size_names_no_variant(run_cli, write_job, tmp_path) -> None:
    job = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64,
           "precision": "bf16", "parallel": {"tp": 2, "pp": 1, "cp": 1}}
    code, out, _ = run_cli("tune", write_job(job), "--llm", "none", "--out", str(tmp_path / "t"), "--format", "json")
    assert code == 0
    doc = as_json(out)
    assert doc["faster_with_changed_options"] == []
    assert doc["certificate"]["scope"] == "the job's pipeline options (none set: Megatron's default split)"


L8_FIRST_LAST_3 = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192, "global_batch_size": 32,
    "precision": "bf16", "parallel": {"tp": 8},
    "pipeline": {"decoder_first_pipeline_num_layers": 3, "decoder_last_pipeline_num_layers": 3},
}


def test_allow_pipeline_searches_the_named_option_sets_and_keeps_the_fastest(run_cli, write_job, tmp_path) -> None:
    path = write_job(L8_FIRST_LAST_3)
    code, out, _ = run_cli("tune", path, "--llm", "none", "--out", str(tmp_path / "own"), "--format", "json")
    assert code == 0
    own = as_json(out)
    code, out, _ = run_cli("tune", path, "--llm", "none", "--allow", "pipeline", "--out", str(tmp_path / "p"),
                           "--format", "json")
    assert code == 0
    doc = as_json(out)
    change = doc["allowed_changes"]["pipeline"]
    assert change["requested"] == {"pipeline.decoder_first_pipeline_num_layers": 3,
                                   "pipeline.decoder_last_pipeline_num_layers": 3}
    assert change["chosen"]["pipeline.account_for_embedding_in_pipeline_split"] is True
    assert doc["best"]["tokens_per_s_per_gpu"] > own["best"]["tokens_per_s_per_gpu"]
    assert doc["best"]["tokens_per_s_per_gpu"] >= max(v["tokens_per_s_per_gpu"]
                                                      for v in own["faster_with_changed_options"])


def test_the_run_with_changed_pipeline_options_records_them_in_its_job_file_and_verifies(run_cli, write_job,
                                                                                         tmp_path) -> None:
    out = tmp_path / "p"
    code, _, _ = run_cli("tune", write_job(L8_FIRST_LAST_3), "--llm", "none", "--allow", "pipeline", "--out",
                         str(out), "--format", "json")
    assert code == 0
    import yaml

    recorded = yaml.safe_load((out / "inputs" / "job.yaml").read_text())
    assert recorded["pipeline"] == {"account_for_embedding_in_pipeline_split": True,
                                    "account_for_loss_in_pipeline_split": True}
    code, _, _ = run_cli("audit", "verify", str(out))
    assert code == 0


def test_a_job_whose_own_options_leave_nothing_legal_still_names_the_layouts_other_options_allow(
        run_cli, write_job, tmp_path) -> None:
    # 96 GPUs at global batch 64 need a factor 3 only PP can hold; 32 layers do not split over 3 stages
    job = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 96, "seq_len": 8192, "global_batch_size": 64,
           "precision": "bf16", "parallel": {"tp": 1}}
    code, out, _ = run_cli("tune", write_job(job), "--llm", "none", "--out", str(tmp_path / "t"), "--format", "json")
    doc = as_json(out)
    assert doc["best"]["parallel"] is None and code == 1
    assert doc["faster_with_changed_options"]
    assert all(v["parallel"]["pp"] % 3 == 0 for v in doc["faster_with_changed_options"])


def test_the_megatron_export_of_a_run_with_changed_pipeline_options_carries_them(run_cli, write_job, tmp_path):
    out = tmp_path / "p"
    code, _, _ = run_cli("tune", write_job(L8_FIRST_LAST_3), "--llm", "none", "--allow", "pipeline", "--out",
                         str(out), "--format", "json")
    assert code == 0
    code, args, _ = run_cli("export", "--from-tune", str(out / "result.json"), "--to", "megatron")
    assert code == 0
    assert "--account-for-embedding-in-pipeline-split" in args and "--account-for-loss-in-pipeline-split" in args
    assert "--decoder-first-pipeline-num-layers" not in args
