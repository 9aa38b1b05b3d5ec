"""Assemble primus/fidelity/data/heldout_bridge.csv: the Megatron-Bridge pre-training rows that NVIDIA
published in its performance tables but that are not in the development set (issue 19's held-out check).

Run (where the Megatron-Bridge mirror exists; CI has none, so the CSV is committed as data):

    python benchmarks/heldout_bridge.py [--mirror DIR] [--dev primus/fidelity/data/runs_dev.csv] [--out CSV]

What it does, and why each rule:

- reads `docs/performance-summary.md` and `docs/performance-summary-archive.md` of the bare mirror with
  `git show COMMIT:path`; for each release section ("## 26.04 NeMo Container") it uses the newest commit of
  `git log -- docs/performance-summary*.md` that carries that section (printed per release), so a number
  NVIDIA corrected later is read corrected;
- keeps only "Pre-Training Performance" tables (no SFT, no LoRA);
- writes each table row in the development set's schema and with the conventions of the dev rows of the
  same release (run_id `MB<release>-DGX-<system>-<Model>-<precision>`, `fp8` plus `fp8_recipe_unknown` for
  a bare "FP8", `-CS`/`-MX` suffixes and `mxfp8` in 25.11, FP8 inferred for 25.09 which prints no
  precision, VP/EP "n/a" as 1, FSDP > 0 as `fsdp`, else `dist_opt` assumed, sp = TP > 1 assumed,
  `GA=` and `ga_inconsistent` where the table prints GA, architecture as the dev rows of the same model
  give it, checked against the model catalog);
- a cell "a (b)" is two runs: the main one and the parenthesized variant (25.09/25.11: another FP8
  granularity, in 25.09 sometimes another layout); a layout cell without parentheses is shared, a
  measured cell without them belongs to the main run only (as the dev set splits them);
- drops the rows the dev set already holds, matched by (release, GPU, model, precision, #GPUs, TP, PP,
  CP, VP, EP, GBS, MBS, sequence length), and skips models the catalog lacks (no invented architecture).

Everything it writes comes from the tables; it prints which rows matched dev rows, which were skipped
and why, and how many it wrote per release.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from primus.catalog.models import catalog_models, resolve_model  # noqa: E402

MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
DEV = ROOT / "primus/fidelity/data/runs_dev.csv"
OUT = ROOT / "primus/fidelity/data/heldout_bridge.csv"
REPO_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob"

#: table model name -> (catalog slug, run_id spelling); the spellings are the dev rows'
MODELS: dict[str, tuple[str, str]] = {
    "LLAMA3_8B": ("llama3-8b", "Llama3-8B"),
    "LLAMA3_70B": ("llama3-70b", "Llama3-70B"),
    "LLAMA3.1_405B": ("llama3.1-405b", "Llama3.1-405B"),
    "DeepSeekV3": ("deepseek-v3", "DeepSeek-V3"),
    "GPT OSS 120B": ("gpt-oss-120b", "GPT-OSS-120B"),
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", "Qwen3-30B-A3B"),
    "Qwen3_235B_a22B": ("qwen3-235b-a22b", "Qwen3-235B-A22B"),
    "Kimi_K2": ("kimi-k2", "Kimi-K2"),
}
#: table system -> (gpu slug, GPUs per node as the dev rows count them, the dev rows' system note)
SYSTEMS: dict[str, tuple[str, int, str]] = {
    "DGX-GB300": ("gb300", 4, "GB300 NVL72 (4 GPUs/compute tray, 72-GPU NVLink domain)"),
    "DGX-GB200": ("gb200", 4, "GB200 NVL72 (4 GPUs/compute tray, 72-GPU NVLink domain)"),
    "DGX-B300": ("b300", 8, "DGX B300"),
    "DGX-B200": ("b200", 8, "DGX B200"),
    "DGX-H100": ("h100-80gb", 8, "NVLink4 intra-node; IB inter-node (DGX H100)"),
}
#: precision label -> (precision column, extra flags), the dev rows' reading of each label
PRECISIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "BF16": ("bf16", ()),
    "FP8": ("fp8", ("fp8_recipe_unknown",)),  # 26.x: the table does not say which FP8 recipe
    "FP8-CS": ("fp8", ()),  # 25.11: current scaling
    "FP8-MX": ("mxfp8", ()),
    "MXFP8": ("mxfp8", ()),
    "NVFP4": ("nvfp4", ()),
}
ARCH = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "experts", "topk")
KEY = ("source", "gpu", "model", "precision", "num_gpus", "tp", "pp", "cp", "vp", "ep", "gbs", "mbs", "seq_len")
_FOOTNOTE = re.compile(r"\[\^([^\]]+)\]")
_PAREN = re.compile(r"^(.*?)\s*\((.*)\)\s*$")
_RELEASE = re.compile(r"^## (\d+\.\d+(?:\.\d+)?) NeMo Container")


@dataclass
class TableRow:
    """One data row of a published table: its release, heading, the cells by header and where it is."""

    release: str
    heading: str  # "Model: X" or "System: X"
    cells: dict[str, str]
    file: str
    commit: str
    line: int


def git_show(mirror: Path, commit: str, path: str) -> str | None:
    done = subprocess.run(["git", "-C", str(mirror), "show", f"{commit}:{path}"], capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def newest_commits(mirror: Path) -> dict[str, tuple[str, str]]:
    """release -> (commit, file): the newest commit touching the summaries whose file carries the section."""
    log = subprocess.run(["git", "-C", str(mirror), "log", "--format=%H", "--", *FILES],
                         capture_output=True, text=True, check=True).stdout.split()
    found: dict[str, tuple[str, str]] = {}
    for commit in log:  # newest first
        for path in FILES:
            for line in (git_show(mirror, commit, path) or "").splitlines():
                m = _RELEASE.match(line)
                if m and m.group(1) not in found:
                    found[m.group(1)] = (commit, path)
    return found


def pretraining_rows(text: str, release: str, commit: str, path: str) -> list[TableRow]:
    """The data rows of `release`'s pre-training tables in one file."""
    rows: list[TableRow] = []
    inside = pretrain = False
    heading = ""
    header: list[str] | None = None
    for n, line in enumerate(text.splitlines(), 1):
        m = _RELEASE.match(line)
        if m or line.startswith("## "):
            inside = bool(m) and m.group(1) == release
            pretrain, header = False, None
            continue
        if not inside:
            continue
        if line.startswith("### "):
            pretrain, header = "Pre-Training" in line, None
        elif line.startswith("#### "):
            heading, header = line[5:].strip(), None
        elif pretrain and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set("-: "):
                rows.append(TableRow(release, heading, dict(zip(header, cells, strict=True)), path, commit, n))
    return rows


def footnote_texts(text: str) -> dict[str, str]:
    """'[^name]: text' definitions of a file, text cut at its first sentence (the note a row cites)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^\[\^([^\]]+)\]:\s*(.+)$", text, re.M):
        body = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", m.group(2)).split(". ")[0].strip().rstrip(".")
        out[m.group(1)] = body
    return out


def split_cell(cell: str) -> tuple[str, str | None]:
    """'661[^note]' -> ('661', None); '37556 (36108)' -> ('37556', '36108')."""
    cell = _FOOTNOTE.sub("", cell).strip()
    m = _PAREN.match(cell)
    return (m.group(1).strip(), m.group(2).strip()) if m else (cell, None)


def model_tag(name: str) -> tuple[str, str | None]:
    """'DeepSeekV3 (w/o MTP)' -> ('DeepSeekV3', 'w/o MTP')."""
    m = _PAREN.match(name)
    return (m.group(1).strip(), m.group(2).strip()) if m else (name.strip(), None)


def dev_templates(dev: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """model slug -> the architecture cells, model notes and model flags of its first Megatron-Bridge dev row."""
    out: dict[str, dict[str, str]] = {}
    for r in dev:
        if not r["source"].startswith("megatron-bridge-") or r["model"] in out:
            continue
        parts = r["notes"].split("; ")
        pre = [p for p in parts[:next(i for i, p in enumerate(parts) if p.startswith("MBridge"))]
               if not p.startswith(("GA=", "split from", "DP*MBS*GA"))]
        arch = r["notes"][r["notes"].index("arch: "):]
        flags = [f for f in r["flags"].split(";") if f in ("mla", "arch_unverified", "ideal_routing")]
        out[r["model"]] = {**{k: r[k] for k in ARCH}, "pre": "; ".join(pre), "arch": arch, "flags": ";".join(flags)}
    return out


def catalog_mismatch(slug: str, t: dict[str, str]) -> str | None:
    """Why the dev rows' architecture of `slug` disagrees with the catalog, or None."""
    m = resolve_model(slug, "catalog")
    pairs = {"layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_attention_heads,
             "vocab": m.vocab_size, "experts": m.num_experts, "topk": m.moe_router_topk}
    bad = [f"{k} {t[k]} vs {v}" for k, v in pairs.items() if (str(v) if v else "") != t[k]]
    return ", ".join(bad) or None


def _int(text: str) -> int:
    return 1 if text.lower() == "n/a" else int(text)


def build(row: TableRow, variant: bool, split: bool, templates: dict[str, dict[str, str]],
          footnotes: dict[str, str]) -> dict[str, str]:
    """The dev-schema row of one table row (its main run, or with `variant` its parenthesized one; `split`:
    the row has one)."""
    c = dict(row.cells)
    system = c.pop("System", None) or row.heading.removeprefix("System: ").strip()
    name, tag = model_tag(c.pop("Model", None) or row.heading.removeprefix("Model: "))
    slug, spelled = MODELS[name]
    gpu, per_node, sys_note = SYSTEMS[system]
    measured = ("Tokens / sec / GPU", "Model TFLOP / sec / GPU")
    vals: dict[str, str | None] = {}
    for k, cell in c.items():
        main, alt = split_cell(cell)
        vals[k] = (alt if alt is not None else (None if k in measured else main)) if variant else main
    flags: list[str] = []
    notes: list[str] = []
    if "Precision" in vals:
        label = vals["Precision"] or ""
        precision, extra = PRECISIONS[label]
        flags += extra
    else:  # 25.09 prints no precision: FP8, its parenthesized runs another granularity (footnote)
        label = "FP8"
        if variant:
            precision = "fp8-block" if gpu == "h100-80gb" else "mxfp8"
        else:
            precision = "fp8"
            flags += ["fp8_recipe_unknown", "precision_inferred"]
            notes.append("FP8 assumed: 25.09 table has no precision column")
    num_gpus, tp, pp, cp = (int(vals[k] or "") for k in ("#-GPUs", "TP", "PP", "CP"))
    vp, ep = _int(vals["VP"] or ""), _int(vals["EP"] or "")
    mbs, gbs, seq = (int(vals[k] or "") for k in ("MBS", "GBS", "Sequence Length"))
    fsdp = int(vals.get("FSDP") or 0)
    dp = num_gpus // (tp * pp * cp)
    t = templates[slug]
    moe = bool(t["experts"])
    ga = vals.get("GA")
    if ga is not None:
        notes.insert(0, f"GA={ga}")
        if dp * mbs * int(ga) != gbs:
            flags.append("ga_inconsistent")
            notes.insert(1, f"DP*MBS*GA={dp * mbs * int(ga)} != GBS={gbs}")
    illegal = moe and (tp * cp * dp) % ep != 0  # Megatron: EP divides TP x CP x DP (the ranks of one stage)
    if illegal:
        flags.append("ep_inconsistent")
        notes.append(f"EP {ep} does not divide TP*CP*DP={tp * cp * dp}: the printed layout cannot run; not projected")
    sp = tp > 1
    if sp:
        flags.append("sp_assumed")
    flags += [f for f in t["flags"].split(";") if f]
    if tag == "tokendrop":
        flags.append("tokendrop")
    if tag == "w/ MTP":
        flags.append("mtp")
    if t["pre"]:
        notes.append(t["pre"])
    notes += [f"MBridge {row.release} container", f"system {system}", sys_note]
    if tag:
        notes.append(f"model tag: {tag}")
    if variant:
        notes.append("parenthesized variant: same parallel config, alternate FP8 recipe" if "Precision" in vals
                     else "parenthesized value = different quantization granularity (footnote)")
    for name in _FOOTNOTE.findall(" ".join(row.cells.values())):
        notes.append(f"table footnote: {footnotes.get(name, name)}")
        if "regression" in footnotes.get(name, ""):
            flags.append("source_known_regression")  # NVIDIA's own footnote: not the framework's usual speed
    if slug == "kimi-k2":
        notes.append("Muon optimizer")
    notes.append(t["arch"])
    run_id = f"MB{row.release}-{system}-{spelled}-{label}"
    if "Precision" not in vals and split:  # 25.09: the dev set splits a parenthesized run off by precision
        flags.append("split_run_id")
        layout = any(split_cell(v)[1] is not None for k, v in c.items() if k not in measured)
        notes.insert(2 if "ga_inconsistent" in flags else 1, f"split from input run_id '{run_id}' (its rows differ "
                     f"in precision{' and layout' if layout else ''})")
        if variant:
            run_id += "~blockwise" if precision == "fp8-block" else f"~{precision}"
    tokens = vals["Tokens / sec / GPU"]
    return {
        "run_id": run_id, "source": f"megatron-bridge-{row.release}",
        "url": f"{REPO_URL}/{row.commit}/{row.file}",
        "confidence": "high" if gpu == "h100-80gb" else "high (Blackwell)",
        "model": slug, **{k: t[k] for k in ARCH}, "gpu": gpu, "num_gpus": str(num_gpus),
        "gpus_per_node": str(per_node), "precision": precision, "tp": str(tp), "pp": str(pp), "vp": str(vp),
        "cp": str(cp), "ep": str(ep), "etp": "" if moe else "1", "dp": str(dp), "sp": "true" if sp else "false",
        "sharding": "fsdp" if fsdp else "dist_opt", "sharding_assumed": "false" if fsdp else "true",
        "mbs": str(mbs), "gbs": str(gbs), "seq_len": str(seq), "recompute": "", "recompute_assumed": "",
        "tokens_per_s_per_gpu": tokens or "", "step_time_s": "",
        "model_tflops_per_gpu": vals["Model TFLOP / sec / GPU"] or "", "mfu_pct": "", "hw_tflops_per_gpu": "",
        "peak_memory_gib": "", "tokens_per_s_per_gpu_derived": "", "consistency_pct": "",
        "flags": ";".join(sorted(set(flags))), "complete": "true" if tokens and not illegal else "false",
        "notes": "; ".join(notes), "gt_ids": "", "_where": f"{row.file}@{row.commit[:9]} line {row.line}",
    }


def key(r: dict[str, str]) -> tuple[str, ...]:
    return tuple(r[k] for k in KEY)


def assemble(mirror: Path, dev_path: Path) -> tuple[list[str], list[dict[str, str]], list[str]]:
    """(header, held-out rows, report lines)."""
    with dev_path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        dev = list(reader)
    templates = dev_templates(dev)
    dev_keys = {key(r): r["run_id"] for r in dev}
    dev_by_id = {r["run_id"]: r for r in dev}
    dev_ids = set(dev_by_id)
    report: list[str] = []
    rows: list[dict[str, str]] = []
    seen: set[tuple[str, ...]] = set()
    known = set(catalog_models())
    notes_of: dict[tuple[str, str], dict[str, str]] = {}
    near = {key(r)[:5]: r["run_id"] for r in dev}
    for release, (commit, path) in sorted(newest_commits(mirror).items()):
        report.append(f"release {release}: {path} at {commit}")
        if (commit, path) not in notes_of:
            notes_of[(commit, path)] = footnote_texts(git_show(mirror, commit, path) or "")
        for t in pretraining_rows(git_show(mirror, commit, path) or "", release, commit, path):
            name = model_tag(t.cells.get("Model") or t.heading.removeprefix("Model: "))[0]
            where = f"{release} {t.heading} line {t.line}: {' | '.join(t.cells.values())}"
            if name not in MODELS:
                report.append(f"  SKIP {where} -- model {name!r} is not in the model catalog")
                continue
            slug = MODELS[name][0]
            if slug not in known or slug not in templates:
                report.append(f"  SKIP {where} -- no catalog model / dev architecture for {slug}")
                continue
            bad = catalog_mismatch(slug, templates[slug])
            if bad:
                report.append(f"  SKIP {where} -- dev architecture disagrees with the catalog: {bad}")
                continue
            has_variant = any(split_cell(v)[1] is not None for k, v in t.cells.items() if k != "Model")
            for variant in (False, True) if has_variant else (False,):
                r = build(t, variant, has_variant, templates, notes_of[(commit, path)])
                if key(r) in dev_keys:
                    d = dev_by_id[dev_keys[key(r)]]
                    same = d["tokens_per_s_per_gpu"] == r["tokens_per_s_per_gpu"]
                    report.append(f"  DEV  {where}{' (variant)' if variant else ''} -- is dev row {d['run_id']}"
                                  + ("" if same else f" (dev tokens/s/GPU {d['tokens_per_s_per_gpu'] or '-'}, "
                                                     f"table {r['tokens_per_s_per_gpu'] or '-'})"))
                elif key(r) in seen:
                    report.append(f"  DUP  {where} -- already written")
                else:
                    seen.add(key(r))
                    rows.append(r)
                    if key(r)[:5] in near:
                        report.append(f"  NEAR {where}{' (variant)' if variant else ''} -- same release, GPU, model, "
                                      f"precision and #GPUs as dev row {near[key(r)[:5]]}, other layout or batch: kept")
    _unique_ids(rows, dev_ids)
    per = Counter(r["source"] for r in rows)
    report.append("written: " + ", ".join(f"{s} {n}" for s, n in sorted(per.items())) + f"; total {len(rows)}")
    return header, rows, report


def _unique_ids(rows: list[dict[str, str]], dev_ids: set[str]) -> None:
    """Rows of one run_id that differ in GBS (26.06 DeepSeek-V3 on GB300) get the dev set's `~gbsN` suffix
    and `split_run_id` flag; any other clash (or a run_id the dev set holds) is an error."""
    count = Counter(r["run_id"] for r in rows)
    for r in rows:
        base = r["run_id"]
        if count[base] > 1 and len({x["gbs"] for x in rows if x["run_id"] == base}) == count[base]:
            r["run_id"] = f"{base}~gbs{r['gbs']}"
            r["flags"] = ";".join(sorted(set(filter(None, r["flags"].split(";"))) | {"split_run_id"}))
            r["notes"] = f"split from input run_id '{base}' (its rows differ in gbs); " + r["notes"]
    ids = Counter(r["run_id"] for r in rows)
    dup = [i for i, n in ids.items() if n > 1 or i in dev_ids]
    if dup:
        raise SystemExit(f"heldout_bridge: run_id not unique: {dup}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR)
    ap.add_argument("--dev", type=Path, default=DEV)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    header, rows, report = assemble(args.mirror, args.dev)
    with args.out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        report.append(f"  ROW  {r['run_id']}: {r['_where']}")
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
