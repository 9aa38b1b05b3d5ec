"""Reading a run directory back: the result, the audit log, and the job rebuilt from the recorded inputs.

Reports and audits must depend on the directory only, never on the catalogs or rule files of the
machine that reads it (they may have changed since the run): the job is rebuilt from `inputs/job.yaml`
with its model and hardware replaced by the recorded `inputs/model.yaml` and `inputs/hardware.yaml`, the
projection uses the recorded `inputs/profile.yaml`, and legality the exact rule set of
`inputs/rules.yaml` (built-in, the job's, files and inline rules, as they were in force).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from primus.errors import InputError, shown
from primus.job import Job, job_from_mapping
from primus.parallel import INT_AXES, RECOMPUTES, SHARDINGS, Layout
from primus.projection.profile import Profile, profile_from_mapping
from primus.report.audit import read_audit
from primus.rules.model import Rule, check_rule
from primus.solver.api import Question
from primus.solver.ruleset import RuleSet
from primus.specs.base import error_reason
from primus.yamlio import load_json, load_mapping, loads_yaml, read_text

INPUT_NAMES = ("hardware.yaml", "job.yaml", "model.yaml", "profile.yaml", "rules.yaml")

def layout_of(parallel: Any) -> Layout:
    """A Layout from a recorded `parallel` mapping, refusing anything the tuner could not have written
    (an edited log must produce a difference, never a crash or a silently different layout)."""
    if not isinstance(parallel, dict):
        raise ValueError("not a mapping")
    unknown = set(parallel) - {*INT_AXES, "sp", "recompute", "sharding", "recompute_num_layers"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    for k in INT_AXES:
        v = parallel.get(k)
        if type(v) is not int or v < 1:
            raise ValueError(f"{k} is {v!r}")
    if type(parallel.get("sp")) is not bool:
        raise ValueError(f"sp is {parallel.get('sp')!r}")
    if parallel.get("recompute") not in RECOMPUTES or parallel.get("sharding") not in SHARDINGS:
        raise ValueError(f"recompute {parallel.get('recompute')!r} / sharding {parallel.get('sharding')!r}")
    rnl = parallel.get("recompute_num_layers")
    if rnl is not None and (type(rnl) is not int or rnl < 1):
        raise ValueError(f"recompute_num_layers is {rnl!r}")
    return Layout(**parallel)


@dataclass
class RunDir:
    """A run directory as written by `primus tune --out DIR` (loaded lazily, piece by piece)."""

    root: Path
    _entries: list[dict[str, Any]] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, root: Path) -> RunDir:
        if not root.is_dir():
            raise InputError(str(root), None, "not a directory")
        for name in ("result.json", "audit.jsonl", "inputs/SHA256SUMS"):
            if not (root / name).is_file():
                raise InputError(str(root), None, f"not a run directory of `primus tune`: {name} is missing")
        return cls(root)

    @cached_property
    def result(self) -> dict[str, Any]:
        data = load_json(self.root / "result.json")
        if not isinstance(data, dict) or "best" not in data or "job" not in data:
            raise InputError(str(self.root / "result.json"), None, "not the result of `primus tune`")
        return data

    @property
    def entries(self) -> list[dict[str, Any]]:
        if self._entries is None:
            self._entries = read_audit(self.root / "audit.jsonl")
        return self._entries

    @cached_property
    def versions(self) -> dict[str, str]:
        path = self.root / "versions.json"
        data = load_json(path) if path.is_file() else {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def input_text(self, name: str) -> str:
        return read_text(self.root / "inputs" / name)

    @cached_property
    def recorded_sums(self) -> dict[str, str]:
        """name → sha256 as listed in inputs/SHA256SUMS."""
        out: dict[str, str] = {}
        for n, line in enumerate(self.input_text("SHA256SUMS").splitlines(), start=1):
            if not line.strip():
                continue
            digest, _, name = line.partition("  ")
            if len(digest) != 64 or not name or "/" in name or name.startswith("."):
                raise InputError(str(self.root / "inputs" / "SHA256SUMS"), f"line {n}", "not '<sha256>  <name>'")
            out[name] = digest
        return out

    def input_problems(self) -> list[str]:
        """Every input whose bytes do not match SHA256SUMS, or that is missing or unlisted."""
        problems = []
        sums = self.recorded_sums
        for name in sorted(set(sums) | set(INPUT_NAMES)):
            path = self.root / "inputs" / name
            if name not in sums:
                problems.append(f"inputs/{name}: not listed in inputs/SHA256SUMS")
            elif not path.is_file():
                problems.append(f"inputs/{name}: missing")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != sums[name]:
                problems.append(f"inputs/{name}: sha256 {hashlib.sha256(path.read_bytes()).hexdigest()} differs "
                                f"from the recorded {sums[name]}")
        return problems

    @cached_property
    def llm_calls(self) -> list[str]:
        folder = self.root / "llm"
        return sorted(p.name for p in folder.glob("call-*.json")) if folder.is_dir() else []

    # ---- the job, profile and rules as recorded ----

    @cached_property
    def job_mapping(self) -> dict[str, Any]:
        """`inputs/job.yaml` as a mapping (as the user or `tune --allow` wrote it)."""
        where = str(self.root / "inputs" / "job.yaml")
        data = loads_yaml(self.input_text("job.yaml"), where)
        if not isinstance(data, dict):
            raise InputError(where, None, "top level must be a mapping")
        return data

    @cached_property
    def job(self) -> Job:
        return self.job_with(self.job_mapping)

    def job_with(self, data: dict[str, Any]) -> Job:
        """A job mapping (the recorded one, or it with options changed) with the recorded model and
        hardware: the trials of `tune --allow pipeline` are rebuilt this way."""
        inputs = self.root / "inputs"
        data = {**data, "model": "model.yaml", "hardware": "hardware.yaml"}
        data.pop("rules", None)  # in force through inputs/rules.yaml, with every other rule
        return job_from_mapping(data, str(inputs / "job.yaml"), inputs)

    @cached_property
    def profile(self) -> Profile:
        path = self.root / "inputs" / "profile.yaml"
        return profile_from_mapping(load_mapping(path), str(path))

    @cached_property
    def rules(self) -> tuple[Rule, ...]:
        path = self.root / "inputs" / "rules.yaml"
        items = load_mapping(path).get("rules")
        if not isinstance(items, list):
            raise InputError(str(path), "rules", "must be a list")
        out = []
        for i, item in enumerate(items):
            try:
                out.append(Rule.model_validate(item))
            except ValidationError as exc:
                err = exc.errors()[0]
                raise InputError(str(path), f"rules[{i}]",
                                 f"{'.'.join(map(str, err['loc']))}: {error_reason(err)}") from None
        return tuple(out)

    def question(self, extra: Sequence[Rule] = ()) -> Question:
        """The legal set of the recorded job under exactly the recorded rules (plus `extra`, rules the search
        adopted, as result.json's events record them)."""
        q = Question(self.job, pins={})
        domains = q.space.name_domains()
        for r in self.rules:
            check_rule(r, domains, str(self.root / "inputs" / "rules.yaml"))
        for r in extra:
            check_rule(r, domains, f"{self.root / 'result.json'} (events: adopted rule {r.id!r})")
        q.ruleset = RuleSet((*self.rules, *extra))
        return q

    def adoptions(self) -> list[tuple[int, Rule]]:
        """Rules adopted during the search, each with the seq of the first candidate it applied to
        (InputError naming result.json's event that is not of the form `tune` writes)."""
        where = str(self.root / "result.json")
        events = self.result.get("events", [])
        if not isinstance(events, list):
            raise InputError(where, "events", f"is {shown(events)}, not a list")
        out = []
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                raise InputError(where, f"events[{i}]", f"is {shown(e)}, not an event")
            if e.get("kind") != "rule" or e.get("status") != "adopted":
                continue
            if "seq" not in e:
                raise InputError(where, f"events[{i}]", "an adopted rule without its seq (written by an older primus)")
            seq, rid, require = e["seq"], e.get("id"), e.get("require")
            if type(seq) is not int or seq < 0:
                raise InputError(where, f"events[{i}].seq", f"is {shown(seq)}, not a candidate's seq")
            if not isinstance(rid, str) or not isinstance(require, str):
                raise InputError(where, f"events[{i}]", "an adopted rule without its id and require text")
            proposer = e.get("proposer", "llm")
            try:
                rule = Rule(id=rid, require=require, origin="llm", source=f"proposed by {proposer}")
            except ValidationError as exc:
                err = exc.errors()[0]
                raise InputError(where, f"events[{i}].{'.'.join(map(str, err['loc']))}", error_reason(err)) from None
            out.append((seq, rule))
        return out
