"""Generate docs/accuracy.md, the fitted profiles and the error bars from the published runs.

Run: python benchmarks/accuracy_tables.py [--runs RUNS.csv] [--date YYYY-MM-DD] [--skip-loso]

1. calibrate every accelerator that has complete runs (`primus.fidelity.calibrate`) and write its
   profile to hardware/profiles/<hw>.yaml; an accelerator without runs whose hardware entry names a
   fitted `calibration_sibling` takes that sibling's factors (`primus.fidelity.sibling`), any other keeps
   the spec-derived profile;
2. validate every complete run with the shipped profiles (what `primus validate` prints), and with the
   spec-derived ones (what a datasheet-only profile achieves: the bar for unfitted accelerators);
3. leave one source out (`primus.fidelity.loso`) and derive the error bars and their coverage
   (primus/fidelity/data/error_bars.yaml; with --skip-loso the stored held-out errors are reused);
3b. validate AMD's published runs (primus/fidelity/data/amd_runs_dev.csv), reported apart, with the check of
    whether a fitted AMD profile would predict an unseen AMD source better (`primus.fidelity.amd_fit`);
3c. validate the held-out Megatron-Bridge rows (primus/fidelity/data/heldout_bridge.csv, assembled by
    benchmarks/heldout_bridge.py; never fitted), reported apart (`primus.fidelity.heldout_bridge`);
4. write docs/accuracy.md, keeping whatever sits between its `<!-- measured:start -->` and
   `<!-- measured:end -->` markers.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from primus.fidelity.accuracy_doc import render  # noqa: E402
from primus.fidelity.amd_fit import fit_check, ships_fitted  # noqa: E402
from primus.fidelity.calibrate import calibrate, load_spec_profile, profile_yaml, spec_profile_path  # noqa: E402
from primus.fidelity.errorbars import DATA as ERROR_BARS  # noqa: E402
from primus.fidelity.heldout_bridge import bundled_heldout_bridge_path  # noqa: E402
from primus.fidelity.loso import (  # noqa: E402
    WEIGHTING,
    HeldOut,
    coverage,
    error_bar_table,
    held_from_rows,
    held_to_rows,
    leave_one_source_out,
    loso_summary,
    precision_split,
)
from primus.fidelity.runs import bundled_amd_runs_path, bundled_runs_path, read_runs  # noqa: E402
from primus.fidelity.sibling import sibling_of, transfer  # noqa: E402
from primus.fidelity.validate import prepare, validate  # noqa: E402
from primus.processes import default_workers  # noqa: E402
from primus.projection.profile import Profile  # noqa: E402

PROFILES = ROOT / "hardware" / "profiles"
DOC = ROOT / "docs" / "accuracy.md"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def calibrate_all(runs_path: Path, date: str) -> dict[str, dict[str, Any]]:
    rows = read_runs(runs_path)
    prepared, _ = prepare(rows)
    fitted: dict[str, Profile] = {}
    bare: list[Path] = []
    for spec_file in sorted((PROFILES / "spec").glob("*.yaml")):
        hw = spec_file.stem
        mine = [p for p in prepared if p.jobs.project.cluster.name == hw]
        target = PROFILES / f"{hw}.yaml"
        if not mine:
            bare.append(spec_file)
            continue
        t0 = time.perf_counter()
        result = calibrate(load_spec_profile(hw), mine, runs_file=runs_path.name, date=date)
        fitted[hw] = result.profile
        header = (f"Calibration profile for {hw}, fitted by benchmarks/accuracy_tables.py (primus calibrate) on "
                  f"{date}.\nThe spec-derived starting point is {spec_profile_path(hw).relative_to(ROOT)}; numbers "
                  "not fitted keep its values and sources.")
        target.write_text(profile_yaml(result.profile, header))
        log(f"calibrated {hw} on {len(mine)} runs in {time.perf_counter() - t0:.0f} s: {result.factors}")
    for spec_file in bare:
        hw = spec_file.stem
        sib = sibling_of(hw)
        target = PROFILES / f"{hw}.yaml"
        if sib is None or sib not in fitted:
            shutil.copyfile(spec_file, target)
            continue
        moved = transfer(load_spec_profile(hw), fitted[sib], load_spec_profile(sib))
        header = (f"Calibration profile for {hw}, written by benchmarks/accuracy_tables.py on {date}: no "
                  f"published runs of {hw}, so the\nfitted factors of its same-die sibling {sib} (hardware/{hw}.yaml "
                  "calibration_sibling) apply to the spec-derived\nvalues of "
                  f"{spec_profile_path(hw).relative_to(ROOT)}; numbers not moved keep its values and sources.")
        target.write_text(profile_yaml(moved, header))
        log(f"{hw}: no runs; factors of {sib} transferred")
    return fitted_profiles()


def fitted_profiles() -> dict[str, dict[str, Any]]:
    """What each shipped fitted profile says it was fitted on (for the docs table)."""
    from primus.projection.profile import profile_from_mapping
    from primus.yamlio import load_mapping

    out: dict[str, dict[str, Any]] = {}
    for path in sorted(PROFILES.glob("*.yaml")):
        prof = profile_from_mapping(load_mapping(path), str(path))
        if prof.fitted and prof.calibration is not None:
            rec = prof.calibration
            out[prof.hardware] = {"runs": len(rec.runs), "factors": rec.factors, "summary": rec.summary}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=bundled_runs_path())
    ap.add_argument("--date", default=datetime.now(UTC).date().isoformat())
    ap.add_argument("--skip-calibrate", action="store_true", help="keep the shipped profiles")
    ap.add_argument("--skip-loso", action="store_true", help="keep the shipped error bars and LOSO table")
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="processes for leave-one-source-out (the tables do not depend on it)")
    args = ap.parse_args()
    fitted = fitted_profiles() if args.skip_calibrate else calibrate_all(args.runs, args.date)
    from primus.projection.profile import _load

    _load.cache_clear()
    rows = read_runs(args.runs)
    t0 = time.perf_counter()
    report = validate(rows, args.runs.name)
    log(f"validated {len(report.rows)} runs in {time.perf_counter() - t0:.1f} s")

    def spec_for(jobs: Any) -> Any:
        return load_spec_profile(jobs.project.cluster.name).for_stack(jobs.rule.kernels)

    spec_report = validate(rows, args.runs.name, profile_for=spec_for, check_fit=False)
    bars_path = ERROR_BARS
    previous = yaml.safe_load(bars_path.read_text()) if bars_path.is_file() else {}
    precision = {r.run_id: r["precision"].lower() for r in rows}
    if args.skip_loso and previous.get("held_out"):
        held = held_from_rows(previous["held_out"])  # the stored held-out errors; the bars are re-derived
        held = [replace(h, precision=h.precision or precision.get(h.run_id, "")) for h in held]
    else:
        prepared, _ = prepare(rows)
        held = leave_one_source_out(prepared, progress=log, workers=args.workers)
    loso = loso_summary(held)
    held_rows = held_to_rows(held)
    table = error_bar_table(held)
    spec_held = [HeldOut(r.run_id, r.source, r.accelerator.split("+")[0], r.moe, r.error_pct, 0)
                 for r in spec_report.rows]
    spec_table = error_bar_table(spec_held)
    q = table["quantile"]
    bars = {
        "generated": f"benchmarks/accuracy_tables.py on {args.date} from {args.runs.name}",
        **table,
        "spec_derived": {k: {**e, "basis": f"p{q:.0f} of |error| ({WEIGHTING}) of the spec-derived "
                                           f"(uncalibrated) projection on {e['n']} {k} published runs"}
                         for k, e in spec_table["pooled"].items()},
        "coverage": coverage(held),
        "precision_split": precision_split(held),
        "loso": loso,
        "held_out": held_rows,
    }
    bars_path.write_text("# Generated by benchmarks/accuracy_tables.py; do not edit by hand.\n"
                         + yaml.safe_dump(bars, sort_keys=False, width=110))
    from primus.fidelity.errorbars import _load as load_bars

    load_bars.cache_clear()  # the AMD rows carry the bars just written
    amd_path = bundled_amd_runs_path()
    amd_rows = read_runs(amd_path)
    amd_report = validate(amd_rows, amd_path.name)
    log(f"AMD: {len(amd_report.rows)} runs, median {amd_report.summary['tokens_per_s_per_gpu']['median_abs_pct']:.1f}%")
    amd_fit = fit_check(prepare(amd_rows)[0])
    log(f"AMD fit check: held-out median {amd_fit['held_out_summary']['median_abs_pct']:.1f}% vs spec-derived "
        f"{amd_fit['spec_summary']['median_abs_pct']:.1f}%: {'ship fitted' if ships_fitted(amd_fit) else 'keep spec'}")
    heldout_path = bundled_heldout_bridge_path()  # never fitted: the shipped profiles, as for the dev rows
    heldout_report = validate(read_runs(heldout_path), heldout_path.name)
    log(f"held-out Megatron-Bridge rows: {len(heldout_report.rows)} runs, median "
        f"{heldout_report.summary['tokens_per_s_per_gpu']['median_abs_pct']:.1f}%")
    old = DOC.read_text() if DOC.is_file() else ""
    DOC.write_text(render(report, spec_report, bars, held_rows, fitted, args.date, old, amd_report, amd_fit,
                          heldout_report))
    s = report.summary
    t = s["tokens_per_s_per_gpu"]
    log(f"median {t['median_abs_pct']:.1f}% p90 {t['p90_abs_pct']:.1f}% max {t['max_abs_pct']:.1f}% | LOSO median "
        f"{loso.get('overall', {}).get('median_abs_pct', float('nan')):.1f}% | Korthikanti "
        f"{s['korthikanti2022_a100_mean_abs_pct']:.1f}% | memory {s['peak_memory']['median_abs_pct']:.1f}% | "
        f"false OOM {s['false_oom']} | coverage {s['coverage_pct']:.1f}%")


if __name__ == "__main__":
    main()
