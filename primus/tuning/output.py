"""Writing a tune run's directory: a killed run never leaves half a report, and no file that `tune`
did not write is ever removed or replaced (see `primus.report.owned` for the marker that says which).

A new directory is written into a sibling temporary directory which is renamed into place at the end.
Contents: `report.html` and `report.md` (the report, rendered from the other files by `primus.report`),
`result.json` (the answer), `audit.jsonl` (one line per candidate, in search order), `llm/` (every
prompt and reply), `inputs/` (the job, the resolved model, hardware, rules and profile, with
`SHA256SUMS`), `versions.json`, `primus-run.json` (the marker: the files `tune` wrote) and, written
last, `SHA256SUMS`: every file above with its sha256. The report is rendered from the files just
written, exactly as `primus report DIR` re-renders it later, so the two cannot differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from primus import __version__
from primus.errors import InputError
from primus.report.audit import dumps_line
from primus.report.manifest import MANIFEST, file_sha256
from primus.report.owned import MARKER, check_inside, claimable, read_marker, relative_files, remove_owned, write_marker

# The folder an existing run directory's new files are staged in (inside it, so each move is a rename).
STAGING_PREFIX = ".primus-staging-"


def _dump(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"primus": __version__}
    for dist in ("ortools", "numpy", "pydantic", "jinja2", "click", "pyyaml", "rich", "torch"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def write_run_dir(out_dir: Path, result: dict[str, Any], entries: list[dict[str, Any]],
                  transcripts: list[str], inputs: dict[str, str], lines: list[str] | None = None) -> None:
    """Write the run directory. `out_dir` must not exist, be empty, or be a run directory `tune` wrote
    (see `primus.report.owned`; checked again here, before anything is touched). A new directory is
    staged beside it and renamed into place in one step; into an existing one the new files are staged
    inside it and moved over the old ones, the marker claiming them first, and only the files the old
    marker lists are removed: whatever else is there stays."""
    out_dir = out_dir.resolve()
    previous = claimable(out_dir, "run", "--out")
    if not out_dir.exists():
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
        os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the finished report from everyone else
        try:
            _stage(tmp, result, entries, transcripts, inputs, lines)
            os.replace(tmp, out_dir)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return
    left = read_marker(out_dir, "run")
    if left and isinstance(left.get("staging"), str) and left["staging"].startswith(STAGING_PREFIX) \
            and "/" not in left["staging"] and (out_dir / left["staging"]).is_dir():
        shutil.rmtree(out_dir / left["staging"])  # the staging folder of a write that was killed
    staging = out_dir / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
    write_marker(out_dir, "run", previous, staging=staging.name)  # claim the staging folder before making it
    staging.mkdir()
    try:
        _stage(staging, result, entries, transcripts, inputs, lines)
        new = relative_files(staging)
        check_inside(out_dir, new)  # a folder of the old run replaced by a link out of it is not followed
        foreign = sorted(n for n in new if n != MARKER and n not in previous and (out_dir / n).exists())
        if foreign:  # a file of the user's under a name this run writes (review 49, M9: llm/call-001.json)
            raise InputError("--out", str(out_dir / foreign[0]),
                             f"exists and was not written by primus tune (the run directory's {MARKER} does not "
                             f"list it{' or ' + str(len(foreign) - 1) + ' more' if len(foreign) > 1 else ''}); "
                             "nothing was changed: move it, or choose another --out")
        # the staged files' sha256 too, and SHA256SUMS moved in last: a write killed between two moves
        # leaves old files the old SHA256SUMS vouches for and new ones the marker does, so the rerun that
        # recovers takes every one for tune's own (`owned._vouched`)
        staged = {name: file_sha256(staging / name) for name in new if name not in (MARKER, MANIFEST)}
        write_marker(out_dir, "run", set(previous) | set(new), staging=staging.name, staged_sha256=staged)
        for name in sorted(staged):
            target = out_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, target)
        remove_owned(out_dir, set(previous) - set(new))
        os.replace(staging / MANIFEST, out_dir / MANIFEST)
        os.replace(staging / MARKER, out_dir / MARKER)  # the final list, as SHA256SUMS records it
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _stage(tmp: Path, result: dict[str, Any], entries: list[dict[str, Any]], transcripts: list[str],
           inputs: dict[str, str], lines: list[str] | None) -> None:
    """Every file of a run directory, written into `tmp` (the report rendered from the others)."""
    _dump(tmp / "result.json", json.dumps(result, indent=1, sort_keys=False) + "\n")
    with (tmp / "audit.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(lines if lines is not None else (dumps_line(entry) for entry in entries))
    for i, text in enumerate(transcripts, start=1):
        _dump(tmp / "llm" / f"call-{i:03d}.json", text + "\n")
    sums = []
    for name, text in sorted(inputs.items()):
        _dump(tmp / "inputs" / name, text)
        sums.append(f"{hashlib.sha256(text.encode('utf-8')).hexdigest()}  {name}")
    _dump(tmp / "inputs" / "SHA256SUMS", "\n".join(sums) + "\n")
    _dump(tmp / "versions.json", json.dumps(versions(), indent=1, sort_keys=True) + "\n")
    from primus.report.manifest import write_manifest
    from primus.report.render import write_report

    write_report(tmp, entries)
    write_marker(tmp, "run", [*relative_files(tmp), MANIFEST])  # what tune wrote, the list below included
    write_manifest(tmp)  # last: lists every file written above, with its sha256


def input_texts(job_text: str, tuner: Any) -> dict[str, str]:
    """The inputs of a run as text: the job as written plus what its references resolved to."""
    job = tuner.job
    rules = [{"id": r.id, "why": r.why, "source": r.source, "severity": r.severity, "weight": r.weight,
              "require": r.require, "origin": r.origin} for r in tuner.base_space.question.ruleset.rules]
    return {
        "job.yaml": job_text,
        "model.yaml": yaml.safe_dump(job.model.model_dump(mode="json", exclude_none=True), sort_keys=False),
        "hardware.yaml": yaml.safe_dump(job.cluster.model_dump(mode="json"), sort_keys=False),
        "rules.yaml": yaml.safe_dump({"rules": rules}, sort_keys=False),
        "profile.yaml": yaml.safe_dump(tuner.profile.model_dump(mode="json"), sort_keys=False),
    }
