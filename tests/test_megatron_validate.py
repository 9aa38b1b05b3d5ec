"""The import sweep's Megatron-LM check (issue 21, must-show 3): an exported launch file is read as bash
runs it (environment, world size, arguments) and handed to a driver that runs Megatron-LM's own
parse_args + validate_args. The driver is specified here against a stand-in `megatron` package written
by the test (the real one needs Python 3.12 and triton; the sweep runs it, docs/import.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from primus.launch import axes_job, export_job

REPO = Path(__file__).resolve().parent.parent


def _load(name: str) -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


MV = _load("megatron_validate")
AXES = {"model": "llama3.1-8b", "hardware": "h100-80gb", "seq_len": 4096, "global_batch_size": 64,
        "precision": "bf16", "pp": 1, "cp": 1, "mbs": 1, "recompute": "full"}


def _case(**axes: Any) -> Any:
    job = axes_job({**AXES, **axes})
    return MV.case_from_export("x", export_job(job, "megatron").text, job.cluster.accelerator.compute_major)


def test_the_case_is_the_export_as_bash_and_torchrun_start_it() -> None:
    case = _case(nodes=2, tp=2, sp=True, sharding="dist_opt")
    assert case.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert case.world_size == 16 and case.device_major == 9
    i = case.argv.index("--tensor-model-parallel-size")
    assert case.argv[i + 1] == "2" and "--sequence-parallel" in case.argv


def test_an_unset_in_the_export_is_an_unset_in_the_case() -> None:
    assert _case(nodes=1, tp=2, sp=True, sharding="fsdp").env == {"CUDA_DEVICE_MAX_CONNECTIONS": None}


# A stand-in for megatron/training/arguments.py: argparse for two options, and a validate_args that
# checks what the real one checks of the environment and the device.
FAKE_ARGUMENTS = '''
import argparse, os
import torch

def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--tensor-model-parallel-size", type=int, default=1)
    p.add_argument("--mock-data", action="store_true")
    p.add_argument("--fp4-format", default=None)
    args, _ = p.parse_known_args()
    args.world_size = int(os.getenv("WORLD_SIZE", "1"))
    return args

def validate_args(args, defaults={}):
    assert args.world_size % args.tensor_model_parallel_size == 0, "world size is not divisible by TP"
    from megatron.core import utils
    from packaging.version import Version
    if args.fp4_format:
        assert utils._te_version >= Version("2.7.0.dev0"), "--fp4-format requires Transformer Engine >= 2.7.0.dev0"
    major = torch.cuda.get_device_properties(0).major
    if args.tensor_model_parallel_size > 1 and major < 10:
        assert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", "set CUDA_DEVICE_MAX_CONNECTIONS to 1"
'''


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "megatron-lm"
    (root / "megatron" / "training").mkdir(parents=True)
    (root / "megatron" / "__init__.py").write_text("")
    (root / "megatron" / "training" / "__init__.py").write_text("")
    (root / "megatron" / "training" / "arguments.py").write_text(FAKE_ARGUMENTS)
    (root / "megatron" / "core").mkdir()
    (root / "megatron" / "core" / "__init__.py").write_text("")
    (root / "megatron" / "core" / "utils.py").write_text("_te_version = None  # Megatron-LM caches TE's version\n")
    return root


def test_the_driver_runs_parse_and_validate_with_the_cases_environment(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    root = _checkout(tmp_path)
    tp2 = MV.Case("tp2", ("--tensor-model-parallel-size", "2"), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8, 9)
    no_env = MV.Case("no-env", ("--tensor-model-parallel-size", "2"), {"CUDA_DEVICE_MAX_CONNECTIONS": None}, 8, 9)
    blackwell = MV.Case("b200", ("--tensor-model-parallel-size", "2"), {}, 8, 10)
    odd = MV.Case("odd", ("--tensor-model-parallel-size", "3"), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 8, 9)
    bad = MV.Case("bad", ("--tensor-model-parallel-size", "two"), {}, 8, 9)
    fp4 = MV.Case("fp4", ("--fp4-format", "e2m1"), {}, 8, 10)  # Transformer Engine is reported at TE_VERSION
    verdicts = {v.name: v for v in MV.validate([tp2, no_env, blackwell, odd, bad, fp4], sys.executable, root)}
    assert verdicts["fp4"].ok, verdicts["fp4"].error
    assert verdicts["tp2"].ok and verdicts["b200"].ok
    assert "set CUDA_DEVICE_MAX_CONNECTIONS to 1" in verdicts["no-env"].error  # the earlier case's env is gone
    assert "world size is not divisible by TP" in verdicts["odd"].error
    assert "invalid int value: 'two'" in verdicts["bad"].error  # argparse's refusal, not a crash
