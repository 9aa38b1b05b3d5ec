"""What `primus tune` owns on disk, so that it never removes or replaces a file it did not write.

A directory that `tune` writes (the run directory given to `--out`, and its `DIR.partial` checkpoint)
carries a marker file, `primus-run.json`, listing every file `tune` wrote there. The marker is written
before anything else is put in the directory and read before anything in it is touched:

- a directory that does not exist, or is empty, may be written;
- a directory with the marker may be rewritten, and only the files the marker lists are replaced or
  removed (a file the user added — notes, a plot — stays, byte for byte);
- any other directory is refused (exit 2) and nothing in it is touched.

The marker's list is checked before it is trusted: only plain relative paths that stay inside the
directory (no `..`, no absolute path, no path through a symbolic link that leads out) are ever removed,
so an edited marker cannot make `tune` delete anything outside its directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from primus.errors import InputError

MARKER = "primus-run.json"
WRITER = "primus tune"
# A marker is a few kilobytes; anything far larger is not ours and is not read.
MAX_MARKER_BYTES = 1 << 20
# How many of a refused directory's files the error names.
SHOWN_FILES = 3


def listing(directory: Path, shown: int = SHOWN_FILES) -> str:
    """A few of a directory's entries for a one-line message: 'a.txt, b.yaml, notes/ and 4 more'."""
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir())
    except OSError:
        return "unreadable entries"
    text = ", ".join(repr(n)[1:-1] for n in names[:shown])  # repr escapes control characters
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


def read_marker(directory: Path, kind: str) -> dict[str, Any] | None:
    """The marker of a directory `tune` wrote as `kind` ("run" or "checkpoint"), or None."""
    path = directory / MARKER
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_MARKER_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if (not isinstance(data, dict) or data.get("written_by") != WRITER or data.get("kind") != kind
            or not isinstance(data.get("files"), list)):
        return None
    return data


def owned_files(directory: Path, kind: str) -> list[str]:
    """The files the marker says `tune` wrote, keeping only safe relative paths inside `directory`."""
    data = read_marker(directory, kind)
    if data is None:
        return []
    out = []
    for name in data["files"]:
        if isinstance(name, str) and _safe(directory, name):
            out.append(name)
    return sorted(set(out))


def _safe(directory: Path, name: str) -> bool:
    return name != MARKER and inside(directory, name)


def inside(directory: Path, name: str) -> bool:
    """Whether `name` is a plain relative path whose folder is `directory` or inside it once symbolic
    links are followed (a `charts` folder that is a link elsewhere is not)."""
    pure = PurePosixPath(name)
    if not name or pure.is_absolute() or any(part in ("", ".", "..") for part in pure.parts) or "\\" in name:
        return False
    try:
        root = directory.resolve()
        parent = (directory / pure).parent.resolve()
    except (OSError, RuntimeError):
        return False
    return parent == root or root in parent.parents


def claimable(directory: Path, kind: str, option: str,
              hint: str = "give a new or empty directory") -> list[str]:
    """Check that `tune` may write `directory` (before anything is touched); returns the files it owns
    there already ([] for a new or empty directory). Any other directory is an InputError (exit 2)."""
    if not directory.exists() and not directory.is_symlink():
        return []
    if not directory.is_dir():
        raise InputError(str(directory), option, "exists and is not a directory; nothing was touched")
    try:
        empty = next(directory.iterdir(), None) is None
    except OSError as exc:
        raise InputError(str(directory), option, f"cannot read the directory ({exc.strerror or exc})") from None
    if empty:
        return []
    if read_marker(directory, kind) is None:
        what = "run directory" if kind == "run" else "checkpoint"
        raise InputError(str(directory), option,
                         f"not empty and not a {what} written by `primus tune` (it holds {listing(directory)}); "
                         f"nothing was touched: {hint}")
    owned = owned_files(directory, kind)
    if kind == "run":
        _vouched(directory, owned, option, hint)
    return owned


def _vouched(directory: Path, owned: list[str], option: str, hint: str) -> None:
    """Refuse (InputError, nothing touched) a run directory where a file its marker lists, and a rewrite
    would replace or remove, is not byte for byte what `tune` wrote: its sha256 is not the one the run's
    SHA256SUMS records (a report edited since), or the list has none (a marker that names a file `tune`
    never wrote, or a run directory without its SHA256SUMS). A rewrite killed while moving its files in
    left its staged files' sha256 in the marker (`staged_sha256`): those are tune's own too."""
    from primus.report.manifest import MANIFEST, file_sha256, read_manifest

    present = [n for n in owned if n != MANIFEST and (directory / n).is_file() and not (directory / n).is_symlink()]
    if not present:
        return
    sums, problems = read_manifest(directory) if (directory / MANIFEST).is_file() else ({}, [f"{MANIFEST} missing"])
    staged = (read_marker(directory, "run") or {}).get("staged_sha256")
    staged = staged if isinstance(staged, dict) else {}  # a rewrite killed while moving its files in
    for name in present:
        recorded = sums.get(name)
        if file_sha256(directory / name) in {recorded, staged.get(name)} - {None}:
            continue
        why = (f"{MANIFEST} does not record it ({problems[0]})" if problems and recorded is None else
               f"{MANIFEST} does not record it" if recorded is None else
               f"it differs from its sha256 in {MANIFEST} (edited since the run)")
        shown_name = repr(name)[1:-1]
        raise InputError(str(directory), option,
                         f"{shown_name}, which {MARKER} lists, is not as `primus tune` wrote it: {why}; "
                         f"nothing was touched: move it away, or {hint}")


def check_inside(directory: Path, names: Iterable[str]) -> None:
    """Refuse (InputError, before anything is written) to write a file of a run directory whose folder
    leads out of it through a symbolic link: writing would replace a file elsewhere."""
    for name in names:
        if not inside(directory, name):
            raise InputError(str(directory / name), None, "its folder leads out of the run directory (a symbolic "
                             "link); nothing was written")


def write_marker(directory: Path, kind: str, files: Iterable[str], **extra: Any) -> None:
    """Write the marker (atomically: a reader sees the old list or the new one)."""
    doc = {"written_by": WRITER, "kind": kind, "files": sorted(set(files) - {MARKER}), **extra}
    tmp = directory / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MARKER)


def remove_owned(directory: Path, files: Iterable[str], *, marker: bool = False) -> None:
    """Remove the listed files (never a directory, never anything else), then every folder that held
    them and is now empty; with `marker`, the marker too, and `directory` itself if it is then empty."""
    folders: set[Path] = set()
    for name in files:
        if not _safe(directory, name):
            continue
        path = directory / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        parent = path.parent
        while parent != directory:
            folders.add(parent)
            parent = parent.parent
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        _rmdir_if_empty(folder)
    if marker:
        for name in (MARKER, f".{MARKER}.tmp"):
            if (directory / name).is_file():
                (directory / name).unlink()
        _rmdir_if_empty(directory)


def _rmdir_if_empty(folder: Path) -> None:
    try:
        if folder.is_dir() and not folder.is_symlink() and next(folder.iterdir(), None) is None:
            folder.rmdir()
    except OSError:
        pass


def relative_files(root: Path) -> list[str]:
    """Every file under `root`, as sorted relative POSIX paths."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


# ---- single files (export, import, calibrate) -------------------------------------------------------

# How much of an existing file is read to tell whether primus wrote it (its header is at the top).
HEAD_BYTES = 4096
# The most of an existing file read to check its seal: primus's outputs are a few kilobytes; a larger file
# was not written as it is by primus and is refused as edited.
MAX_SEALED_BYTES = 1 << 24
# The seal primus puts on a file it writes with --out: the SHA-256 of the text without it. A comment line at
# the end of a shell, YAML or TOML file; a last key of a JSON document (whose hash is taken with it empty).
SEAL_LINE = "# primus-sha256: "
SEAL_KEY = '"primus_sha256": '
_SEAL_LINE_RE = re.compile(r"^# primus-sha256: ([0-9a-f]{64})$", re.M)
_SEAL_KEY_RE = re.compile(r'"primus_sha256": "([0-9a-f]{64})"')


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal(text: str) -> str:
    """`text` with its seal, so that a later --out can tell the file was edited since (`edited`)."""
    if text.lstrip().startswith("{"):
        body = text.rstrip()
        if not body.endswith("}"):
            return text
        blank = body[:-1].rstrip() + f',\n  {SEAL_KEY}""\n}}\n'
        return blank.replace(f'{SEAL_KEY}""', f'{SEAL_KEY}"{_sha(blank)}"')
    body = text if text.endswith("\n") else text + "\n"
    return f"{body}{SEAL_LINE}{_sha(body)}\n"


def edited(content: str) -> bool:
    """Whether a file primus wrote was changed since: its seal does not match, something follows it, or it
    has none (removed, or written by a primus before the seal; refused too, since an edit cannot be ruled
    out)."""
    lines = list(_SEAL_LINE_RE.finditer(content))
    if lines:
        last = lines[-1]
        return _sha(content[:last.start()]) != last.group(1) or content[last.end():] not in ("", "\n")
    key = _SEAL_KEY_RE.search(content)
    if key is not None:
        return _sha(content[:key.start()] + f'{SEAL_KEY}""' + content[key.end():]) != key.group(1)
    return True


def replace_file(path: Path, text: str, *, written_by: Callable[[str], bool], command: str,
                 inputs: Iterable[str | Path] = (), option: str = "--out", force: bool = False) -> None:
    """Write `text` (sealed) to `path` through a temporary file beside it and a rename (a reader never sees
    half a file), after `check_replaceable`."""
    check_replaceable(path, written_by=written_by, command=command, inputs=inputs, option=option, force=force)
    text = seal(text)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(str(path), option, f"cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError(str(path), option, f"cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_replaceable(path: Path, *, written_by: Callable[[str], bool], command: str,
                      inputs: Iterable[str | Path] = (), option: str = "--out", force: bool = False) -> None:
    """An existing `path` may be replaced only when `written_by` recognises its head as this command's
    own output and its seal says it is as primus wrote it (an edit, such as the options the header invites
    the user to add, would be lost; `force` replaces it anyway), and never when it is one of the command's
    `inputs`; otherwise InputError (exit 2) and nothing is touched."""
    if not (path.exists() or path.is_symlink()):
        return
    if not path.is_file():
        raise InputError(str(path), option, "exists and is not a regular file; nothing was touched")
    for given in inputs:
        try:
            same = Path(given).exists() and path.samefile(given)
        except OSError:
            same = False
        if same:
            raise InputError(str(path), option, f"is an input of `primus {command}`; nothing was touched: "
                             "choose another --out")
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(path), option, f"cannot read the existing file ({exc.strerror or exc})") from None
    if not written_by(head):
        raise InputError(str(path), option, f"exists and was not written by `primus {command}`; nothing was "
                         "touched: remove it yourself or choose another --out")
    if force:
        return
    try:
        with path.open("rb") as fh:
            content = fh.read(MAX_SEALED_BYTES + 1).decode("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(str(path), option, f"cannot read the existing file ({exc.strerror or exc})") from None
    if len(content) > MAX_SEALED_BYTES or edited(content):
        raise InputError(str(path), option, f"was edited since `primus {command}` wrote it; nothing was touched: "
                         "give --force to replace it, or choose another --out")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
