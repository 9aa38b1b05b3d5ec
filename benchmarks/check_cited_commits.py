"""Every commit primus cites must exist: look each cited hash up in the repositories it may name.

    python benchmarks/check_cited_commits.py GIT_DIR [GIT_DIR ...]

Each GIT_DIR is a clone (bare or not) of a repository primus cites (NVIDIA/Megatron-LM, AMD-AGI/Primus,
pytorch/torchtitan, ...). A cited hash is a word of 7 to 40 hexadecimal digits with at least one
letter and one digit, in the files people read (README.md, docs/, the data folders, primus/ and tests/).
Hashes of primus's own history count as found. A hash written as "Hugging Face revision HASH" is a
model repository's revision on the Hugging Face Hub, which no git clone here holds (and nothing may be
downloaded): it is listed apart, not looked up. Prints each other hash found in none of the repositories
with the files that cite it, and exits 1 when there is one. Nothing here is timed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("README.md", "docs", "primus", "stacks", "hardware", "models", "constraints", "examples", "tests")
SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".csv", ".sh"}
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
HF_REVISION = re.compile(r"Hugging Face revision ([0-9a-f]{7,40})\b")


def texts() -> Iterator[tuple[str, str]]:
    """(path relative to the repository, text) of every file people read."""
    for name in FOLDERS:
        root = REPO / name
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.suffix in SUFFIXES]
        for path in files:
            yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8", errors="replace")


def cited() -> dict[str, set[str]]:
    """hash -> the files (relative to the repository) that cite it."""
    out: dict[str, set[str]] = defaultdict(set)
    for rel, text in texts():
        for found in HASH.findall(text):
            out[found].add(rel)
    return out


def exists(git_dir: Path, commit: str) -> bool:
    result = subprocess.run(["git", "-C", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"],
                            capture_output=True, check=False)
    return result.returncode == 0


def hub_revisions() -> set[str]:
    """Hashes cited as Hugging Face Hub revisions (not git commits of any repository here)."""
    return {found for _, text in texts() for found in HF_REVISION.findall(text)}


def main(argv: list[str]) -> int:
    repos = [REPO, *(Path(a) for a in argv)]
    hub = hub_revisions()
    if hub:
        print(f"{len(hub)} Hugging Face Hub revision(s), not git commits, not looked up: {', '.join(sorted(hub))}")
    missing = {h: files for h, files in sorted(cited().items())
               if h not in hub and not any(exists(r, h) for r in repos)}
    for commit, files in missing.items():
        print(f"{commit}: in none of the repositories; cited by {', '.join(sorted(files))}")
    print(f"{len(missing)} cited hash(es) not found in {len(repos)} repositories")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
