"""At PP 1 no pipeline option means anything (one stage builds the embedding, every layer and the loss), so
the pipeline fix at PP 1 is every option the job set, unset (review 46, M2). NVIDIA/Megatron-LM d98e8a6
refuses first/last stage sizes there (transformer_config.py lines 2341-2345: layers left with no middle
stage) and a layout string of more than one stage (it reads n stages as VP n and asserts PP > 1 under VP,
training/arguments.py lines 941-950 and 1000-1009), and ignores the embedding and loss accounting
(transformer_block.py lines 148-198). Before, the enumerator offered nothing at PP 1: `fit` with PP 1
pinned had no fix that kept it, and tune's list missed PP 1 (see tests/test_tune_pipeline_options.py)."""

from __future__ import annotations

from typing import Any

from primus.job import job_from_mapping
from primus.solver.options import pipeline_candidates
from tests.conftest import as_json

# Llama 3.1 8B (32 layers) on 2 nodes of 8 H100, global batch 32
L8: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192,
                      "global_batch_size": 32, "precision": "bf16"}
FIRST_LAST_3 = {"decoder_first_pipeline_num_layers": 3, "decoder_last_pipeline_num_layers": 3}
UNSET_FIRST_LAST = {"pipeline.decoder_first_pipeline_num_layers": None,
                    "pipeline.decoder_last_pipeline_num_layers": None}
# Llama 3.1 70B (80 layers) on 16 MI300X, TP8 PP1 pinned with a two-stage layout string
L70_PP1_LAYOUT: dict[str, Any] = {
    "model": "llama3.1-70b", "hardware": "mi300x", "nodes": 2, "seq_len": 8192, "global_batch_size": 128,
    "parallel": {"tp": 8, "pp": 1, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "full",
                 "sharding": "dist_opt"},
    "pipeline": {"layout": "Et*40|t*40L"}}


def _job(pipeline: dict[str, Any]):  # type: ignore[no-untyped-def]
    return job_from_mapping({**L8, "pipeline": pipeline}, "job.yaml")


def test_first_last_stage_sizes_are_unset_at_pp_1() -> None:
    assert pipeline_candidates(_job(FIRST_LAST_3), 1, [1]) == [UNSET_FIRST_LAST]


def test_a_two_stage_layout_string_is_unset_at_pp_1() -> None:
    assert pipeline_candidates(_job({"layout": "Et*16|t*16L"}), 1, [1]) == [{"pipeline.layout": None}]


def test_accounting_splits_one_stage_already_so_nothing_is_offered_at_pp_1() -> None:
    accounted = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    assert pipeline_candidates(_job(accounted), 1, [1]) == []
    assert pipeline_candidates(_job({}), 1, [1]) == []


def test_fit_at_pinned_pp_1_first_offers_the_stage_sizes_unset_keeping_every_pin(run_cli, write_job) -> None:
    code, out, _ = run_cli("fit", write_job({**L8, "parallel": {"tp": 1, "pp": 1},
                                             "pipeline": FIRST_LAST_3}), "--format", "json")
    doc = as_json(out)
    assert code == 1 and "pipeline-split" in doc["violated_rules"]
    first = doc["alternatives"][0]
    assert first["options"] == UNSET_FIRST_LAST and first["pins_changed"] == []
    assert first["parallel"]["pp"] == 1 and first["parallel"]["dp"] == 16
    assert round(first["tokens_per_s_per_gpu"]) == 9955  # the number tune lists and --allow pipeline reaches


def _changed_cell(text: str, row: int) -> str:
    """The table's "changed" cell of fix `row`, its wrapped lines joined."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"│ {row} │"))
    cell = []
    for line in lines[start:]:
        cells = line.split("│")
        if len(cells) < 4 or (line is not lines[start] and cells[1].strip()):
            break
        cell.append(cells[3].strip())
    return " ".join(cell)


def test_fit_says_which_options_the_pp_1_fix_unsets(run_cli, write_job) -> None:
    _, text, _ = run_cli("fit", write_job({**L8, "parallel": {"tp": 1, "pp": 1}, "pipeline": FIRST_LAST_3}))
    assert _changed_cell(text, 1) == ("pipeline.decoder_first_pipeline_num_layers unset, "
                                      "pipeline.decoder_last_pipeline_num_layers unset")


def test_fit_at_pinned_pp_1_unsets_a_two_stage_layout(run_cli, write_job) -> None:
    code, out, _ = run_cli("fit", write_job(L70_PP1_LAYOUT), "--format", "json")
    doc = as_json(out)
    assert code == 1 and "pipeline-split" in doc["violated_rules"]
    first = doc["alternatives"][0]
    assert first["options"] == {"pipeline.layout": None} and first["pins_changed"] == []
    assert round(first["tokens_per_s_per_gpu"]) == 763


def test_the_pp_1_fix_with_its_options_unset_in_the_job_file_fits_as_fit_said(run_cli, write_job) -> None:
    _, out, _ = run_cli("fit", write_job(L70_PP1_LAYOUT), "--format", "json")
    first = as_json(out)["alternatives"][0]
    code, out, _ = run_cli("fit", write_job({**L70_PP1_LAYOUT, "pipeline": {}}, "unset.yaml"), "--format", "json")
    assert code == 0 and as_json(out)["peak_bytes"] == first["peak_bytes"]
