"""primus: fit proofs, legal-layout enumeration, throughput projection and tuning for LLM training.

The Python API (`primus.load_job`, `primus.fit`, `primus.memory_ledger`,
`primus.enumerate_layouts`, `primus.project`, `primus.tune`) lives in `primus.api`; it is imported on first
use, so `import primus` stays light (the measurement path never imports ortools). (`primus.memory` is
the ledger's package, hence `memory_ledger` for the function under `primus memory`.)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "enumerate_layouts", "fit", "load_job", "memory_ledger", "project", "tune"]
_API = ("enumerate_layouts", "fit", "load_job", "memory_ledger", "project", "tune")


def __getattr__(name: str) -> Any:
    if name in _API:
        from primus import api

        return getattr(api, name)
    raise AttributeError(f"module 'primus' has no attribute {name!r}")
