"""A layout at PP 1 keeps none of the job's pipeline options (`primus.solver.options.unset_at_pp`, the one
place that decides it): one stage builds the embedding, every layer and the loss. NVIDIA/Megatron-LM
d98e8a6 accepts the embedding and loss accounting at PP 1 and builds the same stage with or without it
(transformer_config.py lines 2370-2385 and training/arguments.py lines 988-998: N + 2 layers over PP 1 is
always whole; transformer_block.py lines 147-159 and 191-201: N + 2 less the two slots is N; transformer_layer.py
line 74: offset 0 without PP), so such a job is not refused on load; a `fit` suggestion that moves to PP 1
names the options unset and is sized and projected without them, and the Megatron export at PP 1 leaves
their flags out with a note. Before, fit's PP 1 suggestion changed `pp` only and the export wrote
`--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split` at PP 1.

The case: Llama 3.1 8B on 2 nodes of 8 H100 at global batch 32, counting the embedding and the loss in the
split (32 + 2 = 34 units); PP 3 does not divide 16 GPUs, and the nearest layout is TP1 PP1 DP16 with ZeRO-2,
9,924 tokens/s/GPU and 67,635,163,136 bytes at peak, what tune also finds for it
(tests/test_tune_pipeline_options.py: the same layout and number with first/last stages of 3 unset)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.job import job_from_mapping
from primus.solver.options import apply_options, pipeline_difference, unset_at_pp
from primus.specs.job import PipelineOptions
from tests.conftest import as_json
from tests.test_pipeline_fixes_at_pp1 import _changed_cell

ACCOUNTED = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
UNSET = {"pipeline.account_for_embedding_in_pipeline_split": None,
         "pipeline.account_for_loss_in_pipeline_split": None}
L8: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192,
                      "global_batch_size": 32, "precision": "bf16"}
L8_PP1 = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 16, "mbs": 1, "sp": False,
          "recompute": "none", "sharding": "zero2"}
PINNED_PP1 = {"tp": 1, "pp": 1, "cp": 1, "dp": 16, "mbs": 1, "sp": False, "recompute": "none",
              "sharding": "zero2"}
PP3 = {**L8, "parallel": {"tp": 1, "pp": 3}, "pipeline": ACCOUNTED}  # 3 does not divide 16 GPUs
PEAK = 67_635_163_136  # TP1 PP1 DP16 ZeRO-2, with or without the accounting
ACCOUNTING_FLAGS = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")


def test_no_pipeline_option_survives_at_pp_1_and_every_one_survives_above() -> None:
    job = job_from_mapping({**L8, "pipeline": ACCOUNTED}, "job.yaml")
    assert unset_at_pp(job, 1) == UNSET
    assert unset_at_pp(job, 2) == {}
    one_stage_layout = job_from_mapping({**L8, "pipeline": {"layout": "Et*32L"}}, "job.yaml")
    assert unset_at_pp(one_stage_layout, 1) == {"pipeline.layout": None}


def test_a_fix_that_drops_a_boolean_option_names_it_unset_and_applying_that_clears_it() -> None:
    job = job_from_mapping({**L8, "pipeline": ACCOUNTED}, "job.yaml")
    changes = pipeline_difference(job, PipelineOptions(layout="Et*16|t*16L"))
    assert changes == {"pipeline.layout": "Et*16|t*16L", **UNSET}
    assert apply_options(job, changes).spec.pipeline == PipelineOptions(layout="Et*16|t*16L")


@pytest.fixture(scope="module")
def pp3_fit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from click.testing import CliRunner

    from primus.cli.main import cli

    path = tmp_path_factory.mktemp("pp3") / "job.yaml"
    path.write_text(yaml.safe_dump(PP3, sort_keys=False))
    result = CliRunner().invoke(cli, ["fit", str(path), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 1
    return as_json(result.stdout)


def test_a_suggestion_that_moves_to_pp_1_unsets_the_jobs_pipeline_options(pp3_fit) -> None:
    first = pp3_fit["alternatives"][0]
    assert first["parallel"] == L8_PP1 and first["pins_changed"] == ["pp"]
    assert first["changed"] == ["pp", *UNSET] and first["options"] == UNSET
    assert round(first["tokens_per_s_per_gpu"]) == 9955


def test_a_suggestion_above_pp_1_keeps_the_jobs_pipeline_options(pp3_fit) -> None:
    second = pp3_fit["alternatives"][1]  # TP1 PP2 VP17 CP2: 34 units over 2 x 17 chunks, the accounting kept
    assert (second["parallel"]["pp"], second["parallel"]["vp"]) == (2, 17)
    assert second["changed"] == ["pp"] and second["options"] == {}


def test_the_pp_1_suggestion_says_what_it_unsets(run_cli, write_job) -> None:
    _, text, _ = run_cli("fit", write_job(PP3))
    said = ("pp, pipeline.account_for_embedding_in_pipeline_split unset, "
            "pipeline.account_for_loss_in_pipeline_split unset")
    assert _changed_cell(text, 1).replace(" ", "") == said.replace(" ", "")  # the cell wraps inside a name


def test_the_pp_1_suggestion_has_the_bytes_and_number_of_the_options_unset_job_file(pp3_fit, run_cli,
                                                                                    write_job) -> None:
    first = pp3_fit["alternatives"][0]
    unset = write_job({**L8, "parallel": PINNED_PP1}, "unset.yaml")
    code, out, _ = run_cli("fit", unset, "--format", "json")
    assert code == 0 and as_json(out)["peak_bytes"] == first["peak_bytes"] == PEAK
    code, out, _ = run_cli("project", unset, "--format", "json")
    assert code == 0 and as_json(out)["tokens_per_s_per_gpu"] == first["tokens_per_s_per_gpu"]


def test_accounting_typed_with_pp_1_pinned_loads_and_fits_as_without_it(run_cli, write_job) -> None:
    # Megatron-LM runs it (the same one stage), so it is no bad input
    code, out, err = run_cli("fit", write_job({**L8, "parallel": PINNED_PP1, "pipeline": ACCOUNTED}), "--format",
                             "json")
    assert code == 0 and err == "" and as_json(out)["peak_bytes"] == PEAK


def test_the_megatron_export_at_pp_1_leaves_the_accounting_flags_out_with_a_note(run_cli, write_job) -> None:
    code, args, err = run_cli("export", write_job({**L8, "parallel": PINNED_PP1, "pipeline": ACCOUNTED}),
                              "--to", "megatron")
    assert code == 0 and "--pipeline-model-parallel-size 1" in args
    assert not [f for f in ACCOUNTING_FLAGS if f in args]
    assert ("note: pipeline.account_for_embedding_in_pipeline_split, pipeline.account_for_loss_in_pipeline_split "
            "dropped at PP 1") in err


def test_the_megatron_export_above_pp_1_still_writes_the_accounting_flags(run_cli, write_job) -> None:
    job = {**L8, "parallel": {**PINNED_PP1, "pp": 2, "vp": 17, "cp": 2, "dp": 4, "sharding": "dist_opt"},
           "pipeline": ACCOUNTED}
    code, args, err = run_cli("export", write_job(job), "--to", "megatron")
    assert code == 0 and all(f in args for f in ACCOUNTING_FLAGS) and "dropped at PP 1" not in err


def test_exporting_the_pp_1_suggestion_writes_the_job_with_the_options_unset(run_cli, write_job) -> None:
    code, args, err = run_cli("export", write_job(PP3), "--to", "megatron", "--fix", "1")
    assert code == 0 and "--pipeline-model-parallel-size 1" in args
    assert not [f for f in ACCOUNTING_FLAGS if f in args]
    assert ("suggestion 1 changes pp, pipeline.account_for_embedding_in_pipeline_split unset, "
            "pipeline.account_for_loss_in_pipeline_split unset") in err


def test_the_pp_1_export_imports_back_to_the_same_bytes(run_cli, write_job, tmp_path: Path) -> None:
    _, args, _ = run_cli("export", write_job({**L8, "parallel": PINNED_PP1, "pipeline": ACCOUNTED}), "--to",
                         "megatron")
    script = tmp_path / "launch.sh"
    script.write_text(args)
    code, out, _ = run_cli("fit", "--from", "megatron", str(script), "--hardware", "h100-80gb", "--nodes", "2",
                           "--format", "json")
    assert code == 0 and as_json(out)["peak_bytes"] == PEAK


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from primus.cli.main import cli

    root = tmp_path_factory.mktemp("tune")
    (root / "job.yaml").write_text(yaml.safe_dump({**L8, "parallel": {"tp": 8}, "pipeline": ACCOUNTED}))
    result = CliRunner().invoke(cli, ["tune", str(root / "job.yaml"), "--llm", "none", "--out", str(root / "t"),
                                      "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0
    return root / "t"


def test_tune_finds_the_pp_1_layout_at_fits_number(tuned, pp3_fit) -> None:
    best = as_json((tuned / "result.json").read_text())["best"]
    fix = pp3_fit["alternatives"][0]
    assert best["parallel"] == fix["parallel"] == L8_PP1
    # the same layout of two job files (the options unset, or kept where PP 1 ignores them): the same bytes, and
    # the same figure up to the order in which the one stage's blocks are added (an ulp)
    assert best["peak_bytes"] == fix["peak_bytes"]
    assert best["tokens_per_s_per_gpu"] == pytest.approx(fix["tokens_per_s_per_gpu"], rel=1e-12)


def test_the_export_of_a_tuned_pp_1_run_leaves_the_accounting_flags_out(tuned, run_cli) -> None:
    code, args, _ = run_cli("export", "--from-tune", str(tuned / "result.json"), "--to", "megatron")
    assert code == 0 and "--pipeline-model-parallel-size 1" in args
    assert not [f for f in ACCOUNTING_FLAGS if f in args]


def test_allow_pipeline_keeps_the_pp_1_layout_at_fits_number(pp3_fit, tmp_path: Path) -> None:
    # the job's own options already hold PP 1 (34 units on one stage), so no other option set is tried
    from click.testing import CliRunner

    from primus.cli.main import cli

    (tmp_path / "job.yaml").write_text(yaml.safe_dump({**L8, "parallel": {"tp": 8}, "pipeline": ACCOUNTED}))
    result = CliRunner().invoke(cli, ["tune", str(tmp_path / "job.yaml"), "--llm", "none", "--allow", "pipeline",
                                      "--out", str(tmp_path / "t"), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0
    best, fix = as_json(result.stdout)["best"], pp3_fit["alternatives"][0]
    assert best["parallel"] == fix["parallel"]
    assert best["tokens_per_s_per_gpu"] == pytest.approx(fix["tokens_per_s_per_gpu"], rel=1e-12)  # an ulp: see above
