"""`primus tune`: the fastest legal layout, proved legal, explained, with an auditable log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from primus.cli.common import Negative, format_option, guarded
from primus.cli.output import emit_json, gib, stderr_console, stdout_console, table
from primus.cli.solver_cmds import _layout_text, rule_options
from primus.job import load_job
from primus.paths import data_dir
from primus.tune.agent import Tuner, TuneSettings
from primus.tune.llm import LlmSettings
from primus.tune.output import input_texts, write_run_dir
from primus.yamlio import read_text

DEFAULT_JOB = "mixtral-8x22b-mi355x.yaml"


def _print(doc: dict[str, Any], out_dir: Path) -> None:
    con = stdout_console()
    j = doc["job"]
    con.print(f"[bold]tune[/]: {j['model']} on {j['gpus']} x {j['hardware']} ({j['nodes']} nodes), seq {j['seq_len']}, "
              f"global batch {j['global_batch_size']}, {j['precision']}")
    con.print(f"{doc['legal_count']:,} legal layouts; {doc['scored_count']:,} scored ({doc['mode']})")
    bar = f" ± {doc['uncertainty_pct']:.0f}%" if doc.get("uncertainty_pct") is not None else ""
    best = doc["best"]
    if best["parallel"] is None:
        con.print("[bold red]no legal layout[/]")
        return
    con.print(f"[bold green]best[/]: {_layout_text(best['parallel'])}")
    con.print(f"  {best['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU{bar}, step {best['step_time_s']:.3f} s, "
              f"MFU {best['mfu'] * 100:.1f}%, peak {gib(best['peak_bytes'])} (fits: proved by the ledger)")
    con.print(f"  uncertainty: {doc['uncertainty_basis']}")
    ref = doc["reference"]
    con.print(f"reference ({ref['origin']}): " + (_layout_text(ref["parallel"]) if ref["parallel"] else "none"))
    if not ref["fits"]:
        con.print(f"  [red]not legal[/]: minimal core {', '.join(ref['violated_rules'])}")
        near = ref.get("nearest_legal")
        if near:
            con.print(f"  nearest legal variant (changes {', '.join(near['changed'])}): "
                      f"{_layout_text(near['parallel'])} -> {near['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    else:
        con.print(f"  {ref['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU")
    if "speedup_vs_reference" in doc:
        con.print(f"best is {doc['speedup_vs_reference']:.2f}x the reference" +
                  ("" if ref["fits"] else "'s nearest legal variant"))
    if doc.get("why"):
        con.print(table("why it wins (exposed seconds per step)", ["term", "reference", "best", "change"],
                        [(r["term"], f"{r['reference_s']:.3f}", f"{r['best_s']:.3f}", f"{r['delta_s']:+.3f}")
                         for r in doc["why"][:8]], justify_right=["reference", "best", "change"]))
    cert = doc.get("certificate")
    if cert:
        con.print(f"certificate: all {cert['legal_layouts']:,} legal layouts scored; margin to the runner-up "
                  f"{cert['margin_to_runner_up_pct'] or 0:.2f}% vs error bar {doc['uncertainty_pct'] or 0:.0f}%"
                  + (" (the ranking among the top is within the error bar)" if not cert["margin_exceeds_error_bar"]
                     else ""))
    rows = [(i + 1, _layout_text(t["parallel"]), f"{t['tokens_per_s_per_gpu']:,.0f}", f"{t['step_time_s']:.3f}",
             gib(t["peak_bytes"])) for i, t in enumerate(doc["top"][:10])]
    con.print(table("top layouts", ["#", "parallel", "tokens/s/GPU", "step s", "peak"], rows))
    con.print(f"search log: {out_dir / 'audit.jsonl'}")


@click.command("tune")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@rule_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="primus-tune", show_default=True,
              help="Directory for result.json, audit.jsonl, llm/ and inputs/.")
@click.option("--exhaustive-limit", type=click.IntRange(0, 10_000_000), default=200_000, show_default=True,
              help="Score every legal layout when there are at most this many; guided search above.")
@click.option("--llm", "llm_mode", type=click.Choice(["auto", "none"]), default="auto", show_default=True,
              help="'none' disables the LLM; 'auto' uses it when an endpoint is configured.")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint (else $OPENAI_BASE_URL).")
@click.option("--llm-model", default="gpt-4o-mini", show_default=True)
@click.option("--llm-calls", type=click.IntRange(0, 100), default=4, show_default=True, help="Call budget.")
@click.option("--llm-timeout", type=click.FloatRange(0.1, 600), default=60.0, show_default=True)
@click.option("--workers", type=click.IntRange(1, 256), default=None,
              help="Processes scoring in parallel (default: the CPU count, at most 8); results do not depend "
                   "on it.")
@format_option("table", "json")
@guarded
def tune_cmd(job_file: str | None, rule_texts: tuple[str, ...], rule_files: tuple[str, ...],
             without: tuple[str, ...], out_dir: str, exhaustive_limit: int, llm_mode: str,
             llm_base_url: str | None, llm_model: str, llm_calls: int, llm_timeout: float, workers: int | None,
             fmt: str) -> None:
    """Find the fastest legal layout for a job (default: the seed paper's Mixtral 8x22B case study on
    4 nodes of MI355X), prove it legal, say why it wins, and write an auditable search log.

    Sequence length, global batch size and precision never change.

    Example: primus tune examples/llama3.1-70b-mi300x-free.yaml --llm none --out run1
    """
    path = Path(job_file) if job_file else data_dir("examples") / DEFAULT_JOB
    job = load_job(path)
    base_url = None if llm_mode == "none" else (llm_base_url or os.environ.get("OPENAI_BASE_URL"))
    llm = LlmSettings(base_url=base_url, model=llm_model, api_key=os.environ.get("OPENAI_API_KEY"),
                      max_calls=llm_calls, timeout_s=llm_timeout)
    err = stderr_console()
    if not llm.enabled:
        err.print("LLM off: " + ("--llm none" if llm_mode == "none" else "no endpoint configured "
                                 "(--llm-base-url or OPENAI_BASE_URL)"))
    n_workers = workers or min(8, os.cpu_count() or 1)
    tuner = Tuner(job, TuneSettings(exhaustive_limit=exhaustive_limit, llm=llm, workers=n_workers),
                  rule_texts=rule_texts,
                  rule_files=rule_files, without=without, progress=lambda m: err.print(m))
    doc = tuner.run()
    target = Path(out_dir)
    doc["log"] = str(target / "audit.jsonl")
    from primus.tune.investigate import Investigation  # noqa: F401  (transcripts come from the run)

    transcripts = getattr(tuner, "transcripts", [])
    write_run_dir(target, doc, tuner.log.entries, transcripts, input_texts(read_text(path), tuner))
    if fmt == "json":
        emit_json(doc)
    else:
        _print(doc, target)
    if doc["best"]["parallel"] is None:
        raise Negative()
