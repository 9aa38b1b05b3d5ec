"""Run Megatron-LM's own argument parsing and validation on argument lists, as its launch would.

Runs under the interpreter of a Megatron-LM environment (Python 3.12, torch, triton), with a
Megatron-LM checkout as the working directory; it imports nothing of primus (primus's environment
need not exist there). ``benchmarks/import_sweep.py --validate-with PYTHON`` starts it and writes the
cases as JSON on stdin::

    [{"name": "...", "argv": ["--tensor-model-parallel-size", "8", ...],
      "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "OTHER": null}, "world_size": 64, "device_major": 9}]

For each case it sets what the launcher sets (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``: torchrun's
environment for rank 0), the case's environment (``null``: unset), ``sys.argv``, then calls
``megatron.training.arguments.parse_args()`` and ``validate_args(args)``. It prints one JSON list:
``[{"name": ..., "ok": true|false, "error": "..."}]``.

Two stubs, because this runs on a CPU: ``torch.cuda.get_device_properties`` and
``torch.cuda.get_device_capability`` report the target accelerator's compute capability
(``device_major``), which ``validate_args`` reads (``get_device_arch_version``: the
CUDA_DEVICE_MAX_CONNECTIONS rule applies before Blackwell; grouped-GEMM support); and Transformer
Engine, which imports only where CUDA runs, is reported at ``te_version`` to Megatron-LM's version
checks (``megatron.core.utils`` caches it in ``_te_version``; FP4 needs >= 2.7). Nothing else of
Megatron-LM or torch is replaced.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from types import SimpleNamespace
from typing import Any

#: Set per case from the case's world size: what torchrun exports to rank 0.
LAUNCHER_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK")


def _stub_device(major: int) -> None:
    """Make torch report an accelerator of compute capability ``major``.0 (the only GPU query
    validate_args makes)."""
    import torch

    torch.cuda.get_device_properties = lambda *_a, **_k: SimpleNamespace(major=major, minor=0)  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *_a, **_k: (major, 0)  # type: ignore[assignment]


def _stub_te(version: str) -> None:
    """Report Transformer Engine at `version` to Megatron-LM's is_te_min_version (it reads a cache)."""
    from megatron.core import utils
    from packaging.version import Version

    utils._te_version = Version(version)


def _run_case(case: dict[str, Any]) -> dict[str, Any]:
    from megatron.training import arguments

    saved = {k: os.environ.get(k) for k in (*LAUNCHER_ENV, *case["env"])}
    try:
        os.environ.update(WORLD_SIZE=str(case["world_size"]), RANK="0", LOCAL_RANK="0")
        for name, value in case["env"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _stub_device(int(case["device_major"]))
        if case.get("te_version"):
            _stub_te(str(case["te_version"]))
        sys.argv = ["pretrain_gpt.py", *case["argv"]]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                args = arguments.parse_args()
                arguments.validate_args(args)
            except SystemExit:  # argparse refused an argument: its message is on stderr
                lines = err.getvalue().strip().splitlines()
                return {"name": case["name"], "ok": False, "error": lines[-1] if lines else "argparse exit"}
        return {"name": case["name"], "ok": True, "error": ""}
    except Exception as exc:  # every refusal of validate_args is reported, not raised
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {"name": case["name"], "ok": False,
                "error": f"{type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main() -> int:
    sys.path.insert(0, os.getcwd())  # the Megatron-LM checkout
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # Megatron's prints never mix into the JSON answer
        results = [_run_case(case) for case in cases]
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
