"""Which torchtitan a TOML was written for, from the keys it uses, as a `torchtitan@YYYY.MM` stack.

torchtitan has no releases that its TOMLs name, but its JobConfig changed shape over time, so some keys
date a file: a key that was later renamed or removed says the file predates that change; a key that was
added says it does not. Each entry below is the pytorch/torchtitan pull request that made the change
and the day it was merged (read from the repository's history of torchtitan/config_manager.py and
torchtitan/config/job_config.py).

The stack release is the newest one the file's keys allow: with a key that was later removed, the
stack described (`stacks/torchtitan.yaml`) as of the month it was removed (the newest described release
not after that month); with only keys that were added, the newest release. Keys from both sides of a
change that never coexisted are a contradiction, refused with both named. Every TOML predates #2386
(2026-02-23), which replaced TOMLs by Python config registries: a TOML with only added keys, or none,
gets the newest release described before that; a registry config gets the newest release.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from primus.errors import InputError
from primus.stacks.core import resolve_stack

STACK: Final = "torchtitan"

#: Key (dotted; a trailing "." is a section) -> (day it was removed or renamed, the change).
UNTIL: Final[dict[str, tuple[str, str]]] = {
    "training.enable_fp8_linear": ("2024-07-17", "#466 renamed it training.enable_float8_linear"),
    "training.enable_float8_linear": ("2024-07-30", "#496 moved it to [float8]"),
    "training.float8_scaling_type_input": ("2024-07-30", "#496 moved it to [float8]"),
    "training.float8_scaling_type_weight": ("2024-07-30", "#496 moved it to [float8]"),
    "training.float8_scaling_type_grad_output": ("2024-07-30", "#496 moved it to [float8]"),
    "float8.scaling_type_input": ("2025-01-31", "#812 deleted delayed scaling"),
    "float8.scaling_type_weight": ("2025-01-31", "#812 deleted delayed scaling"),
    "float8.scaling_type_grad_output": ("2025-01-31", "#812 deleted delayed scaling"),
    "float8.enable_float8_linear": ("2025-02-15", "#823 replaced it by model.converters = [\"float8\"]"),
    "training.tensor_parallel_degree": ("2025-03-18", "#980 moved the parallel degrees to [parallelism]"),
    "training.data_parallel_shard_degree": ("2025-03-18", "#980 moved the parallel degrees to [parallelism]"),
    "training.data_parallel_replicate_degree": ("2025-03-18", "#980 moved the parallel degrees to [parallelism]"),
    "experimental.pipeline_parallel_degree": ("2025-03-18", "#980 moved the parallel degrees to [parallelism]"),
    "experimental.context_parallel_degree": ("2025-03-18", "#980 moved the parallel degrees to [parallelism]"),
    "experimental.pipeline_parallel_microbatches": ("2025-04-07", "#1073 replaced it by microbatch_size"),
    "training.batch_size": ("2025-06-05", "#1238 renamed it training.local_batch_size"),
    "training.compile": ("2025-08-20", "#1608 moved it to [compile] enable and components"),
    "float8.": ("2025-09-26", "#1701 moved [float8] under [quantize]"),
}
#: The day torchtitan stopped reading TOML configs, and the change: every TOML predates it.
TOML_UNTIL: Final = ("2026-02-23", "#2386, 9810191, replaced them by Python config registries")
#: Key (or section) -> (day it was added, the change).
SINCE: Final[dict[str, tuple[str, str]]] = {
    "parallelism.": ("2025-03-18", "#980 added [parallelism]"),
    "parallelism.pipeline_parallel_microbatch_size": ("2025-04-07", "#1073 added it"),
    "training.local_batch_size": ("2025-06-05", "#1238 added it"),
    "training.global_batch_size": ("2025-06-05", "#1238 added it"),
    "parallelism.expert_tensor_parallel_degree": ("2025-08-13", "#1555 added it"),
    "compile.": ("2025-08-20", "#1608 added [compile]"),
    "quantize.linear.": ("2025-09-30", "#1763 added [quantize.linear]"),
}


def _hits(keys: Iterable[str], table: dict[str, tuple[str, str]]) -> list[tuple[str, str, str]]:
    """(day, key as the table names it, change) for each table entry some written key matches."""
    written = list(keys)
    out = []
    for name, (day, change) in table.items():
        if any(k == name or (name.endswith(".") and k.startswith(name)) for k in written):
            out.append((day, name.rstrip("."), change))
    return sorted(out)


#: The day pytorch/torchtitan #1416 (3c84ce0) added ``pipeline_parallel_first/last_stage_less_layers``:
#: before it the default split points divided the layers alone evenly over the stages.
LESS_LAYERS_SINCE: Final = "2025-07-30"


def predates(keys: Iterable[str], day: str) -> bool:
    """Whether the file uses a key torchtitan removed or renamed on or before `day`."""
    return any(until <= day for until, _, _ in _hits(keys, UNTIL))


def _month(day: str) -> str:
    return day[:7].replace("-", ".")


def torchtitan_release(keys: Iterable[str], where: str) -> tuple[str, str]:
    """The stack (`torchtitan@YYYY.MM`, a described release) for a TOML written with these dotted keys,
    and one sentence saying how it was decided."""
    written = sorted(keys)
    until = _hits(written, UNTIL)
    since = _hits(written, SINCE)
    if until and since and since[-1][0] >= until[0][0]:
        (d_new, k_new, c_new), (d_old, k_old, c_old) = since[-1], until[0]
        raise InputError(where, k_old, f"and {k_new} never coexisted in torchtitan ({k_old} until {d_old}: "
                         f"pytorch/torchtitan {c_old}; {k_new} since {d_new}: {c_new})")
    if until:
        day, _, change = until[0]
        key = ", ".join(k for d, k, _ in until if d == day)
        stack = resolve_stack(f"{STACK}@{_month(day)}")
        which = (f"{stack.label} is the newest described release not after that" if stack.release <= _month(day)
                 else f"that is older than every described release, so the oldest, {stack.label}")
        return stack.label, (f"stack {stack.label}: the file uses {key}, which torchtitan had until {day} "
                             f"(pytorch/torchtitan {change}); {which}")
    toml = resolve_stack(f"{STACK}@{_month(TOML_UNTIL[0])}")  # the newest release a TOML can be from
    capped = f"TOML files ended {TOML_UNTIL[0]} (pytorch/torchtitan {TOML_UNTIL[1]})"
    if since:
        day, key, change = since[-1]
        which = ("the newest described release between" if toml.release >= _month(day) else
                 f"no release is described between them, so the newest before the end, {toml.label}, older than "
                 f"the key: its settings stand in for the file's")
        return toml.label, (f"stack {toml.label}: the file uses {key}, which torchtitan has had since {day} "
                            f"(pytorch/torchtitan {change}), and {capped}: {which}")
    return toml.label, (f"stack {toml.label}: the file uses no key that dates it more closely, and {capped}: "
                        "the newest described release before that (primus.launch.torchtitan_release)")


def registry_release() -> tuple[str, str]:
    """The stack of a ``config_registry.py`` config: torchtitan after #2386, so the newest release."""
    newest = resolve_stack(STACK)
    return newest.label, (f"stack {newest.label}: a config_registry.py function, the form torchtitan has read "
                          f"since {TOML_UNTIL[0]} (pytorch/torchtitan {TOML_UNTIL[1]}): the newest release")
