"""Unstated layout axes (issue 19): where a published run omits an axis and no recipe of its stack decides it,
`validate` projects every legal completion and reports the range beside the point, which follows one named
rule (the stack's default).

Row: Korthikanti et al. 2022 (arXiv:2205.05198) Table: the 1T model on 3,072 A100s, TP 8 x PP 64, 128 layers,
full recompute; the paper does not state whether the pipeline was interleaved (VP), so VP 1 (Megatron-LM's
default) and VP 2 (two layers per stage, one per chunk) are both legal."""

from __future__ import annotations

import pytest

from primus.fidelity import bundled_runs_path, read_runs, validate
from primus.fidelity.completions import POINT_RULE
from primus.fidelity.jobs import build, completion
from primus.memory.evaluate import pinned_layout
from primus.projection import Projector, load_profile
from tests.helpers.runs_csv import row_of, write_rows

KORT_1T = "Korthikanti22-A100-1T-fullrecompute"


def _rows(*ids: str):  # type: ignore[no-untyped-def]
    return [r for r in read_runs(bundled_runs_path()) if r.run_id in ids]


def test_an_unstated_vp_is_projected_over_its_legal_values_and_the_point_names_its_rule() -> None:
    (res,) = validate(_rows(KORT_1T)).rows
    assert res.completions is not None and res.completions.axes == {"vp": (1, 2)}
    lo, hi = res.completions.tokens
    assert lo <= res.predicted <= hi and lo < hi
    assert res.layout["vp"] == 1  # the stack default: Megatron-LM without --num-layers-per-virtual-pipeline-stage
    assert any("vp unstated" in a and f"rule: {POINT_RULE}" in a for a in res.assumed)
    doc = res.to_json()
    assert doc["unstated_axes"] == {"vp": [1, 2]} and doc["point_rule"] == POINT_RULE
    assert doc["range_error_pct"] == pytest.approx([100 * (t / res.measured - 1) for t in (lo, hi)])


def test_the_range_ends_are_the_projections_of_the_completions() -> None:
    (row,) = _rows(KORT_1T)
    (res,) = validate([row]).rows
    jobs = build(row)
    profile = load_profile(jobs.project.cluster).for_stack(jobs.rule.kernels)
    each = []
    for vp in (1, 2):
        job = completion(row, jobs, {"vp": vp})
        assert job.spec.parallel.vp == vp
        each.append(Projector(job, profile).project(pinned_layout(job), "auto").tokens_per_s_per_gpu)
    assert res.completions is not None and res.completions.tokens == (min(each), max(each))


def test_a_stated_axis_gets_no_range() -> None:
    # the 175B run states its layout in full (TP 8 x PP 8 x VP 3): nothing to complete
    (res,) = validate(_rows("Korthikanti22-A100-175B-fullrecompute")).rows
    assert res.completions is None and "range_error_pct" not in res.to_json()


def test_without_the_fit_check_no_range_is_computed() -> None:
    (res,) = validate(_rows(KORT_1T), check_fit=False).rows
    assert res.completions is None


def test_the_table_shows_the_range_beside_the_point(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from primus.cli.fidelity_cmds import validate_cmd

    fields, row = row_of(bundled_runs_path(), KORT_1T)
    path = write_rows(tmp_path / "runs.csv", fields, [row])
    out = CliRunner().invoke(validate_cmd, [str(path)], env={"COLUMNS": "300"}).output
    assert "-4.8%..-0.3%" in out and "(vp)" in out  # (the cell may wrap)


def test_docs_accuracy_lists_the_rows_with_a_range() -> None:
    from primus.fidelity.accuracy_sections import unstated_section

    lines = unstated_section(validate(_rows(KORT_1T, "BLOOM176B-full")))
    text, prose = "\n".join(lines), " ".join(lines)
    assert "2 rows leave VP" in prose and "1 of them have a single legal completion" in prose  # BLOOM: VP 1 only
    assert f"| {KORT_1T} | vp {{1, 2}} | -4.8 | -4.8 to -0.3 |" in text
