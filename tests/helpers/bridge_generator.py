"""benchmarks/bridge_recipes.py loaded as a module (it is a script, not part of the package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bridge_recipes.py"


def bridge_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bridge_recipes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module
