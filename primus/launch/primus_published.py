"""The published Primus model files primus ships a copy of, for an import without a Primus checkout.

An experiment names its model file (`model: deepseek_v3.yaml`); what that file sets through its `extends:`
chain is part of the job: the architecture, the tokenizer (hence the vocabulary: Primus's grok1.yaml runs
Mixtral's tokenizer, its gpt_oss_120B.yaml DeepSeek-V2's), `qk_layernorm`, the MoE dispatcher, the grouped
GEMM, the fused permutation, a pinned expert-parallel size. Without a checkout an import used to stand the
catalog model in for the file with a hand-picked subset of those settings, so one experiment read two ways
(review 45: grok1 at 146.4 GiB with a checkout, 154.1 without). Instead, the files `MODEL_FILES` names and
every file their `extends:` chains reach are shipped as published at AMD-AGI/Primus `PUBLISHED_COMMIT`
(their keys and values; comments dropped) in a checkout-shaped folder, `PUBLISHED_ROOT`, and read exactly as
a checkout's files are: the import is the same with or without one.

`python -m primus.launch.primus_published ROOT` rewrites the folder from a checkout at that commit.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Final

import yaml

from primus.launch.common import Collector
from primus.launch.primus_models import MODEL_FILES, MODELS_DIR, ModelFile, read_model_file
from primus.yamlio import loads_yaml, read_text

#: The AMD-AGI/Primus commit the shipped files were read at (2026-08-22).
PUBLISHED_COMMIT: Final = "fd1eeabbad15135e3702094087e96142b4b4eacb"
#: A folder shaped like a Primus checkout holding only those files.
PUBLISHED_ROOT: Final = Path(__file__).resolve().parent / "data" / "primus_published"


def published_model_file(name: str, where: str, out: Collector) -> ModelFile | None:
    """The shipped copy of Primus's model file `name`, merged through its `extends:` chain as a checkout's
    is (`read_model_file`); None for a file primus does not ship."""
    if Path(name).name != name or name not in MODEL_FILES.values():
        return None
    return read_model_file(PUBLISHED_ROOT, name, where, out)


def write_published(root: Path) -> list[str]:
    """Rewrite `PUBLISHED_ROOT` from a Primus checkout `root` (at `PUBLISHED_COMMIT`): every model file
    `MODEL_FILES` names and the files it extends, as YAML of their keys and values. Returns their names."""
    out = Collector()
    names: set[str] = set()
    for name in MODEL_FILES.values():
        found = read_model_file(root, name, str(root / MODELS_DIR / name), out)
        if found is None:
            raise SystemExit(f"{name} is not in {root / MODELS_DIR}")
        names.update(found.chain)
    target = PUBLISHED_ROOT / MODELS_DIR
    if PUBLISHED_ROOT.exists():
        shutil.rmtree(PUBLISHED_ROOT)
    target.mkdir(parents=True)
    for name in sorted(names):
        source = root / MODELS_DIR / name
        doc = loads_yaml(read_text(source), str(source))
        text = (f"# {name} as published at AMD-AGI/Primus {PUBLISHED_COMMIT}\n"
                f"# (primus/configs/models/megatron/{name}; keys and values only)\n")
        (target / name).write_text(text + yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    return sorted(names)


if __name__ == "__main__":  # pragma: no cover - a maintainer's tool, run against a Primus checkout
    print("\n".join(write_published(Path(sys.argv[1]))))
