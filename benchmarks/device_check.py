"""Device check (issue 8): measure on one Hopper GPU, project complete published Hopper runs, print the error.

    bash benchmarks/device_check.sh              # on a machine with one GPU (an NVIDIA H200 in practice)
    bash benchmarks/device_check.sh --dry-run    # anywhere, on CPU, in minutes (CI runs this)

Reads only what the repository carries: `benchmarks/device_rows.csv` (the complete H100 and H200 rows
of ground_truth/runs_dev.csv: DGX Cloud Llama 3.1 8B / 70B / 405B on H100, torchtitan Llama 3.1 8B on
H200, same columns), the model and hardware catalogs, and the code.

1. Every row becomes a job (`primus.fidelity.jobs.build`, the calibration's own conventions for what a
   source leaves unstated; a small local rule when that module is absent).
2. `primus measure` each row's job on the local GPU into one profile, Llama 3.1 8B rows first, then one
   MoE layer of Mixtral 8x22B (EP 8 over 8 H100s, 1 expert per rank), then the 70B and 405B rows while
   the budget lasts; shapes already held are reused, so rows that differ only in DP cost nothing. The
   memory check (max_memory_allocated against the ledger) runs for Llama 3.1 8B and the Mixtral layer.
3. Project every row with the analytic model and with the measured profile. H200 rows use the profile
   as measured; H100 rows use it rescaled by `rescale` (same GH100 die, SMs, clocks and dense peaks, so
   compute-bound calls carry over and HBM-bound ones scale by 4.8 / 3.35 TB/s = × 1.43, GEMMs between
   by their roofline). Collectives cannot be measured on one GPU: they, the DP × CP sync, the pipeline
   schedule and FSDP overlap are modelled at the target.
4. Print the error table (projected against published step time) and write it under --out.

`--dry-run` keeps every row's layout, GPU count and batch but shrinks the model (hidden 256, 8 heads,
FFN 512, one layer per virtual stage, vocab 1024, seq 256) and measures on CPU, declaring the CPU as
the H200 so the very same path (rescale to H100, device check, projection) runs end to end. Its numbers
mean nothing; it proves the mechanics.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ROWS = REPO / "benchmarks" / "device_rows.csv"
MIXTRAL = {"model": {"base": "mixtral-8x22b", "num_layers": 1}, "hardware": "h100-80gb", "gpus": 8,
           "seq_len": 4096, "global_batch_size": 64,
           "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False, "recompute": "none",
                        "sharding": "dist_opt"}}


def jobs_from_rows(path: Path) -> list[tuple[dict[str, str], Any]]:
    """(row cells, job) per row; rows primus cannot build are reported and skipped."""
    out: list[tuple[dict[str, str], Any]] = []
    try:
        from primus.fidelity.jobs import Unprojectable, build
        from primus.fidelity.runs import read_runs
    except ImportError:
        with path.open(newline="") as fh:
            return [(row, _local_job(row)) for row in csv.DictReader(fh)]
    for row in read_runs(path):
        try:
            out.append((row.as_dict(), build(row).project))
        except Unprojectable as exc:
            print(f"skipped {row.run_id}: {exc.reason}", file=sys.stderr)
    return out


def _local_job(row: dict[str, str]) -> Any:
    """Fallback rule when primus.fidelity is absent: stated cells, Megatron defaults for the rest."""
    from primus.job import job_from_mapping

    torchtitan = row["source"].startswith("torchtitan") or row["run_id"].startswith("TT-")
    prec, recipe = {"fp8": ("fp8", "tensorwise" if torchtitan else "delayed"),
                    "fp8-block": ("fp8", "blockwise")}.get(row["precision"], (row["precision"], None))
    par: dict[str, Any] = {k: int(row[k]) for k in ("tp", "pp", "vp", "cp", "dp", "mbs") if row.get(k)}
    par.update(sp=row.get("sp") == "true", sharding=row.get("sharding") or "dist_opt",
               recompute=row.get("recompute") or "none")
    data = {"model": row["model"], "hardware": row["gpu"], "gpus": int(row["num_gpus"]), "seq_len": int(row["seq_len"]),
            "global_batch_size": int(row["gbs"]), "precision": prec, "parallel": par,
            "framework": "torchtitan" if torchtitan else "megatron", **({"fp8_recipe": recipe} if recipe else {})}
    return job_from_mapping(data, f"{ROWS.name}:{row['run_id']}")


def published_step(row: dict[str, str]) -> float | None:
    if row.get("step_time_s"):
        return float(row["step_time_s"])
    tok = row.get("tokens_per_s_per_gpu") or row.get("tokens_per_s_per_gpu_derived")
    if not tok:
        return None
    return int(row["gbs"]) * int(row["seq_len"]) / (float(tok) * int(row["num_gpus"]))


def shrink(job: Any) -> Any:
    """The dry run's job: the same layout, GPU count and batch; a tiny model and sequence."""
    from primus.specs.model import ModelSpec

    par = job.spec.parallel
    stages = (par.pp or 1) * (par.vp or 1)
    m = job.model
    data = {**m.model_dump(), "num_layers": stages, "hidden_size": 256, "num_attention_heads": 8, "kv_channels": 32,
            "num_query_groups": 8, "vocab_size": 1024, "published": None}
    data.update({k: 512 for k in ("ffn_hidden_size", "moe_ffn_hidden_size") if data.get(k)})
    return dataclasses.replace(job, model=ModelSpec(**data), spec=job.spec.model_copy(update={"seq_len": 256}))


def mixtral_job(dry: bool) -> Any:
    from primus.job import job_from_mapping

    job = job_from_mapping(MIXTRAL, "device_check:mixtral-8x22b-moe-layer")
    return shrink(job) if dry else job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, tiny shapes: the mechanics end to end (minutes: torch's CPU FP8 GEMM, _scaled_mm, "
                         "takes about a second a call)")
    ap.add_argument("--out", default="/tmp/primus-device-check", help="folder for the profile and the table")
    ap.add_argument("--rows", default=str(ROWS))
    ap.add_argument("--budget-s", type=float, default=None,
                    help="measurement budget (default 130 s on the GPU; the dry run has none: its shapes are tiny "
                         "and what it proves is that every row takes its kernels from the profile)")
    args = ap.parse_args()
    t_start = time.monotonic()
    import torch

    from primus.catalog.hardware import resolve_hardware
    from primus.measure.campaign import MeasureOptions, run_measure
    from primus.measure.measured_profile import load_measured_profile, rescale
    from primus.memory.evaluate import pinned_layout
    from primus.projection import load_profile, project

    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        print("device_check: no GPU visible to torch; run with --dry-run on CPU", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prof_path = out / "profile.json"
    prof_path.unlink(missing_ok=True)
    budget = args.budget_s if args.budget_s is not None else (None if dry else 130.0)
    deadline = math.inf if budget is None else time.monotonic() + budget
    device = "cpu" if dry else "cuda"
    name = "CPU (dry run, standing in for h200)" if dry else torch.cuda.get_device_name(0)
    print(f"device check on {name}, torch {torch.__version__}"
          + (" [DRY RUN: shapes shrunk, numbers meaningless]" if dry else ""))

    rows = jobs_from_rows(Path(args.rows))
    if dry:
        rows = [(r, shrink(j)) for r, j in rows]
    mix = mixtral_job(dry)
    first = [r for r in rows if r[0]["model"] == "llama3.1-8b"]
    targets = first + [({"run_id": "mixtral-8x22b MoE layer"}, mix)] + [r for r in rows if r not in first]
    memory_done: set[str] = set()
    for row, job in targets:
        left = deadline - time.monotonic()
        if left <= 1:
            print(f"budget spent before {row['run_id']}: its kernels stay modelled", file=sys.stderr)
            continue
        family = "mixtral" if job is mix else row.get("model", "")
        check = family in ("llama3.1-8b", "mixtral") and family not in memory_done
        memory_done.add(family)
        opt = MeasureOptions(device=device, procs=1, budget_s=None if budget is None else left, hardware="h200",
                             memory_check=check, target_s=0.01 if dry else 0.15)
        res = run_measure(job, pinned_layout(job), prof_path, opt)
        print(f"measured {row['run_id']}: {res.measured} new, {res.reused} reused, {sum(res.left.values())} modelled "
              f"({res.elapsed_s:.1f} s)", file=sys.stderr)
        for m in res.memory_rows:
            print(f"  memory, {family} {m['kind']} layer at seq {m['seq_len']}: ledger {m['ledger_bytes']:,} B, "
                  f"measured {m['measured_bytes']:,} B ({100 * m['error']:+.2f}%), peak {m['peak_bytes'] or '-'}, "
                  f"reserved {m['reserved_bytes'] or '-'} [{m['method']}]")
    measured = load_measured_profile(prof_path)
    h200 = resolve_hardware("h200", "device_check")
    by_hw = {"h200": measured}
    table: list[dict[str, Any]] = []
    for row, job in [*rows, ({"run_id": "mixtral-8x22b MoE layer"}, mix)]:
        hw = job.cluster.name.split("+")[0]
        if hw not in by_hw:
            by_hw[hw] = rescale(measured, h200, job.cluster, load_profile(h200))
        calib = load_profile(job.cluster)
        layout = pinned_layout(job)
        modelled = project(job, layout, calib)
        hybrid = project(job, layout, calib, timer=by_hw[hw].timer(job.cluster, calib))
        pub = None if job is mix else published_step(row)
        table.append({"run": row["run_id"], "gpu": hw, "gpus": job.num_gpus, "layout": _layout(layout),
                      "published_s": pub, "modelled_s": modelled.step_time_s, "measured_s": hybrid.step_time_s,
                      "err_modelled": None if pub is None else (modelled.step_time_s - pub) / pub,
                      "err_measured": None if pub is None else (hybrid.step_time_s - pub) / pub,
                      "measured_terms": sorted(k for k, v in hybrid.sources.items() if v == "measured")})
    text = render(table, name, torch.__version__, dry, time.monotonic() - t_start)
    print(text)
    (out / "device_check.md").write_text(text + "\n")
    (out / "device_check.json").write_text(json.dumps({"device": name, "dry_run": dry, "rows": table}, indent=1))
    return 0


def _layout(lay: Any) -> str:
    parts = [f"TP{lay.tp}", f"PP{lay.pp}" + (f"×VP{lay.vp}" if lay.vp > 1 else ""), f"CP{lay.cp}", f"DP{lay.dp}"]
    if lay.ep > 1:
        parts.append(f"EP{lay.ep}")
    return " ".join(parts) + f" mbs{lay.mbs} {lay.recompute} {lay.sharding}"


def render(table: list[dict[str, Any]], device: str, torch_version: str, dry: bool, elapsed: float) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:+.1f}%"

    lines = ["| run | GPU | layout | published s | modelled s | error | measured profile s | error | measured terms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        pub = "-" if r["published_s"] is None else f"{r['published_s']:.3g}"
        lines.append(f"| {r['run']} | {r['gpu']} × {r['gpus']} | {r['layout']} | {pub} | {r['modelled_s']:.3g} | "
                     f"{pct(r['err_modelled'])} | {r['measured_s']:.3g} | {pct(r['err_measured'])} | "
                     f"{', '.join(r['measured_terms']) or '-'} |")
    errs = [(abs(r["err_modelled"]), abs(r["err_measured"])) for r in table if r["err_modelled"] is not None]
    if errs:
        lines.append("")
        lines.append(f"median |error|: modelled {100 * statistics.median(e[0] for e in errs):.1f}%, measured profile "
                     f"{100 * statistics.median(e[1] for e in errs):.1f}% over {len(errs)} published runs")
    lines.append(f"device {device}, torch {torch_version}; H100 rows use the H200 profile rescaled (compute-bound "
                 f"calls as measured, HBM-bound × 4.8/3.35); {elapsed:.0f} s in all"
                 + ("; DRY RUN: tiny shapes on CPU, the numbers are meaningless" if dry else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
