"""The report of a `primus tune` run directory, and its audit.

    from primus.report import write_report, verify_run
    write_report(Path("primus-tune"))          # report.html, report.md, charts/*.svg from the directory
    outcome = verify_run(Path("primus-tune"))  # recompute every candidate of audit.jsonl from inputs/

Modules: `audit` (the audit log and the resumable checkpoint), `rundir` (a run directory read back, the
job rebuilt from its recorded inputs), `svg` and `charts` (inline SVG), `pipeline` (the best layout's
simulated timeline), `context` (what the report says), `render` (jinja2 templates), `verify`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from primus.report.render import write_report
    from primus.report.verify import verify_run

__all__ = ["verify_run", "write_report"]


def __getattr__(name: str) -> Any:
    # Lazy: `primus.tuning` imports `primus.report.audit`, which must not pull in the projection and solver.
    if name == "write_report":
        from primus.report.render import write_report

        return write_report
    if name == "verify_run":
        from primus.report.verify import verify_run

        return verify_run
    raise AttributeError(name)
