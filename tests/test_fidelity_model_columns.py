"""Specification of `validate` when a row names a catalog model: its architecture columns must agree.

A runs file names the model (`model`) and states its architecture (`layers`, `hidden`, `ffn`, `heads`,
`kv_heads`, `vocab`, `experts`, `topk`). When the two disagree, one of them is wrong and projecting the
name would score a run of another model, so the row is left unprojected with every contradicting
column and the catalog's value. A vocabulary that differs only as Megatron pads it is the same
embedding table and is noted, not refused. Rows are the shipped development set's (runs_dev.csv).
"""

from __future__ import annotations

from pathlib import Path

from primus.fidelity import bundled_runs_path, read_runs, validate
from primus.fidelity.jobs import model_ref
from tests.helpers.runs_csv import row_of, write_rows

RUNS = bundled_runs_path()
# Megatron-Bridge 26.06 Llama 3.1 405B on GB300; arch: Llama 3 paper Table 3 (126 layers, hidden 16,384)
LLAMA_405B_ROW = "MB26.06-DGX-GB300-Llama3.1-405B-NVFP4"


def _runs(tmp_path: Path, **over: str) -> Path:
    fields, row = row_of(RUNS, LLAMA_405B_ROW)
    return write_rows(tmp_path / "runs.csv", fields, [{**row, **over}])


def test_a_llama_405b_row_named_gpt3_175b_is_left_unprojected(tmp_path: Path) -> None:
    path = _runs(tmp_path, model="gpt3-175b")
    report = validate(read_runs(path), str(path), check_fit=False)
    assert not report.rows and [u.run_id for u in report.unprojected] == [LLAMA_405B_ROW]


def test_the_reason_names_each_contradicting_column_with_the_catalog_value(tmp_path: Path) -> None:
    # GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12,288, 96 heads; 4 × 12,288 FFN
    path = _runs(tmp_path, model="gpt3-175b")
    reason = validate(read_runs(path), str(path), check_fit=False).unprojected[0].reason
    assert reason == ("the architecture columns contradict catalog model 'gpt3-175b': layers 126 (96), "
                      "hidden 16,384 (12,288), ffn 53,248 (49,152), heads 128 (96), kv_heads 8 (96), "
                      "vocab 128,256 (51,200) (catalog values in brackets); fix the model name or the columns")


def test_a_row_that_agrees_with_its_catalog_model_is_projected_without_a_note(tmp_path: Path) -> None:
    path = _runs(tmp_path)
    assert model_ref(read_runs(path)[0]) == ("llama3.1-405b", [])


def test_a_vocabulary_padded_as_megatron_pads_it_is_noted_not_refused() -> None:
    # MT-NLG 530B (arXiv:2201.11990) states GPT-2's vocabulary (50,272 in the row); at TP 8 Megatron pads it
    # to a multiple of 128 × 8 = 1,024, which is the catalog gpt-530b's 51,200 (Korthikanti et al. Table 3)
    row = next(r for r in read_runs(RUNS) if r.run_id == "MTNLG-2240")
    ref, notes = model_ref(row)
    assert ref == "gpt-530b"
    assert notes == ["vocab 50,272 is the catalog's 51,200 as Megatron pads it at TP 8"]


def test_a_proxy_rows_layer_count_is_not_a_contradiction() -> None:
    # DGX Cloud 25.04 Llama 3.1 405B FP8 on 32 GPUs runs an 8-layer proxy (flag proxy)
    row = next(r for r in read_runs(RUNS) if r.run_id == "DGXC25.04.01-H100-Llama3.1-405B-FP8-32")
    assert model_ref(row) == ({"base": "llama3.1-405b", "num_layers": 8}, ["reduced-layer proxy: 8 layers"])
