"""`primus validate --format csv`: a data document on stdout, one line per projected row of the runs file
(here AMD's 11 complete published rows, primus/fidelity/data/amd_runs_dev.csv), nothing else."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from primus.cli.fidelity_cmds import VALIDATE_CSV_COLUMNS

AMD_RUNS = "primus/fidelity/data/amd_runs_dev.csv"


def test_validate_writes_one_csv_line_per_projected_row(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("validate", AMD_RUNS, "--no-fit-check", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 11
    assert tuple(rows[0]) == VALIDATE_CSV_COLUMNS
    llama = next(r for r in rows if r["run_id"] == "amdperf_mi325x_llama31_8b_fp8_8n")
    # AMD Performance Results (ROCm "Primus Projection" blog): 16,186 tokens/s/GPU measured
    assert float(llama["measured_tokens_per_s_per_gpu"]) == 16186.0
    assert abs(float(llama["error_pct"]) - 100 * (float(llama["predicted_tokens_per_s_per_gpu"]) / 16186.0 - 1)) < 1e-9


def test_text_from_the_runs_file_reaches_the_csv_escaped(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # an ESC in a run id or source would restyle (or clear) the reader's terminal; json and the table escape it
    text = Path(AMD_RUNS).read_text(encoding="utf-8").replace("amdperf_mi325x_llama31_8b_fp8_8n",
                                                           "amdperf_mi325x_llama31_8b_fp8_8n\x1b[2J")
    path = tmp_path / "runs.csv"
    path.write_text(text, encoding="utf-8")
    code, out, _ = run_cli("validate", str(path), "--no-fit-check", "--format", "csv")
    assert code == 0 and "\x1b" not in out and "amdperf_mi325x_llama31_8b_fp8_8n\\x1b[2J" in out
