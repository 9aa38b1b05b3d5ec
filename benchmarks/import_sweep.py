"""Import every launch file the frameworks publish, as a new user would, and tabulate the outcome.

    python benchmarks/import_sweep.py --megatron PATH/Megatron-LM --primus PATH/Primus \\
        --torchtitan PATH/torchtitan [--details out.csv]

Each path is a checkout (a plain directory tree). The files swept (issue 21's table):

- Megatron-LM ``examples/{gpt3,gptoss,llama,megatron_fsdp,mixtral}/*.sh`` (launch scripts) and
  ``examples/post_training/modelopt/conf/*/*.sh`` (model definitions);
- Primus ``examples/megatron/configs/{MI300X,MI325X,MI355X}/*.yaml`` (experiments; the model files
  are read from the same checkout);
- torchtitan ``torchtitan/models/*/train_configs/*.toml`` (TOML releases), and with ``--torchtitan-head``
  every config function of ``torchtitan/models/*/config_registry.py`` (torchtitan after #2386).

``--hardware`` is taken from the folder name (MI300X → mi300x, ...; h100-80gb otherwise) and
``--nodes 1`` is given whenever the file does not state its size. A row is imported (a job, or a
model for a definition file), refused as "not supported" (exit 2, a hybrid or non-decoder model), set
apart (a right refusal that is not about a model: "not a config", "not a model definition", "not an
experiment"), or failed (any other refusal, with its reason). Nothing here is timed; the outcome does not depend on
the machine.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from primus.errors import InputError
from primus.launch import LaunchConfig, import_launch
from primus.specs.params import count_params

sys.path.insert(0, str(Path(__file__).parent))
from megatron_validate import ExportRow, export_rows  # a sibling module of this script

HARDWARE = {"MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x"}
DEFAULT_HARDWARE = "h100-80gb"
GPUS_PER_NODE = 8  # every accelerator in HARDWARE and DEFAULT_HARDWARE has 8 per node
MEGATRON_GLOBS = ("examples/gpt3/*.sh", "examples/gptoss/*train*.sh", "examples/llama/*.sh",
                  "examples/megatron_fsdp/train_*.sh", "examples/mixtral/*.sh",
                  "examples/post_training/modelopt/conf/*/*.sh")
PRIMUS_GLOBS = tuple(f"examples/megatron/configs/{gpu}/*.yaml" for gpu in HARDWARE)
TORCHTITAN_GLOBS = ("torchtitan/models/*/train_configs/*.toml", "torchtitan/models/*/*/train_configs/*.toml")


@dataclass(frozen=True)
class Row:
    corpus: str
    path: str
    outcome: str  # imported | model | not supported | set apart | failed
    model: str
    params: int | None
    detail: str


#: Refusals that are right and are not about a model: a registry helper that is no config, a conf file
#: that holds parallel sizes and names the model's own file, a YAML that is no Primus experiment (a
#: quantization recipe, a LoRA overlay, a template). Counted apart from "failed".
SET_APART = ("not a config:", "not a model definition:", "not an experiment:")


def _outcome(reason: str) -> str:
    if "not supported" in reason:
        return "not supported"
    return "set apart" if any(words in reason for words in SET_APART) else "failed"


def _hardware(path: Path) -> str:
    return next((hw for folder, hw in HARDWARE.items() if folder in path.parts), DEFAULT_HARDWARE)


def _import_sized(kind: str, path: Path, kwargs: dict[str, Any]) -> LaunchConfig:
    """Import with the file's own world size; one node when it states none; the fewest nodes that hold
    its layout when that is larger (a script's NUM_NODES=1 placeholder)."""
    nodes: int | None = None
    for _ in range(3):
        try:
            return import_launch(kind, path, hardware=_hardware(path), nodes=nodes, **kwargs)
        except InputError as exc:
            found = re.search(r"= (\d+) does not divide", exc.reason)
            if "world size" in exc.reason:
                nodes = 1
            elif found is not None:
                nodes = -(-int(found.group(1)) // GPUS_PER_NODE)
            else:
                raise
    return import_launch(kind, path, hardware=_hardware(path), nodes=nodes, **kwargs)


def _one(corpus: str, kind: str, path: Path, root: Path) -> tuple[Row, LaunchConfig | None]:
    """The row of one file, and what it imported as (None when refused)."""
    rel = str(path.relative_to(root))
    kwargs = {"primus_root": root} if kind == "primus" else {}
    try:
        config = _import_sized(kind, path, kwargs)
    except InputError as exc:
        outcome = _outcome(exc.reason)
        return Row(corpus, rel, outcome, "", None, f"{exc.field}: {exc.reason}" if exc.field else exc.reason), None
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], rel)
    ref = config.job["model"]
    name = ref if isinstance(ref, str) else f"{ref.get('name', '?')} (like {ref['base']})"
    row = Row(corpus, rel, "model" if config.model_only else "imported", name, count_params(model).total, "")
    return row, config


def _registry_rows(root: Path) -> list[Row]:
    """Every config function of torchtitan's config_registry.py files (torchtitan after #2386)."""
    import ast

    from primus.launch.torchtitan import import_torchtitan_registry

    rows: list[Row] = []
    for path in sorted(root.glob("torchtitan/models/*/config_registry.py")):
        tree = ast.parse(path.read_text())
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")):
            rel = f"{path.relative_to(root)}:{fn.name}"
            try:
                try:
                    config = import_torchtitan_registry(path, fn.name, hardware=DEFAULT_HARDWARE, nodes=1)
                except InputError as exc:  # a config for fewer GPUs than a node: its own size
                    found = re.search(r"= (\d+) but the job has", exc.reason)
                    if found is None:
                        raise
                    config = import_torchtitan_registry(path, fn.name, hardware=DEFAULT_HARDWARE,
                                                        gpus=int(found.group(1)))
            except InputError as exc:
                outcome = _outcome(exc.reason)
                rows.append(Row("torchtitan HEAD", rel, outcome, "", None, f"{exc.field}: {exc.reason}"))
                continue
            from primus.catalog.models import resolve_model

            ref = config.job["model"]
            name = ref if isinstance(ref, str) else f"{ref.get('name', '?')} (like {ref['base']})"
            total = count_params(resolve_model(ref, rel)).total
            rows.append(Row("torchtitan HEAD", rel, "imported", name, total, ""))
    return rows


def sweep(megatron: Path | None, primus: Path | None, torchtitan: Path | None,
          torchtitan_head: Path | None = None, imported: dict[str, LaunchConfig] | None = None) -> list[Row]:
    """Every file's row; `imported`, when given, receives what each file imported as, by row path."""
    rows: list[Row] = []
    for corpus, kind, root, globs in (("Megatron-LM", "megatron", megatron, MEGATRON_GLOBS),
                                      ("Primus", "primus", primus, PRIMUS_GLOBS),
                                      ("torchtitan", "torchtitan", torchtitan, TORCHTITAN_GLOBS)):
        if root is None:
            continue
        for pattern in globs:
            for path in sorted(root.glob(pattern)):
                row, config = _one(corpus, kind, path, root)
                rows.append(row)
                if imported is not None and config is not None:
                    imported[f"{corpus}:{row.path}"] = config
    if torchtitan_head is not None:
        rows += _registry_rows(torchtitan_head)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron", type=Path)
    parser.add_argument("--primus", type=Path)
    parser.add_argument("--torchtitan", type=Path, help="a torchtitan checkout with TOML configs (v0.1 to v0.2.2)")
    parser.add_argument("--torchtitan-head", type=Path, help="a torchtitan checkout with config_registry.py files")
    parser.add_argument("--details", type=Path, help="write every row here (CSV)")
    parser.add_argument("--validate-with", metavar="PYTHON",
                        help="an interpreter that imports Megatron-LM (3.12, torch, triton): export every imported "
                             "Megatron-LM and Primus job --to megatron and run the --megatron checkout's parse_args "
                             "and validate_args on it")
    parser.add_argument("--validate-details", type=Path, help="write every export's verdict here (CSV)")
    parser.add_argument("--validate-fit", action="store_true",
                        help="ask `primus fit` before each export, as `primus export` does (seconds per job); "
                             "without it only the pipeline split is checked")
    args = parser.parse_args(argv)
    if args.validate_with and args.megatron is None:
        parser.error("--validate-with needs --megatron (the checkout whose arguments module is run)")
    imported: dict[str, LaunchConfig] = {}
    rows = sweep(args.megatron, args.primus, args.torchtitan, args.torchtitan_head,
                 imported if args.validate_with else None)
    counts = Counter((r.corpus, r.outcome) for r in rows)
    print("| corpus | files | imported | model only | not supported | set apart | failed |")
    print("|---|---|---|---|---|---|---|")
    for corpus in dict.fromkeys(r.corpus for r in rows):
        total = sum(v for (c, _), v in counts.items() if c == corpus)
        print(f"| {corpus} | {total} | {counts[(corpus, 'imported')]} | {counts[(corpus, 'model')]} | "
              f"{counts[(corpus, 'not supported')]} | {counts[(corpus, 'set apart')]} | {counts[(corpus, 'failed')]} |")
    reasons = Counter((r.corpus, r.outcome, r.detail[:110]) for r in rows if r.outcome in ("failed", "set apart"))
    for (corpus, outcome, reason), n in reasons.most_common():
        print(f"  {corpus} ({outcome}): {n} x {reason}")
    if args.details:
        with args.details.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["corpus", "path", "outcome", "model", "params", "detail"])
            for r in rows:
                writer.writerow([r.corpus, r.path, r.outcome, r.model, r.params or "", r.detail])
    if args.validate_with:
        _validation_table(export_rows({k: c for k, c in imported.items() if not k.startswith("torchtitan")},
                                      args.validate_with, args.megatron, args.validate_fit), args.validate_details)
    return 0


def _validation_table(rows: list[ExportRow], details: Path | None) -> None:
    """Megatron-LM's verdict on the exports, per corpus, with every refusal's reason."""
    print()
    print("| corpus | imported | of them model definitions | fit refuses the job (checked all the same) | "
          "export refused | Megatron-LM validates | Megatron-LM refuses |")
    print("|---|---|---|---|---|---|---|")
    for corpus in dict.fromkeys(r.corpus for r in rows):
        mine = [r for r in rows if r.corpus == corpus]
        models = sum(r.fit.startswith("not checked") for r in mine)  # model definitions; "not asked": no fit
        unfit = sum(r.fit.startswith("refuses") for r in mine)
        refused = sum(r.export.startswith("refused") for r in mine)
        valid = sum(r.megatron == "valid" for r in mine)
        print(f"| {corpus} | {len(mine)} | {models} | {unfit} | {refused} | {valid} | "
              f"{sum(r.megatron not in ('', 'valid') for r in mine)} |")
    for r in rows:
        if r.megatron not in ("", "valid") or r.export.startswith("refused"):
            print(f"  {r.corpus}: {r.path}: {r.export if r.export.startswith('refused') else r.megatron} ({r.fit})")
    if details:
        with details.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["corpus", "path", "fit", "export", "megatron"])
            for r in rows:
                writer.writerow([r.corpus, r.path, r.fit, r.export, r.megatron])


if __name__ == "__main__":
    sys.exit(main())
