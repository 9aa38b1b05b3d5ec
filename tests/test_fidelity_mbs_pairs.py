"""Rows that differ only in MBS split a step into a fixed part and a part per token (primus.fidelity.mbs_pairs)."""

from __future__ import annotations

import pytest

from primus.fidelity.mbs_pairs import mbs_pairs
from primus.fidelity.runs import bundled_amd_runs_path, read_runs
from primus.fidelity.validate import RowResult, validate


def _row(run_id: str, mbs: int, step_measured: float, step_projected: float, *, tokens: float,
         assumed: tuple[str, ...] = (), microbatches: int = 8) -> RowResult:
    """A row whose GPU processes `tokens` per step, measured and projected at the given step times."""
    return RowResult(
        run_id=run_id, source="src", accelerator="mi355x", precision="bf16", moe=True, model="m", num_gpus=8,
        measured=tokens / step_measured, predicted=tokens / step_projected, step_time_s=step_projected,
        predicted_peak_gib=1.0, measured_peak_gib=None, fits=True,
        layout={"tp": 1, "pp": 1, "dp": 8, "ep": 8, "mbs": mbs}, stack="primus@26.1", assumed=assumed,
        num_microbatches=microbatches)


def test_a_pair_gives_both_lines_through_its_two_points() -> None:
    # measured: 2 s + 1e-5 s per token; projected: 0.5 s + 1.1e-5 s per token
    a = _row("a", 12, 2.0 + 1e-5 * 400_000, 0.5 + 1.1e-5 * 400_000, tokens=400_000)
    b = _row("b", 14, 2.0 + 1e-5 * 500_000, 0.5 + 1.1e-5 * 500_000, tokens=500_000)
    (line,) = mbs_pairs([b, a])
    assert line.run_ids == ("a", "b") and line.mbs == (12, 14)
    assert line.measured_fixed_s == pytest.approx(2.0)
    assert line.measured_slope_s_per_token == pytest.approx(1e-5)
    assert line.projected_fixed_s == pytest.approx(0.5)
    assert line.projected_slope_s_per_token == pytest.approx(1.1e-5)


def test_rows_whose_settings_differ_beyond_mbs_do_not_pair() -> None:
    a = _row("a", 12, 6.0, 5.0, tokens=400_000)
    b = _row("b", 14, 7.0, 6.0, tokens=500_000, assumed=("Primus options not modelled: launch_options",))
    c = _row("c", 14, 7.0, 6.0, tokens=500_000, microbatches=4)
    assert mbs_pairs([a, b, c]) == []


def test_two_rows_at_one_mbs_make_the_group_ambiguous() -> None:
    a = _row("a", 12, 6.0, 5.0, tokens=400_000)
    a2 = _row("a2", 12, 6.1, 5.0, tokens=400_000)
    b = _row("b", 14, 7.0, 6.0, tokens=500_000)
    assert mbs_pairs([a, a2, b]) == []


def test_amd_deepseek_v2_lite_pair_measures_what_the_blog_published() -> None:
    """ROCm blog "MoE Training Best Practices on AMD GPUs" (Figure 6): every option on, 39,981.6 tokens/s/GPU at
    MBS 12 (GBS 768) and 40,805.5 at MBS 14 (GBS 896), seq 4096 on 8 MI355X: 393,216 and 458,752 tokens per GPU
    per step in 9.835 and 11.243 s, i.e. 21.48 us per token on a line through 1.39 s."""
    report = validate(read_runs(bundled_amd_runs_path()), check_fit=False)
    (line,) = mbs_pairs(report.rows)
    assert line.run_ids == ("moe1_mi355x_dsv2lite_mbs12_launchopt", "moe1_mi355x_dsv2lite_mbs14_all")
    step12, step14 = 393_216 / 39_981.6, 458_752 / 40_805.5
    slope = (step14 - step12) / (458_752 - 393_216)
    assert line.measured_slope_s_per_token == pytest.approx(slope, rel=1e-9)
    assert line.measured_fixed_s == pytest.approx(step12 - slope * 393_216, rel=1e-9)
    assert line.measured_slope_s_per_token == pytest.approx(21.48e-6, abs=0.01e-6)


def test_the_fixed_part_says_how_far_one_percent_of_noise_moves_it() -> None:
    # t_a = 400k, t_b = 500k tokens; steps 6 and 7 s: 1% of the larger-MBS step (0.07 s) times t_a / (t_b − t_a) = 4
    a = _row("a", 12, 6.0, 5.0, tokens=400_000)
    b = _row("b", 14, 7.0, 6.0, tokens=500_000)
    (line,) = mbs_pairs([a, b])
    assert line.fixed_s_per_pct == pytest.approx(max(0.06 * 5, 0.07 * 4))
