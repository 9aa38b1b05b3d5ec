"""The audit log on disk, and the checkpoint an interrupted `primus tune --out DIR` resumes from.

`audit.jsonl` holds one JSON object per candidate, in search order (seq 0, 1, ...). While a run is in
progress the same lines are appended to `DIR.partial/audit.jsonl`, a sibling of the run directory, so
that the final directory can still be replaced atomically in one rename and a killed run leaves either
the previous report or none, never half of one. `DIR.partial/` also holds `state.json` (how the run was
started, with the sha256 of its inputs) and `llm.jsonl` (every LLM call made so far, verbatim), which is
what `primus tune --resume DIR` needs to replay the search without re-scoring or re-asking anything.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from primus.errors import InputError, shown
from primus.report.owned import claimable, remove_owned, write_marker

PARTIAL_SUFFIX = ".partial"
STATE_VERSION = 1
# A candidate line is a few hundred bytes; anything far larger is not ours and is refused unread.
MAX_LINE_BYTES = 1 << 20
# What a checkpoint folder holds; discarding it removes these and nothing else.
CHECKPOINT_FILES = ("state.json", "state.json.tmp", "audit.jsonl", "llm.jsonl")


def partial_dir(out_dir: Path) -> Path:
    """Where a run writing `out_dir` keeps its checkpoint."""
    return out_dir.with_name(out_dir.name + PARTIAL_SUFFIX)


def dumps_line(entry: dict[str, Any]) -> str:
    """One audit line: canonical (sorted keys, no spaces) so equal entries give equal bytes."""
    return json.dumps(entry, separators=(",", ":"), sort_keys=True) + "\n"


def iter_lines(path: Path, *, tolerate_torn_tail: bool = False) -> Iterator[dict[str, Any]]:
    """The JSON objects of a .jsonl file. With `tolerate_torn_tail`, a last line without its newline
    (a write cut short by a kill) is skipped instead of refused."""
    where = str(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(where, None, f"cannot read file ({exc.strerror or exc})") from None
    with fh:
        for n, raw in enumerate(fh, start=1):
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(where, f"line {n}", f"longer than {MAX_LINE_BYTES} bytes")
            if not raw.endswith(b"\n") and tolerate_torn_tail:
                return
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):  # bad JSON, bad UTF-8, or an integer too long to convert
                raise InputError(where, f"line {n}", "not a JSON object") from None
            if not isinstance(obj, dict):
                raise InputError(where, f"line {n}", "not a JSON object")
            yield obj


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Every candidate of a finished run, in file order. Lines must be JSON objects; their content is
    not judged here (an edited seq or number is for `primus audit verify` to report, not to refuse)."""
    return list(iter_lines(path))


class Checkpoint:
    """`DIR.partial/`: the state a run started with, and its audit lines and LLM calls so far.

    Lines are appended as the search goes and flushed in blocks (`flush`), so a kill loses at most the
    block in flight: those candidates are simply scored again on resume. Entries whose seq is below
    `recorded` are already on disk (a resumed run replays them) and are not written twice."""

    def __init__(self, root: Path, state: dict[str, Any], entries: list[dict[str, Any]],
                 llm_calls: list[dict[str, Any]]) -> None:
        self.root = root
        self.state = state
        self.entries = entries
        self.llm_calls = llm_calls
        self.recorded = len(entries)
        self._audit: IO[str] | None = (root / "audit.jsonl").open("a", encoding="utf-8")

    # ---- opening ----

    @classmethod
    def start(cls, out_dir: Path, state: dict[str, Any]) -> Checkpoint:
        """A fresh checkpoint for a new run (any earlier one for the same directory is discarded)."""
        root = partial_dir(out_dir.resolve())
        # someone else's DIR.partial is refused, untouched
        claimable(root, "checkpoint", "checkpoint", "move it away or write the run elsewhere")
        if root.exists():
            remove_owned(root, CHECKPOINT_FILES)
        root.mkdir(parents=True, exist_ok=True)
        write_marker(root, "checkpoint", CHECKPOINT_FILES)
        tmp = root / "state.json.tmp"
        tmp.write_text(json.dumps({"version": STATE_VERSION, **state}, indent=1, sort_keys=True) + "\n",
                       encoding="utf-8")
        os.replace(tmp, root / "state.json")
        (root / "audit.jsonl").touch()
        (root / "llm.jsonl").touch()
        return cls(root, state, [], [])

    @classmethod
    def reopen(cls, out_dir: Path) -> Checkpoint:
        """The checkpoint of an interrupted run, ready to be appended to."""
        root = partial_dir(out_dir.resolve())
        state = read_state(out_dir)
        audit = root / "audit.jsonl"
        entries = []
        for n, e in enumerate(iter_lines(audit, tolerate_torn_tail=True)):
            if e.get("seq") != n:
                raise InputError(str(audit), f"line {n + 1}", f"seq is {e.get('seq')!r}, expected {n}")
            entries.append(e)
        _truncate_torn_tail(audit)
        llm = root / "llm.jsonl"
        calls: list[dict[str, Any]] = []
        if llm.exists():
            calls = list(iter_lines(llm, tolerate_torn_tail=True))
            for n, call in enumerate(calls):
                _check_llm_call(call, llm, n)
            _truncate_torn_tail(llm)
        return cls(root, state, entries, calls)

    # ---- writing ----

    def append(self, entry: dict[str, Any], line: str | None = None) -> None:
        if entry["seq"] < self.recorded or self._audit is None:
            return
        self._audit.write(line if line is not None else dumps_line(entry))

    def record_llm(self, call: dict[str, Any]) -> None:
        """One LLM call, written through at once (calls are few and cost money to repeat)."""
        with (self.root / "llm.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(call, separators=(",", ":"), sort_keys=True) + "\n")

    def flush(self) -> None:
        if self._audit is not None:
            self._audit.flush()

    def close(self) -> None:
        if self._audit is not None:
            self._audit.close()
            self._audit = None

    def discard(self) -> None:
        """The run finished and its directory is written: the checkpoint is no longer needed (only the
        files it wrote are removed, and the folder if that leaves it empty)."""
        self.close()
        remove_owned(self.root, CHECKPOINT_FILES, marker=True)


def read_state(out_dir: Path) -> dict[str, Any]:
    """How an interrupted run writing `out_dir` was started (InputError when there is none). The
    checkpoint folder must carry tune's marker (a folder someone else named DIR.partial is refused
    untouched: resuming appends to it and then removes its files), and its state a mapping of this
    format (what `primus tune` recorded in it is checked by `primus.tuning.run.check_state`)."""
    root = partial_dir(out_dir.resolve())
    path = root / "state.json"
    if root.exists() or root.is_symlink():
        claimable(root, "checkpoint", "--resume", "it is not the checkpoint of an interrupted `primus tune`")
    if not path.is_file():
        hint = " (the run finished: its report is complete)" if (out_dir / "result.json").exists() else ""
        missing = f"{root} holds no state.json" if root.is_dir() else f"{root} does not exist"
        raise InputError(str(out_dir), "--resume", f"no interrupted run to resume: {missing}{hint}")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, bad JSON or UTF-8, too long an integer, too deep
        raise InputError(str(path), None, "unreadable checkpoint state") from None
    if not isinstance(state, dict):
        raise InputError(str(path), None, "not a JSON object; start the run afresh")
    if state.get("version") != STATE_VERSION:
        raise InputError(str(path), "version", f"checkpoint format {shown(state.get('version'))} is not "
                         f"{STATE_VERSION}; start the run afresh")
    return state


def _truncate_torn_tail(path: Path) -> None:
    """Cut a last line that lacks its newline, so that appending starts on a fresh line."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            fh.truncate(keep)


#: The fields of an llm.jsonl line (`RecordingClient`'s sink) and the types a replay reads them as.
LLM_CALL_FIELDS: dict[str, tuple[type, ...]] = {
    "messages": (list,), "text": (str, type(None)), "error": (str, type(None)), "tokens": (int,),
    "attempts": (int,), "fault": (dict, type(None)), "chars": (int,)}  # a fault as CallFault.to_json writes it


def _check_llm_call(call: dict[str, Any], path: Path, n: int) -> None:
    """A checkpointed LLM call a resumed run answers from is of the types `tune` writes (InputError naming the
    line and the field otherwise: a hand-edited checkpoint must not reach the replay as a traceback)."""
    for key, types in LLM_CALL_FIELDS.items():
        if key not in call:
            if key in ("messages", "tokens", "attempts"):
                raise InputError(str(path), f"line {n + 1}", f"{key} is missing")
            continue
        value = call[key]
        if type(value) not in types or (type(value) is int and value < 0):
            raise InputError(str(path), f"line {n + 1}", f"{key} is {shown(value)}, not what tune writes")
    if not all(isinstance(m, dict) and all(isinstance(v, str) for v in m.values()) for m in call["messages"]):
        raise InputError(str(path), f"line {n + 1}", "messages is not a list of role/content pairs")

