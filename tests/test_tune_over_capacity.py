"""A best layout over the usable capacity (the built-in memory rule removed and replaced by a looser one)
is said to be over it, in tune's output and in the report, never "fits" (review 49, M5)."""

from __future__ import annotations

from pathlib import Path


def test_a_best_over_the_usable_capacity_is_said_to_be_over_it(run_cli, write_job, tmp_path: Path):
    # Llama 3.1 8B on 8 H100-80GB: with `peak_bytes <= hbm_bytes` in place of the memory rule the best
    # layout peaks at 77.15 GiB, 3.66 GiB over the 73.50 GiB the reserves leave
    job = write_job({"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192,
                     "global_batch_size": 64})
    run = tmp_path / "run"
    code, out, _ = run_cli("tune", job, "--llm", "none", "--without", "memory", "--rule", "peak_bytes <= hbm_bytes",
                           "--out", str(run))
    assert code == 0
    assert "peak 77.15 GiB (OVER the usable capacity: the run's rules allow it" in out
    assert "fits: proved by the ledger" not in out
    md = (run / "report.md").read_text()
    assert "3.66 GiB OVER the usable capacity of 73.50 GiB" in md and "under the usable capacity" not in md
