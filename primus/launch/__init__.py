"""Launch configs in and out: Megatron-LM argument lines, AMD Primus experiment YAML, torchtitan TOML.

Export writes a job in a framework's own option names (for a stated release of each); import reads
such a file back as a job, listing every option primus does not model. Export then import gives the
same job. See docs/launch.md for the option tables.
"""

from primus.launch.api import axes_job, export_job, import_launch, job_from_launch, load_launch_job, tune_job
from primus.launch.common import KINDS, Exported, LaunchConfig
from primus.launch.megatron_args import MEGATRON_RELEASE
from primus.launch.primus_yaml import PRIMUS_RELEASE
from primus.launch.torchtitan import TORCHTITAN_RELEASE

RELEASES = {"megatron": MEGATRON_RELEASE, "primus": PRIMUS_RELEASE, "torchtitan": TORCHTITAN_RELEASE}

__all__ = ["KINDS", "RELEASES", "Exported", "LaunchConfig", "axes_job", "export_job", "import_launch",
           "job_from_launch", "load_launch_job", "tune_job"]
