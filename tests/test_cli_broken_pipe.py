"""`primus ... | head`: a reader that closes the pipe early stops primus quietly, with the shell's status for a
closed pipe (128 + SIGPIPE = 141, as git and coreutils), not a "file system: Broken pipe" error line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_reader_that_stops_early_gets_no_error_line() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "primus.cli.main", "enumerate",
                             str(ROOT / "examples" / "llama3.1-70b-mi300x-free.yaml"), "--format", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141
    assert first.startswith(b'{"parallel"') and b"Broken pipe" not in err and b"Traceback" not in err


def test_a_table_whose_reader_stops_early_exits_141_not_the_negative_answers_1() -> None:
    # rich's Console.on_broken_pipe exits 1 by default, which a script reads as "does not fit"
    proc = subprocess.Popen([sys.executable, "-m", "primus.cli.main", "fit",
                             str(ROOT / "examples" / "llama3.1-70b-mi300x.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # what `| true` does: the reader is gone before the table is written
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141
    assert b"Broken pipe" not in err and b"Traceback" not in err


def test_a_csv_or_json_document_cut_short_exits_141_not_0() -> None:
    # one large write that the reader cuts short returned as if complete, so a truncated document exited 0
    for fmt in ("csv", "json"):
        proc = subprocess.Popen([sys.executable, "-m", "primus.cli.main", "enumerate",
                                 str(ROOT / "examples" / "llama3.1-70b-mi300x-free.yaml"), "--format", fmt],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # what `head -1` does after its line
        err = proc.stderr.read()
        assert proc.wait(timeout=600) == 141, fmt
        assert b"Broken pipe" not in err and b"Traceback" not in err
