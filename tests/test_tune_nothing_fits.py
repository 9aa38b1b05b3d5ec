"""When no layout is legal, `tune` says why in `primus fit`'s words (review 49, M8), and exits 1."""

from __future__ import annotations


def test_tune_of_a_job_nothing_fits_names_the_core_and_the_nearest_size(run_cli, write_job, tmp_path):
    # Llama 3.1 405B on 2 H100-80GB: 3,054.56 GiB at the closest layout; `primus fit` gives the core
    # {memory} and 96 GPUs (12 nodes) as the smallest size at which a layout fits
    job = write_job({"model": "llama3.1-405b", "hardware": "h100-80gb", "gpus": 2, "seq_len": 8192,
                     "global_batch_size": 64})
    code, out, _ = run_cli("tune", job, "--llm", "none", "--out", str(tmp_path / "run"))
    assert code == 1 and "no legal layout" in out
    assert "why: minimal conflicting rules and pins: memory" in out
    assert "nearest size at which a layout fits: 96 GPUs (12 nodes)" in out


def test_the_run_of_a_job_nothing_fits_verifies(run_cli, write_job, tmp_path):
    # `Tuner.run` records mode 'empty' when no layout is legal; `audit verify` recomputes 0 legal layouts and must
    # agree with it (it used to call the unedited run's 'empty' a forged 'exhaustive')
    job = write_job({"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                     "global_batch_size": 16})
    out = tmp_path / "run"
    code, _, _ = run_cli("tune", job, "--llm", "none", "--rule", "tp > 8", "--out", str(out), "--workers", "1")
    assert code == 1
    code, text, err = run_cli("audit", "verify", str(out), "--workers", "1")
    assert code == 0, text + err
