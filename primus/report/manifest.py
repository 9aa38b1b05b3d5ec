"""`SHA256SUMS` at the root of a run directory: every file `primus tune` wrote there, with its sha256.

`inputs/SHA256SUMS` vouches for the inputs the audit recomputes from; this list vouches for everything
else (the result, the audit log, the LLM transcripts, the versions, the report and its charts), so that
deleting or editing any of them is named by `primus audit verify`, not only the ones it recomputes. It
is written last, from what is in the directory, so a file a later primus adds to its runs is covered
without a list of names to keep up to date here. The format is `sha256sum`'s (`<hex>  <path>`), so
`sha256sum -c SHA256SUMS` checks it too.

A file that is not on the list is "not part of the run": a note (someone's notes beside the report are
harmless), except inside the folders the run writes and the report reads (`inputs/`, `llm/`,
`charts/`), where an extra file would change what is shown or checked, and is a difference.

The list is a record, not a signature: whoever can edit the files can edit the list. What makes a run
trustworthy is that `primus audit verify` recomputes the numbers and re-renders the report from the
recorded inputs; the list makes sure no file escapes that and names the one that changed.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

MANIFEST = "SHA256SUMS"
# Folders whose every file the report or the audit reads: an unlisted file there is a difference.
RUN_FOLDERS = ("inputs", "llm", "charts")
_LINE = re.compile(r"([0-9a-f]{64})  (.+)")
_CHUNK = 1 << 20


def shown(rel: str) -> str:
    """A path as printed in a difference: as is, or quoted when it holds control characters."""
    return rel if rel.isprintable() else ascii(rel)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def present_files(root: Path) -> list[str]:
    """Every file under `root` (symbolic links included, not followed) but the list itself, as sorted
    relative POSIX paths."""
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        base = Path(folder)
        names = files + [d for d in dirs if (base / d).is_symlink()]
        for name in names:
            rel = (base / name).relative_to(root).as_posix()
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def _write(root: Path, sums: dict[str, str]) -> None:
    text = "".join(f"{digest}  {rel}\n" for rel, digest in sorted(sums.items()))
    fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, root / MANIFEST)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_manifest(root: Path) -> None:
    """List every file now in the run directory `root` (the last step of writing a run)."""
    _write(root, {rel: file_sha256(root / rel) for rel in present_files(root)})


def update_manifest(root: Path, rels: Iterable[str]) -> None:
    """Record the new sha256 of files just rewritten (`primus report DIR`). A directory without a list
    gets none: its other files cannot be vouched for after the fact."""
    if not (root / MANIFEST).is_file():
        return
    sums, problems = read_manifest(root)
    if problems:
        return  # a damaged list stays as it is, for `primus audit verify` to name
    _write(root, {**sums, **{rel: file_sha256(root / rel) for rel in rels}})


def _bad_path(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return (rel.startswith("/") or "\\" in rel or not parts or any(p in ("", ".", "..") for p in parts)
            or rel == MANIFEST or not rel.isprintable())


def read_manifest(root: Path) -> tuple[dict[str, str], list[str]]:
    """The recorded path → sha256, and the lines that are not `<sha256>  <relative path>`."""
    sums: dict[str, str] = {}
    problems = []
    try:
        text = (root / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{MANIFEST}: unreadable ({type(exc).__name__})"]
    for n, line in enumerate(text.splitlines(), start=1):
        m = _LINE.fullmatch(line)
        if m is None or _bad_path(m.group(2)):
            problems.append(f"{MANIFEST} line {n}: not '<sha256>  <relative path>'")
        elif m.group(2) in sums:
            problems.append(f"{MANIFEST} line {n}: {shown(m.group(2))} is listed twice")
        else:
            sums[m.group(2)] = m.group(1)
    return sums, problems


def edited_sources(root: Path, rendered: Callable[[str], bool], listed: bool = False) -> list[str]:
    """The listed files a re-render reads that are missing or whose sha256 differs from the list: every
    listed file but the ones `rendered` says the report writes, and the list's own damaged lines. With no
    list: empty for a run written by a primus older than it, the list's absence when `listed` (the run's
    marker names it among the files it wrote, so it was deleted)."""
    if not (root / MANIFEST).is_file():
        return [f"{MANIFEST} is missing, though the run's marker lists it (deleted since the run)"] if listed else []
    sums, problems = read_manifest(root)
    out = list(problems)
    for rel, recorded in sorted(sums.items()):
        path = root / rel
        if rendered(rel):
            continue
        if path.is_symlink() or not path.is_file():
            out.append(f"{shown(rel)} is missing or not a plain file")
        elif file_sha256(path) != recorded:
            out.append(f"{shown(rel)} differs from its sha256 in {MANIFEST} (edited since the run)")
    return out


def check_manifest(root: Path) -> tuple[list[str], list[str]]:
    """(differences, notes): every listed file missing, replaced by a link or edited, every unlisted
    file in a folder the run writes, and a missing or damaged list; unlisted files elsewhere are notes."""
    if not (root / MANIFEST).is_file():
        return [f"{MANIFEST}: missing, so the run's files cannot be checked (deleted, or written by a primus "
                "older than this list)"], []
    sums, diffs = read_manifest(root)
    for rel, recorded in sorted(sums.items()):
        path = root / rel
        if path.is_symlink():
            diffs.append(f"{shown(rel)}: a symbolic link, not the file the run wrote")
        elif not path.is_file():
            diffs.append(f"{shown(rel)}: missing (listed in {MANIFEST})")
        else:
            digest = file_sha256(path)
            if digest != recorded:
                diffs.append(f"{shown(rel)}: sha256 {digest} differs from the recorded {recorded} (edited since "
                             "the run)")
    notes = []
    for rel in present_files(root):
        if rel in sums:
            continue
        if rel.split("/", 1)[0] in RUN_FOLDERS:
            diffs.append(f"{shown(rel)}: not part of the run (not in {MANIFEST}), in a folder the report reads")
        else:
            notes.append(f"{shown(rel)}: not part of the run (not in {MANIFEST}); not checked")
    return diffs, notes


__all__ = ["MANIFEST", "check_manifest", "present_files", "read_manifest", "update_manifest", "write_manifest"]
