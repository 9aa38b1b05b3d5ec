"""Launch configs in and out: Megatron-LM argument lines, AMD Primus experiment YAML, torchtitan TOML.

Export writes a job in a framework's own option names (for a stated release of each); import reads
such a file back as a job, listing every option primus does not model. Export then import gives the
same job. See docs/launch.md for the option tables.

The formats' modules load on first use of a name below (PEP 562), so a command that only needs
`KINDS` (the ``--from`` option of fit, memory and project) does not import every importer.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from primus.launch.common import KINDS, Exported, LaunchConfig

if TYPE_CHECKING:
    from primus.launch.api import axes_job, export_job, import_launch, job_from_launch, load_launch_job, tune_job

_LAZY = {name: "primus.launch.api" for name in
         ("axes_job", "export_job", "import_launch", "job_from_launch", "load_launch_job", "tune_job")}


def _releases() -> dict[str, str]:
    from primus.launch.megatron_args import MEGATRON_RELEASE
    from primus.launch.primus_yaml import PRIMUS_RELEASE
    from primus.launch.torchtitan import TORCHTITAN_RELEASE

    return {"megatron": MEGATRON_RELEASE, "primus": PRIMUS_RELEASE, "torchtitan": TORCHTITAN_RELEASE}


def __getattr__(name: str) -> Any:
    if name == "RELEASES":
        value: Any = _releases()
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'primus.launch' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["KINDS", "RELEASES", "Exported", "LaunchConfig", "axes_job", "export_job", "import_launch",
           "job_from_launch", "load_launch_job", "tune_job"]
