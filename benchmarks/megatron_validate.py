"""Megatron-LM's own verdict on primus's exports: the cases the import sweep hands to
``megatron_validate_driver.py`` and the answers it reads back.

An exported launch file (``primus export --to megatron``) is read the way bash runs it: its
``export NAME=VALUE`` and ``unset NAME`` lines are the environment, its ``torchrun`` line gives the
world size (``--nnodes`` × ``--nproc-per-node``) and the arguments after ``pretrain_gpt.py``. The
export leaves out data, tokenizer, learning-rate and checkpoint options ("add your own"); the user's
part added here is the smallest Megatron-LM accepts for a run on its mock data (`USER_ARGS`).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.errors import InputError
from primus.job import job_from_mapping
from primus.launch import LaunchConfig, export_job
from primus.launch.export_check import ExportCheck, check_for_export, split_for_export
from primus.launch.megatron import SCRIPT
from primus.launch.shell import read_script

DRIVER = Path(__file__).with_name("megatron_validate_driver.py")
#: What a user adds to an exported launch line to run it on mock data: Megatron-LM's synthetic
#: dataset, the tokenizer that needs no files (its vocabulary is the exported --vocab-size), a
#: learning rate and a length of training.
#: Transformer Engine, which imports only where CUDA runs, is reported to Megatron-LM's version checks
#: (``is_te_min_version``) as the release Megatron-LM d98e8a6 locks: uv.lock, transformer-engine
#: 2.17.1+4329ff84.
TE_VERSION = "2.17.1"
USER_ARGS = ("--mock-data", "--tokenizer-type", "NullTokenizer", "--lr", "0.0001", "--train-iters", "10")
#: The job a model definition (a file of model arguments only: Megatron-LM's modelopt conf/) is exported
#: in, so that Megatron-LM checks its architecture arguments: one node of the sweep's default GPU, no
#: model parallelism, the smallest batch; memory is not checked (`fit` is not asked), since only the
#: arguments are. Megatron-LM's own validate_args decides whether the architecture is accepted.
MODEL_JOB: dict[str, Any] = {
    "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 8, "precision": "bf16",
    "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "mbs": 1, "sp": False, "recompute": "none",
                 "sharding": "dist_opt"}}
_UNSET = re.compile(r"^\s*unset\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", re.M)


@dataclass(frozen=True)
class Case:
    """One exported launch, as Megatron-LM's launcher would start rank 0 of it."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str | None]
    world_size: int
    device_major: int

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "argv": [*self.argv, *USER_ARGS], "env": self.env,
                "world_size": self.world_size, "device_major": self.device_major, "te_version": TE_VERSION}


def case_from_export(name: str, text: str, device_major: int) -> Case:
    """The environment, world size and arguments of an exported Megatron-LM launch file."""
    script = read_script(text, name)
    env: dict[str, str | None] = {k: v for k, v in script.exported}
    env.update((k, None) for k in _UNSET.findall(text))
    launch = next(c for c in script.commands if SCRIPT in c.words)
    words = list(launch.words)
    cut = words.index(SCRIPT)
    launcher = dict(zip(words[1:cut:2], words[2:cut:2], strict=True))
    world = int(launcher["--nnodes"]) * int(launcher["--nproc-per-node"])
    return Case(name, tuple(words[cut + 1:]), env, world, device_major)


@dataclass(frozen=True)
class Verdict:
    name: str
    ok: bool
    error: str


def validate(cases: list[Case], python: str, megatron: Path) -> list[Verdict]:
    """Run Megatron-LM's parse_args + validate_args on every case, in one process of `python` (an
    interpreter that imports Megatron-LM) started in the `megatron` checkout."""
    if not cases:
        return []
    proc = subprocess.run([python, str(DRIVER.resolve())], input=json.dumps([c.as_json() for c in cases]),
                          capture_output=True, text=True, cwd=megatron, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"the Megatron-LM driver failed (exit {proc.returncode}): {tail[0]}")
    return [Verdict(r["name"], bool(r["ok"]), str(r["error"])) for r in json.loads(proc.stdout)]


def quoted(case: Case) -> str:
    """The case as one shell line (for a report)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in case.env.items() if v is not None)
    return f"{env} WORLD_SIZE={case.world_size} {SCRIPT} {shlex.join(case.argv)}".strip()


@dataclass(frozen=True)
class ExportRow:
    """One imported job, exported with `primus export --to megatron`'s checks, and Megatron-LM's verdict."""

    corpus: str
    path: str
    fit: str  # "fits", or "refuses: RULES" (the CLI would not write it; its arguments are checked all the same)
    export: str  # "written", "written with the pipeline split options", or "refused: REASON" (exit 2)
    megatron: str  # "valid", Megatron-LM's error, or "" when nothing was exported


def export_rows(imported: dict[str, LaunchConfig], python: str, megatron: Path,
                fit_check: bool = False) -> list[ExportRow]:
    """Export every imported job (`imported`: "corpus:path" -> its import) as `primus export --to
    megatron` would, and run Megatron-LM's argument validation on each launch file. With `fit_check`,
    `primus fit` is asked first, as the CLI does (seconds per job); without it only the pipeline
    split is checked (`split_for_export`: the part of the check that changes what is written)."""
    pending: list[tuple[str, str, str, str, Case | None]] = []
    for n, (key, config) in enumerate(imported.items(), start=1):
        print(f"exporting {n}/{len(imported)}: {key}", file=sys.stderr)  # progress: fit takes seconds per job
        corpus, _, path = key.partition(":")
        data = {**MODEL_JOB, "model": config.job["model"]} if config.model_only else config.job
        job = job_from_mapping(data, config.source, Path(config.source).parent)
        try:
            check = (ExportCheck(job, None) if config.model_only else check_for_export(job) if fit_check
                     else split_for_export(job))
            exported = export_job(check.job, "megatron")
        except InputError as exc:
            pending.append((corpus, path, "", f"refused: {exc.reason}", None))
            continue
        result = check.result
        fit = ("not checked (a model definition, in MODEL_JOB)" if config.model_only else
               "refuses: pipeline-split (structural check)" if not check.split_ok else
               "not asked" if result is None else
               "fits" if result.fits else "refuses: " + ", ".join(result.violated_rules))
        how = "written with the pipeline split options" if check.split_added else "written"
        major = job.cluster.accelerator.compute_major
        if major is None:
            raise InputError(config.source, "hardware", "a Megatron-LM launch needs a GPU (no compute capability)")
        pending.append((corpus, path, fit, how, case_from_export(key, exported.text, major)))
    verdicts = {v.name: v for v in validate([c for *_, c in pending if c is not None], python, megatron)}
    rows = []
    for corpus, path, fit, how, case in pending:
        verdict = verdicts.get(case.name) if case is not None else None
        said = "" if verdict is None else "valid" if verdict.ok else verdict.error
        rows.append(ExportRow(corpus, path, fit, how, said))
    return rows
