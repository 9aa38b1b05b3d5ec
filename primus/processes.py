"""How many worker processes a command forks when the user does not say (`--workers`): one definition
for `tune`, `audit verify` and `validate`, whose answers never depend on the number."""

from __future__ import annotations

import os

#: At most this many processes by default: beyond it the forked copies of a job's caches cost more memory
#: than the cores they would keep busy save time, on the 8- to 16-core login nodes the commands run on.
MAX_DEFAULT_WORKERS = 8
#: The range every `--workers` option accepts.
WORKERS_RANGE = (1, 256)


def default_workers() -> int:
    """The machine's cores, at most MAX_DEFAULT_WORKERS."""
    return min(MAX_DEFAULT_WORKERS, os.cpu_count() or 1)
