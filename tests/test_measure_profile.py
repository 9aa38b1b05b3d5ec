"""The measured profile's format, the plan of what to measure, device identity and H200 → H100 rescaling.
None of this needs torch: a profile is read (and a plan built) on machines without the measure extra."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.catalog.hardware import resolve_hardware
from primus.errors import InputError
from primus.job import job_from_mapping
from primus.measure.measured_profile import (
    DeviceInfo,
    Entry,
    MeasuredProfile,
    call_from_dict,
    call_key,
    call_to_dict,
    check_device,
    is_measured_profile,
    load_measured_profile,
    rescale,
    resolve_profile_option,
)
from primus.measure.plan import build_plan
from primus.memory.evaluate import pinned_layout
from primus.projection import AnalyticTimer, RecordingTimer, load_profile, project
from primus.projection.ops import Attention
from primus.projection.placement import GroupShape
from primus.projection.profile import profile_path
from primus.projection.timer import AttentionCall, CollectiveCall, GemmCall, MemoryCall

TINY_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 704, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
           "tie_word_embeddings": False}

CALLS = [
    GemmCall("bf16", 512, 1408, 512, 1, 2, 8),
    GemmCall("mxfp8", 64, 128, 256, 8, 1.03125, 2),
    AttentionCall(Attention("core_attention", 8, 512, 256.5, 64, 64), True),
    MemoryCall(1572864),
    MemoryCall(0.0),
    CollectiveCall("all_reduce", 84953088.0, GroupShape(2, 1)),
    CollectiveCall("dispatch", 1e6, GroupShape(64, 8), fanout=8),
]


def cpu_device(hardware: str = "cpu") -> DeviceInfo:
    return DeviceInfo("cpu", "test CPU", hardware, "2.x", "float32", 1, 1)


def tiny_job(tmp_path: Path, hardware: str = "cpu", gpus: int = 2, **extra: Any) -> Any:
    (tmp_path / "tiny.json").write_text(json.dumps(TINY_HF))
    pins = {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "recompute": "none", "sharding": "none"}
    data = {"model": "tiny.json", "hardware": hardware, "gpus": gpus, "seq_len": 512, "global_batch_size": 4 * gpus,
            "parallel": pins, **extra}
    return job_from_mapping(data, str(tmp_path / "job.yaml"), tmp_path)


# ---- format ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", CALLS)
def test_calls_survive_a_json_round_trip_exactly(call: Any) -> None:
    back = call_from_dict(json.loads(json.dumps(call_to_dict(call))), "test")
    assert back == call and hash(back) == hash(call)  # the MeasuredTimer table looks calls up by equality


def test_keys_name_shape_and_dtype() -> None:
    key = call_key(CALLS[0], "bfloat16")
    assert key.startswith("gemm ") and "m=512" in key and key.endswith("dtype=bfloat16")
    assert call_key(CALLS[0], "float32") != key
    assert call_key(MemoryCall(1024), "x") == call_key(MemoryCall(1024.0), "x")  # equal calls, one key


def test_profile_saves_loads_and_answers_its_calls(tmp_path: Path) -> None:
    prof = MeasuredProfile(cpu_device(), "2026-01-01")
    for i, call in enumerate(CALLS):
        prof.add(Entry(call, 1e-3 * (i + 1), ({"op": "test", "samples": [1e-3]},), "now"))
    path = tmp_path / "p.json"
    prof.save(path)
    assert is_measured_profile(path) and not is_measured_profile(profile_path("cpu"))
    back = load_measured_profile(path)
    assert back.device == prof.device and back.table() == prof.table()
    cluster = resolve_hardware("cpu", "test")
    timer = back.timer(cluster, load_profile(cluster))
    assert timer.gemm(CALLS[0]) == (1e-3, True)
    assert timer.memory(MemoryCall(123.0)).measured is False  # not held: modelled


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(version=9), "version"),
    (lambda d: d["device"].update(procs=0), "device.procs"),
    (lambda d: next(iter(d["entries"].values())).update(seconds=-1), "seconds"),
    (lambda d: next(iter(d["entries"].values()))["call"].update(m="x"), "m"),
])
def test_malformed_profiles_name_the_field(tmp_path: Path, mutate: Any, field: str) -> None:
    prof = MeasuredProfile(cpu_device(), "2026-01-01")
    prof.add(Entry(CALLS[0], 1e-3, (), "now"))
    data = prof.to_json()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_measured_profile(path)
    assert field in err.value.line()


def test_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a JSON measured profile"):
        load_measured_profile(path)


# ---- device identity and rescaling ----------------------------------------------------------------

def test_a_profile_from_another_device_is_refused_unless_allowed(tmp_path: Path) -> None:
    prof = MeasuredProfile(cpu_device(), "2026-01-01")
    h100 = resolve_hardware("h100-80gb", "test")
    with pytest.raises(InputError, match="--allow-device-mismatch"):
        check_device(prof, h100, False, "p.json")
    check_device(prof, h100, True, "p.json")
    check_device(prof, resolve_hardware("cpu", "test"), False, "p.json")
    path = tmp_path / "p.json"
    prof.save(path)
    with pytest.raises(InputError, match="measured on test CPU"):
        resolve_profile_option(h100, str(path))
    calib, timer, measured = resolve_profile_option(h100, str(path), allow_mismatch=True)
    assert timer is not None and measured is not None and calib.hardware == "h100-80gb"


def test_a_calibration_profile_yaml_is_still_a_calibration_profile() -> None:
    h100 = resolve_hardware("h100-80gb", "test")
    calib, timer, measured = resolve_profile_option(h100, str(profile_path("h100-80gb")))
    assert timer is None and measured is None and calib.hardware == "h100-80gb"


def test_h200_to_h100_keeps_compute_bound_and_scales_hbm_bound_calls() -> None:
    h200, h100 = resolve_hardware("h200", "t"), resolve_hardware("h100-80gb", "t")
    prof = MeasuredProfile(DeviceInfo("cuda", "NVIDIA H200", "h200", "2.x", "bfloat16", None, 1), "2026")
    big = GemmCall("bf16", 8192, 8192, 8192, 1, 2, 2)
    mem = MemoryCall(1e9)
    prof.add(Entry(big, 1.0, ({"op": "gemm"},), "t"))
    prof.add(Entry(mem, 1.0, ({"op": "copy"},), "t"))
    moved = rescale(prof, h200, h100, load_profile(h200))
    assert moved.device.hardware == "h100-80gb"
    table = moved.table()
    assert table[big] == pytest.approx(1.0)
    assert table[mem] == pytest.approx(4800 / 3350)
    assert moved.entries[call_key(mem, "bfloat16")].recipes[0]["scaled_from"]["to"] == "h100-80gb"


# ---- the plan -------------------------------------------------------------------------------------

def test_the_plan_covers_every_call_the_projection_makes(tmp_path: Path) -> None:
    job = tiny_job(tmp_path)
    layout = pinned_layout(job)
    plan = build_plan(job, layout, procs=2, device_kind="cpu")
    calib = load_profile(job.cluster)
    rec = RecordingTimer(AnalyticTimer(job.cluster, calib))
    project(job, layout, calib, timer=rec)
    assert {i.call for i in plan.items} == rec.calls
    ops = {r.op for i in plan.items for r, _ in i.recipes}
    assert {"gemm", "attention", "norm", "swiglu", "rope", "cross_entropy", "embedding", "adam", "collective",
            "zero"} <= ops
    assert all(i.skip is None for i in plan.items)  # 2 local processes on the cpu entry: all measurable
    shared = [i for i in plan.items if len(i.recipes) > 1]  # one byte count, several kernels: averaged
    assert shared and all(sum(n for _, n in i.recipes) > 1 for i in shared)


def test_collectives_beyond_the_local_processes_or_the_node_stay_modelled(tmp_path: Path) -> None:
    job = tiny_job(tmp_path)
    plan = build_plan(job, pinned_layout(job), procs=1, device_kind="cpu")
    skips = {i.skip for i in plan.items if i.is_collective and not i.trivial}
    assert skips == {"group of 2 needs 2 local processes (have 1): modelled"}
    h100 = tiny_job(tmp_path, hardware="h100-80gb", gpus=16)
    plan = build_plan(h100, pinned_layout(h100), procs=8, device_kind="cuda")
    reasons = {i.skip for i in plan.items if i.is_collective and i.skip}
    assert any("group of 16" in r or "inter-node" in r for r in reasons)


def test_formats_torch_cannot_run_stay_modelled(tmp_path: Path) -> None:
    fp8 = tiny_job(tmp_path, hardware="h100-80gb", gpus=8, precision="fp8", fp8_recipe="blockwise")
    plan = build_plan(fp8, pinned_layout(fp8), procs=1, device_kind="cuda")
    gemm_skips = {i.skip for i in plan.items if i.recipes[0][0].op == "gemm" and i.skip}
    assert gemm_skips == {"torch has no fp8_block GEMM kernel to time: modelled"}


def test_the_job_file_of_the_docs_is_valid_yaml(tmp_path: Path) -> None:
    """The example job in docs/measurement.md loads (with its HF config beside it)."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "measurement.md").read_text()
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "tiny-llama.json").write_text(json.dumps(TINY_HF))
    data = yaml.safe_load(block)
    job = job_from_mapping(data, "doc", tmp_path)
    assert pinned_layout(job).world == job.num_gpus


def test_measure_imports_without_ortools_or_torch() -> None:
    """`primus measure` runs on a bare GPU box: its CLI module, the profile and the plan import with
    ortools missing, and none of them imports torch at module level."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'ortools':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import primus.cli.measure_cmd, primus.measure.measured_profile, primus.measure.plan\n"
        "import primus.measure.downscale\n"
        "assert 'torch' not in sys.modules, 'torch imported at module level'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_beside_a_measured_profile_the_calibration_profile_says_what_it_still_times(tmp_path: Path) -> None:
    """Review 48 low 12: the assumption read only "profile cpu (spec-derived, not fitted)" when every
    kernel the measured profile holds was timed from it."""
    from primus import api

    path = tmp_path / "p.json"
    prof = MeasuredProfile(cpu_device(), "2026-01-01")
    prof.add(Entry(CALLS[0], 1e-3, (), "now"))
    prof.save(path)
    p = api.project(tiny_job(tmp_path), profile=path).projection
    assert p is not None
    line = next(a for a in p.assumptions if a.startswith("profile cpu"))
    assert "(spec-derived, not fitted; times only the calls the measured profile does not hold)" in line
    plain = api.project(tiny_job(tmp_path)).projection
    assert plain is not None and "(spec-derived, not fitted):" in next(
        a for a in plain.assumptions if a.startswith("profile cpu"))
