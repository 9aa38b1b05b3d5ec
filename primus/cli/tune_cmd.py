"""`primus tune`: the fastest legal layout, proved legal, explained, with an auditable log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from primus.cli.common import FiniteRange, Negative, format_option, guarded, read_job, stack_option
from primus.cli.output import emit_json, gib, lit, stderr_console, stdout_console, table, tight_text
from primus.cli.solver_cmds import rule_options
from primus.errors import InputError
from primus.fidelity.errorbars import range_text
from primus.job import Job
from primus.parallel import parallel_text
from primus.paths import data_dir
from primus.processes import WORKERS_RANGE, default_workers
from primus.report.audit import partial_dir, read_state
from primus.report.owned import claimable
from primus.tuning.agent import TuneSettings
from primus.tuning.llm import LlmSettings
from primus.tuning.run import (
    ALLOWABLE,
    EXHAUSTIVE_LIMIT_RANGE,
    LLM_CALLS_RANGE,
    LLM_TIMEOUT_RANGE,
    RESUMED_FROM_STATE,
    check_state,
    job_text_with_stack,
    run_tune,
)
from primus.tuning.variants import changes_text
from primus.yamlio import read_text

DEFAULT_JOB = "mixtral-8x22b-mi355x.yaml"


def _print(doc: dict[str, Any], out_dir: Path) -> None:
    con = stdout_console()
    j = doc["job"]
    con.print(f"[bold]tune[/]: {lit(j['model'])} on {j['gpus']} x {lit(j['hardware'])} ({j['nodes']} nodes), "
              f"seq {j['seq_len']}, global batch {j['global_batch_size']}, {lit(j['precision'])}, stack "
              f"{lit(j.get('stack', ''))}", markup=True)
    con.print(f"{doc['legal_count']:,} legal layouts; {doc['scored_count']:,} scored ({doc['mode']})")
    bar = f" ± {doc['uncertainty_pct']:.0f}%" if doc.get("uncertainty_pct") is not None else ""
    best = doc["best"]
    if best["parallel"] is None:
        con.print("[bold red]no legal layout[/]", markup=True)
        _print_variants(con, doc)
        return
    con.print(f"[bold green]best[/]: {lit(parallel_text(best['parallel']))}", markup=True)
    piped = (doc.get("allowed_changes") or {}).get("pipeline")
    if piped:
        con.print(f"  with pipeline options changed by --allow pipeline: {changes_text(piped['chosen'])}")
    from primus.report.context import OVER_CAPACITY, precision_change_text

    changed = precision_change_text(doc)
    if changed:
        con.print(f"  {lit(changed)}", markup=True)
    verdict = "fits: proved by the ledger"
    if best.get("verdict") == "does not fit":  # only the job's own rules let it through (review 49, M5)
        verdict = f"OVER the usable capacity: {OVER_CAPACITY}"
    elif best.get("tight"):  # headroom short of the allocator reserve by tight_by_bytes
        band = best["allocator_reserve_bytes"]
        verdict = "fits, but TIGHT: " + tight_text(band - best["tight_by_bytes"], band) + ": proved by the ledger"
    con.print(f"  {best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{bar}, step {best['step_time_s']:.3f} s, "
              f"MFU {best['mfu'] * 100:.1f}%, peak {gib(best['peak_bytes'])} ({verdict})")
    pct = doc.get("uncertainty_pct")
    within = f"a measured {range_text(best['tokens_per_s_per_gpu'], pct)}: " if pct is not None else ""
    con.print(f"  uncertainty: {within}{doc['uncertainty_basis']}")
    ref = doc["reference"]
    if "note" in ref:  # no reference: nothing is compared with the best
        con.print(f"reference: none ({ref['note']})")
    elif not ref["fits"]:
        con.print(f"reference ({ref['origin']}): " + parallel_text(ref["parallel"]))
        con.print(f"  [red]not legal[/]: minimal core {lit(', '.join(ref['violated_rules']))}", markup=True)
        near = ref.get("nearest_legal")
        if near:
            con.print(f"  nearest legal variant (changes {', '.join(near['changed'])}): "
                      f"{parallel_text(near['parallel'])} -> {near['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    else:
        con.print(f"reference ({ref['origin']}): {parallel_text(ref['parallel'])}")
        con.print(f"  {ref['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    if "speedup_vs_reference" in doc:
        con.print(f"best is {doc['speedup_vs_reference']:.2f}x the reference" +
                  ("" if ref["fits"] else "'s nearest legal variant"))
    if ref.get("claim"):
        claim = ref["claim"]
        projected = doc.get("speedup_vs_reference")
        con.print(f"published claim: {claim['gain_pct']:+g}% over this reference ({claim['source']}); primus "
                  + ("projects no gain: no legal reference" if projected is None else
                     f"projects {100 * (projected - 1):+.0f}%"))
    if doc.get("why"):
        con.print(table("why it wins (exposed seconds per step)", ["term", "reference", "best", "change"],
                        [(r["term"], f"{r['reference_s']:.3f}", f"{r['best_s']:.3f}", f"{r['delta_s']:+.3f}")
                         for r in doc["why"][:8]], justify_right=["reference", "best", "change"]))
    cert = doc.get("certificate")
    if cert:
        con.print(f"certificate: under {cert['scope']}, all {cert['legal_layouts']:,} legal layouts scored; "
                  "margin to the runner-up "
                  f"{cert['margin_to_runner_up_pct'] or 0:.2f}% vs error bar {doc['uncertainty_pct'] or 0:.0f}%"
                  + (" (the ranking among the top is within the error bar)" if not cert["margin_exceeds_error_bar"]
                     else ""))
    _print_variants(con, doc)
    rows = [(i + 1, parallel_text(t["parallel"]), f"{t['tokens_per_s_per_gpu']:,.0f}", f"{t['step_time_s']:.3f}",
             gib(t["peak_bytes"])) for i, t in enumerate(doc["top"][:10])]
    con.print(table("top layouts", ["#", "parallel", "tokens/s/GPU", "step s", "peak"], rows))
    con.print(f"report: {out_dir / 'report.html'} (and report.md); search log: {out_dir / 'audit.jsonl'}")


def _print_variants(con: Any, doc: dict[str, Any]) -> None:
    """Layouts legal only under other pipeline options, projected faster than the best."""
    variants = doc.get("faster_with_changed_options", [])
    if not variants:
        return
    con.print("faster with other pipeline options (outside the search and its certificate; `--allow pipeline` "
              "searches every layout under each option set, or set them in the job file):")
    best = doc["best"]["tokens_per_s_per_gpu"]
    for v in variants:
        times = f" ({v['tokens_per_s_per_gpu'] / best:.2f}x the best)" if best else ""
        con.print(f"  {parallel_text(v['parallel'])} with {changes_text(v['options'])} -> "
                  f"{v['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{times}")


@click.command("tune")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@rule_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="primus-tune", show_default=True,
              help="Directory for report.html, report.md, result.json, audit.jsonl, llm/ and inputs/.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              help="Continue an interrupted `primus tune --out DIR` from its checkpoint (DIR.partial/): the job "
                   "and options are the interrupted run's, scored candidates are not scored again.")
@click.option("--exhaustive-limit", type=click.IntRange(*EXHAUSTIVE_LIMIT_RANGE), default=200_000, show_default=True,
              help="Score every legal layout when there are at most this many; guided search above.")
@click.option("--llm", "llm_mode", type=click.Choice(["auto", "none"]), default="auto", show_default=True,
              help="'none' disables the LLM; 'auto' uses it when an endpoint is configured.")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint (else $OPENAI_BASE_URL).")
@click.option("--llm-model", default="gpt-4o-mini", show_default=True)
@click.option("--llm-calls", type=click.IntRange(*LLM_CALLS_RANGE), default=4, show_default=True, help="Call budget.")
@click.option("--llm-timeout", type=FiniteRange(*LLM_TIMEOUT_RANGE), default=60.0, show_default=True)
@click.option("--allow", "allow", multiple=True, type=click.Choice(ALLOWABLE),
              help="Let tuning change the precision (precision: the job's, bf16, and fp8 where the accelerator "
                   "has an fp8 peak) or the job's `pipeline:` split options (pipeline: the layout string, first/last "
                   "stage layer counts and counting the embedding/loss in the split, set or unset as each option set "
                   "listed under 'faster with other pipeline options' says; at PP 1 all unset): each allowed value "
                   "is tuned and the fastest kept. Sequence length, global batch and data order never change.")
@click.option("--workers", type=click.IntRange(*WORKERS_RANGE), default=None,
              help="Processes scoring in parallel (default: the CPU count, at most 8); results do not depend "
                   "on it.")
@stack_option
@format_option("table", "json")
@click.pass_context
@guarded
def tune_cmd(ctx: click.Context, job_file: str | None, rule_texts: tuple[str, ...], rule_files: tuple[str, ...],
             without: tuple[str, ...], out_dir: str, resume_dir: str | None, exhaustive_limit: int, llm_mode: str,
             llm_base_url: str | None, llm_model: str, llm_calls: int, llm_timeout: float,
             allow: tuple[str, ...], workers: int | None, stack: str | None, fmt: str) -> None:
    """Find the fastest legal layout for a job (default: the seed paper's Mixtral 8x22B case study on
    4 nodes of MI355X), prove it legal, say why it wins, and write a report (report.html, report.md) with
    an auditable search log. A killed run can be continued with --resume DIR.

    Sequence length, global batch size and precision never change (precision only with --allow precision;
    the job's `pipeline:` options only with --allow pipeline).
    --stack NAME[@RELEASE] replaces the job file's `stack:` (recorded in the run's inputs/job.yaml).

    Example: primus tune examples/llama3.1-70b-mi300x-free.yaml --llm none --out run1
    """
    opts: dict[str, Any] = {"job_file": job_file, "stack": stack, "rule_texts": list(rule_texts),
                            "rule_files": list(rule_files),
                            "without": list(without), "exhaustive_limit": exhaustive_limit, "llm_mode": llm_mode,
                            "llm_base_url": llm_base_url, "llm_model": llm_model, "llm_calls": llm_calls,
                            "llm_timeout": llm_timeout, "allow": list(allow)}
    if resume_dir is not None:
        given = [p for p in ctx.command.params if p.name in (*RESUMED_FROM_STATE, "out_dir")
                 and ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise InputError("--resume", None, "the job and its options come from the interrupted run; drop "
                             + ", ".join("JOB_FILE" if p.name == "job_file" else p.opts[0] for p in given))
        target = Path(resume_dir)
        claimable(target.resolve(), "run", "--resume")  # the run directory first, then its checkpoint
        state = read_state(target)
        opts = check_state(state, str(partial_dir(target.resolve()) / "state.json"))
    else:
        target = Path(out_dir)
        _check_out_parent(target)
        if opts["job_file"] is not None:
            opts["job_file"] = str(Path(opts["job_file"]).resolve())
        opts["rule_files"] = [str(Path(f).resolve()) for f in opts["rule_files"]]
        opts["llm_base_url"] = None if llm_mode == "none" else (llm_base_url or os.environ.get("OPENAI_BASE_URL"))
    path = Path(opts["job_file"]) if opts["job_file"] else data_dir("examples") / DEFAULT_JOB
    job = read_job(path, opts["stack"])
    _check_base_url(opts["llm_base_url"], "--llm-base-url" if llm_base_url else "OPENAI_BASE_URL")
    llm = LlmSettings(base_url=opts["llm_base_url"], model=opts["llm_model"], api_key=os.environ.get("OPENAI_API_KEY"),
                      max_calls=opts["llm_calls"], timeout_s=opts["llm_timeout"])
    err = stderr_console()
    off = [] if llm.enabled else ["LLM off: " + ("--llm none" if opts["llm_mode"] == "none" else
                                                 "no endpoint configured (--llm-base-url or OPENAI_BASE_URL)")]
    settings = TuneSettings(exhaustive_limit=opts["exhaustive_limit"], llm=llm, workers=workers or default_workers())
    answer = run_tune(job, job_text_with_stack(read_text(path), opts["stack"]), target, settings, options=opts,
                      resume_state=state if resume_dir is not None else None, say=err.print, notes=off)
    if fmt == "json":
        emit_json(answer.to_json())
    else:
        _print(answer.result, target)
        if answer.result["best"]["parallel"] is None:
            _print_why_not(job, opts)
    if answer.negative:
        raise Negative()


def _check_out_parent(target: Path) -> None:
    """--out's nearest existing ancestor must be a directory: refused here, in one line naming the option,
    before the search prints its first progress line (not as the checkpoint's mkdir fails later)."""
    for parent in target.resolve().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(str(target), "--out", f"{parent} is a file, not a directory")
            return


def _check_base_url(url: str | None, where: str) -> None:
    """An endpoint is an http(s) URL with a host: anything else is refused before the search (exit 2), not
    retried call after call as a connection fault (review 49, L1)."""
    if url is None:
        return
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number raises here
        host = parts.hostname or ""
        # a host name of letters, digits, hyphens, dots and underscores (Docker Compose service names have them;
        # an IPv6 literal in brackets is parsed by urlsplit); no whitespace or control character anywhere, which no
        # resolver or request line takes
        ok = (parts.scheme in ("http", "https") and bool(host) and not any(c.isspace() or not c.isprintable()
                                                                          for c in url)
              and ("[" in parts.netloc or all(c.isalnum() or c in "-._" for c in host)))
    except ValueError:
        ok = False
    if not ok:
        raise InputError(where, None, f"{url!r} is not an http(s) URL with a host (e.g. http://127.0.0.1:8000/v1)")


def _print_why_not(job: Job, opts: dict[str, Any]) -> None:
    """Why nothing is legal, in `primus fit`'s words (its minimal core and the nearest size that fits),
    under the same rules the search ran with (review 49, M8: tune printed only "no legal layout")."""
    from primus import api

    found = api.fit(job, rules=opts["rule_texts"], rule_files=opts["rule_files"], without=opts["without"]).result
    con = stdout_console()
    if found.violated_rules:
        con.print(f"  why: minimal conflicting rules and pins: {', '.join(found.violated_rules)}")
    for rid, detail in found.core_details.items():
        con.print(f"    {rid}: {detail}")
    if found.min_gpus is not None:
        below = f"; below: {found.size_below:,} GPUs" if found.size_below is not None else ""
        con.print(f"  nearest size at which a layout fits: {found.min_gpus:,} GPUs ({found.min_nodes:,} nodes){below}")
    con.print("  (`primus fit` on the job gives the bytes over and the nearest layouts)")
