"""``source FILE`` / ``. FILE`` in a launch script: the file's statements are read in place, never run.

Launch scripts keep shared settings in another file (``. `pwd`/CONFIG.sh`` in Megatron-LM's
``examples/academic_paper_scripts/sc21/``, ``source "${SCRIPT_DIR}/conf/arguments.sh"``). Bash would
run that file in the same shell; primus reads its statements as if they were written at that line,
with the same static rules (`primus.launch.shell`). The path is taken relative to the script's own
directory: a literal path, or one that starts with the current directory or the script's directory
(`` `pwd` ``, ``$(pwd)``, ``$PWD``, ``$(dirname "$0")``, ``${BASH_SOURCE%/*}``), since the launch is
taken to run from the script's folder (said in a note). Anything else (a variable primus cannot
resolve, a file outside the script's folder tree that does not exist) is noted and skipped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

#: Prefixes that name the current directory or the script's own directory.
HERE: Final = re.compile(r'^(?:`pwd`|\$\(pwd\)|\$\{?PWD\}?|\$\(dirname\s+"?\$\{?0\}?"?\)'
                         r'|\$\{BASH_SOURCE(?:\[0\])?%/\*\}|\$\(dirname\s+"?\$\{?BASH_SOURCE(?:\[0\])?\}?"?\))/')
#: Nested sources followed at most (a file sourcing itself stops here).
MAX_SOURCES: Final = 16


def split_here(arg: str) -> str:
    """A ``source`` argument (quotes removed) without a leading current- or script-directory prefix."""
    return HERE.sub("", arg.strip().strip('"').strip("'"))


def sourced_path(text: str, base_dir: Path | None) -> tuple[Path | None, str]:
    """The file a ``source`` argument names (after `split_here` and expansion), or None and why it is
    not read."""
    if base_dir is None:
        return None, "the script's folder is not known"
    if not text or "$" in text or "`" in text:
        return None, "its path is not known without running the script"
    path = Path(text) if Path(text).is_absolute() else base_dir / text
    if not path.is_file():
        return None, f"{path} {'is a folder, not a file' if path.is_dir() else 'does not exist'}"
    return path, ""
