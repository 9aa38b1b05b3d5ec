"""`primus measure` on CPU and a measured profile in `primus project`: the mechanics, not the speed.

A small Hugging Face config at seq 512 is measured in full (no budget: no test may depend on the machine's
speed); a second run reuses every shape; a budget that is spent before anything runs leaves the rest
modelled and says so; the projection marks the terms the
profile answered as measured; a profile from another device is refused (exit 2) unless allowed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from primus.cli.measure_cmd import MEASURE_HINT, measure_cmd  # noqa: E402
from primus.cli.project_cmd import project_cmd  # noqa: E402
from primus.job import load_job  # noqa: E402
from primus.measure.campaign import MeasureOptions, detect_hardware, run_measure  # noqa: E402
from primus.measure.measured_profile import load_measured_profile, resolve_profile_option  # noqa: E402
from primus.memory.evaluate import pinned_layout  # noqa: E402
from primus.projection import project  # noqa: E402

pytestmark = pytest.mark.measure
REPO = Path(__file__).resolve().parent.parent

SMALL_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
            "intermediate_size": 704, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "tie_word_embeddings": False}


def write_job(folder: Path, gpus: int = 1, hardware: str = "cpu", hidden: int = 256, **parallel: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "small.json").write_text(json.dumps({**SMALL_HF, "hidden_size": hidden}))
    pins = {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "recompute": "none", "sharding": "none", **parallel}
    job = {"model": "small.json", "hardware": hardware, "gpus": gpus, "seq_len": 512, "global_batch_size": 2 * gpus,
           "parallel": pins}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, Any]]:
    """One `primus measure` run shared by the tests below: (job, profile, JSON output)."""
    folder = tmp_path_factory.mktemp("measure")
    job = write_job(folder)
    out = str(folder / "profile.json")
    result = CliRunner().invoke(measure_cmd, [job, "--device", "cpu", "--out", out, "--no-budget", "--format", "json"])
    assert result.exit_code == 0, result.output
    return job, out, json.loads(result.stdout)


def test_measure_without_a_budget_measures_every_call(measured: tuple[str, str, dict[str, Any]]) -> None:
    _, out, doc = measured
    run = doc["run"]
    assert run["complete"] and run["measured"] > 10 and not run["left_modelled"]
    assert run["budget_s"] is None
    prof = load_measured_profile(out)
    assert prof.device.kind == "cpu" and prof.device.threads == 1 and prof.device.dtype == "float32"
    assert prof.device.torch == torch.__version__ and prof.created
    samples = [r for e in prof.entries.values() for r in e.recipes if r.get("samples")]
    assert samples and all(len(r["samples"]) >= 3 and r["median_s"] > 0 for r in samples)
    assert {r["op"] for r in samples} >= {"gemm", "attention", "norm", "swiglu", "cross_entropy", "adam"}
    assert doc["memory"] and doc["memory"][0]["kind"] == "dense"  # the trace-memory path on CPU


def test_a_second_run_measures_nothing_new(measured: tuple[str, str, dict[str, Any]]) -> None:
    job, out, first = measured
    result = CliRunner().invoke(measure_cmd, [job, "--device", "cpu", "--out", out, "--budget-s", "30",
                                              "--format", "json", "--no-memory-check"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run"]
    assert run["measured"] == 0 and run["reused"] == first["run"]["measured"] + first["run"]["exact_zero"]
    assert len(load_measured_profile(out).runs) == 2


def test_projection_marks_measured_terms(measured: tuple[str, str, dict[str, Any]]) -> None:
    job_path, out, doc = measured
    job = load_job(job_path)
    calib, timer, prof = resolve_profile_option(job.cluster, out)
    p = project(job, pinned_layout(job), calib, timer=timer)
    for term in ("gemm", "attention", "memory_bound", "optimizer"):
        assert p.sources[term] == "measured", term
    assert p.sources["bubble"] == "modelled"
    assert doc["projection"]["measured_step_s"] == pytest.approx(p.step_time_s)
    assert prof is not None and "calls it does not hold are modelled" in prof.describe()


def test_a_spent_budget_leaves_the_rest_modelled(tmp_path: Path) -> None:
    job = load_job(write_job(tmp_path, hidden=512))
    res = run_measure(job, pinned_layout(job), tmp_path / "p.json",
                      MeasureOptions(device="cpu", budget_s=0.0, memory_check=False))
    assert not res.complete and res.measured == 0 and res.left["budget spent: modelled"] > 0
    run = load_measured_profile(tmp_path / "p.json").runs[-1]
    assert run["complete"] is False and run["left_modelled"]["budget spent: modelled"] > 0


def test_a_profile_of_another_device_is_not_extended(tmp_path: Path,
                                                     measured: tuple[str, str, dict[str, Any]]) -> None:
    job, out, _ = measured
    result = CliRunner().invoke(measure_cmd, [job, "--device", "cpu", "--dtype", "bf16", "--out", out,
                                              "--budget-s", "5"])
    assert result.exit_code == 2 and "write to another --out" in result.output


def test_without_torch_measure_exits_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    result = CliRunner().invoke(measure_cmd, [write_job(tmp_path)])
    assert result.exit_code == 2 and result.output.strip() == MEASURE_HINT


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_without_a_gpu_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(measure_cmd, [write_job(tmp_path), "--device", "cuda", "--out",
                                              str(tmp_path / "p.json")])
    assert result.exit_code == 2 and "torch sees no GPU" in result.output


def test_device_names_map_to_hardware_entries() -> None:
    assert detect_hardware("NVIDIA H200") == "h200"
    assert detect_hardware("NVIDIA H100 80GB HBM3") == "h100-80gb"
    assert detect_hardware("AMD Instinct MI300X") == "mi300x"
    assert detect_hardware("Some Accelerator 9000") is None


def test_collectives_and_colocated_kernels_run_across_two_gloo_processes(tmp_path: Path) -> None:
    """Data parallel over 2 processes: the gradient all-reduce is measured, so dp_grad_reduce is too;
    with colocate, every kernel ran in both processes at once and the profile says so."""
    job = load_job(write_job(tmp_path, gpus=2))
    res = run_measure(job, pinned_layout(job), tmp_path / "p.json",
                      MeasureOptions(device="cpu", procs=2, budget_s=None, memory_check=False, colocate=True,
                                     target_s=0.01, bound_bytes=16 * 2**20))
    assert res.complete and not res.left, (res.left, res.notes)
    prof = load_measured_profile(tmp_path / "p.json")
    assert prof.device.colocated == 2 and "2 processes at once" in prof.describe()
    coll = [e for k, e in prof.entries.items() if k.startswith("collective kind='all_reduce'")]
    assert coll and all(e.seconds > 0 and len(e.recipes[0]["samples"]) >= 3 for e in coll)
    gemms = [e for k, e in prof.entries.items() if k.startswith("gemm")]
    assert gemms and all(e.seconds > 0 and len(e.recipes[0]["samples"]) >= 3 for e in gemms)
    calib, timer, _ = resolve_profile_option(job.cluster, str(tmp_path / "p.json"))
    p = project(job, pinned_layout(job), calib, timer=timer)
    assert p.sources["dp_grad_reduce"] == "measured"


# ---- `primus project --profile` ---------------------------------------------------------------------

def test_project_cli_uses_a_measured_profile_and_refuses_another_device(
        tmp_path: Path, measured: tuple[str, str, dict[str, Any]]) -> None:
    job, out, _ = measured
    ok = CliRunner().invoke(project_cmd, [job, "--profile", out, "--format", "json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.stdout)
    assert doc["sources"]["gemm"] == "measured" and doc["measured_profile"]["device"]["kind"] == "cpu"
    table = CliRunner().invoke(project_cmd, [job, "--profile", out])
    assert table.exit_code == 0 and "measured" in table.output and "measured profile" in table.output
    other = write_job(tmp_path / "h100", gpus=8, hardware="h100-80gb")
    refused = CliRunner().invoke(project_cmd, [other, "--profile", out])
    assert refused.exit_code == 2 and "--allow-device-mismatch" in refused.output
    allowed = CliRunner().invoke(project_cmd, [other, "--profile", out, "--allow-device-mismatch"])
    assert allowed.exit_code == 0, allowed.output


def test_measure_is_registered_in_the_cli() -> None:
    result = subprocess.run([sys.executable, "-m", "primus.cli.main", "measure", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "--budget-s" in result.stdout


def test_results_written_before_a_crash_at_teardown_are_kept() -> None:
    """Rank 0 writes after the workers' last barrier; an abort while the processes tear down (seen
    intermittently with gloo under load) must not throw the measurements away."""
    from primus.measure.collectives import spawn_workers

    got, err = spawn_workers("tests.helpers.aborting_worker", {"value": 42}, 2, "cpu", float("inf"))
    assert err is None and got == {"measured": 42}
