"""The environment a Megatron-LM launch needs, as named data with its source.

Megatron-LM's ``validate_args`` (megatron/training/arguments.py, NVIDIA/Megatron-LM d98e8a6, 2026)
asserts ``CUDA_DEVICE_MAX_CONNECTIONS=1`` when TP or CP > 1 on a device before Blackwell (its
``get_device_arch_version()``, the major compute capability, below 10: Ampere 8, Hopper 9, and AMD's
CDNA 3/4, which ROCm reports as 9.4/9.5) without FSDP or the MoE all-to-all overlap, and asserts that
it is *not* 1 with torch FSDP2 or Megatron FSDP (on every device). The export writes the setting the
launch needs; the device's compute capability is hardware data (``hardware/*.yaml``,
``accelerator.compute_capability``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from primus.stacks.megatron_release import tag_key

#: Megatron-LM's get_device_arch_version() from which the CUDA_DEVICE_MAX_CONNECTIONS=1 requirement
#: no longer holds ("no longer exists since the Blackwell architecture", validate_args).
UNGATED_FROM_MAJOR: Final = 10
#: Environment variables the export writes, read back on import as understood (they change no bytes).
LAUNCH_ENV: Final = frozenset({"CUDA_DEVICE_MAX_CONNECTIONS"})
SOURCE: Final = "megatron/training/arguments.py validate_args, NVIDIA/Megatron-LM d98e8a6"
#: The first release whose requirement depends on TP, CP and the device (`megatron_env`); before it every launch
#: needs the variable at 1.
ASYNC_ALLREDUCE_UNTIL: Final = "core_v0.12.0"
#: The first release that exempts Blackwell from the requirement for TP as well as CP (the parenthesised test).
PARENTHESISED_FROM: Final = "core_v0.13.0"
#: The first release that lets the MoE all-to-all overlap run without it (a warning instead of the assert).
MOE_OVERLAP_EXEMPT_FROM: Final = "core_v0.14.0"


@dataclass(frozen=True)
class EnvSetting:
    """One environment variable for the launch: its value (None = must be unset) and why."""

    name: str
    value: str | None
    why: str


def megatron_env(tp: int, cp: int, fsdp: bool, moe_a2a_overlap: bool,
                 device_major: int | None, release: str | None = None) -> tuple[EnvSetting, ...]:
    """What Megatron-LM's argument validation requires of CUDA_DEVICE_MAX_CONNECTIONS for a layout on a
    device of major compute capability `device_major` (None: unknown, taken as before Blackwell, where
    the requirement holds), in Megatron-LM `release` (a tag; None: the newest, d98e8a6's rule).

    The rule changed twice. Up to core_v0.11.x validate_args raises whenever the variable is not 1 and
    async tensor-parallel all-reduce (on unless --no-async-tensor-model-parallel-allreduce, which the export
    does not write) or sequence parallelism is on: every layout, every device (core_v0.11.0 arguments.py
    lines 656-664, core_v0.8.0 lines 476-484). core_v0.12.x asserts it for `tp > 1 or cp > 1 and
    get_device_arch_version() < 10`, where Python's precedence exempts Blackwell for CP only (core_v0.12.0
    line 768); core_v0.13.0 added the parentheses, and core_v0.14.0 exempted the MoE all-to-all overlap."""
    key = tag_key(release) if release is not None else None
    if key is not None and key < tag_key(ASYNC_ALLREDUCE_UNTIL):
        return (EnvSetting("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                           f"Megatron-LM {release} requires CUDA_DEVICE_MAX_CONNECTIONS=1 for its default async "
                           "tensor-parallel all-reduce and for sequence parallelism, on any layout and device "
                           f"(arguments.py validate_args, before {ASYNC_ALLREDUCE_UNTIL})"),)
    if fsdp:
        return (EnvSetting("CUDA_DEVICE_MAX_CONNECTIONS", None,
                           f"FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset ({SOURCE})"),)
    before_blackwell = device_major is None or device_major < UNGATED_FROM_MAJOR
    if key is not None and key < tag_key(PARENTHESISED_FROM):
        gated = tp > 1 or (cp > 1 and before_blackwell)
    else:
        gated = (tp > 1 or cp > 1) and before_blackwell
    exempt = moe_a2a_overlap and (key is None or key >= tag_key(MOE_OVERLAP_EXEMPT_FROM))
    if gated and not exempt:
        where = SOURCE if release is None else f"megatron/training/arguments.py validate_args, Megatron-LM {release}"
        return (EnvSetting("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                           f"TP or CP > 1 before Blackwell requires CUDA_DEVICE_MAX_CONNECTIONS=1 ({where})"),)
    return ()


#: PyTorch's allocator setting the export writes when the job runs expandable segments ("CUDA
#: semantics: Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF", pytorch.org/docs/stable/notes/cuda.html).
ALLOCATOR_ENV: Final = "PYTORCH_CUDA_ALLOC_CONF"


#: The names PyTorch reads its allocator configuration from (CUDA, ROCm, and the device-generic one).
ALLOCATOR_VARS: Final = frozenset({ALLOCATOR_ENV, "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})


def expandable_segments_of(name: str, value: str) -> bool | None:
    """What an allocator variable says of expandable segments (`key:value` pairs, comma-separated), or
    None when `name` is not one or the value does not set it."""
    if name not in ALLOCATOR_VARS:
        return None
    for item in value.split(","):
        key, _, setting = item.partition(":")
        if key.strip() == "expandable_segments" and setting.strip() in ("True", "False"):
            return setting.strip() == "True"
    return None


def allocator_env(expandable_segments: bool) -> tuple[EnvSetting, ...]:
    """The allocator configuration the job's memory verdict assumed, when it is not PyTorch's default."""
    if not expandable_segments:
        return ()
    return (EnvSetting(ALLOCATOR_ENV, "expandable_segments:True",
                       "the job runs PyTorch's allocator with expandable segments (allocator.expandable_segments, "
                       "else its stack's allocator_expandable_segments): "
                       "fit's allocator reserve assumes it (stacks/allocators.yaml)"),)


def shell_lines(settings: tuple[EnvSetting, ...]) -> list[str]:
    """The settings as bash lines, each after a comment with its reason."""
    lines: list[str] = []
    for s in settings:
        lines.append(f"# {s.why}")
        lines.append(f"export {s.name}={s.value}" if s.value is not None else f"unset {s.name}")
    return lines
