"""`primus models ...`, `primus hardware ...`, `primus job show`, `primus schema ...`."""

from __future__ import annotations

import json
from typing import Any

import click

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.catalog.models import catalog_models, resolve_model
from primus.cli.common import format_option, guarded, read_job, stack_option
from primus.cli.output import emit_csv, emit_json, human_params, stdout_console, table
from primus.job import Job
from primus.specs.flops import flops_per_token
from primus.specs.job import JobSpec
from primus.specs.model import ModelSpec
from primus.specs.params import count_params

#: what `active_params` counts; publishers differ (Mistral and Qwen count the input embedding, DeepSeek,
#: Moonshot and OpenAI do not), so both figures are shown and a published one is labelled with its own
ACTIVE_CONVENTION = ("parameters one token passes through: the input embedding, the output layer, the router and "
                     "norms and its top-k routed experts (MTP modules excluded); active_params_without_input_embedding "
                     "leaves out the input word-embedding table, as DeepSeek, Moonshot and OpenAI publish theirs")


def _published_active(model: ModelSpec) -> tuple[str, str] | None:
    """The catalog's published active figure as a table row, labelled with its convention."""
    published = model.published
    if published is None or published.active is None:
        return None
    which = "without" if published.active_excludes_input_embedding else "with"
    rounded = "" if published.exact else ", rounded"
    return f"published active ({which} the input embedding{rounded})", f"{published.active:,}"


def model_summary(model: ModelSpec, seq_len: int | None = None) -> dict[str, Any]:
    counts = count_params(model)
    seq = seq_len or model.max_position_embeddings or 4096
    flops = flops_per_token(model, seq)
    arch = model.model_dump(exclude={"published", "name", "display_name", "source", "notes"}, exclude_none=True)
    out: dict[str, Any] = {
        "name": model.name,
        "display_name": model.display_name,
        "source": model.source,
        "total_params": counts.total,
        "active_params": counts.active,
        "active_params_without_input_embedding": counts.active_without_input_embedding,
        "active_params_convention": ACTIVE_CONVENTION,
        "mtp_params": counts.mtp_total,
        "params_by_kind": counts.by_kind(),
        "num_dense_layers": model.num_dense_layers,
        "num_moe_layers": model.num_moe_layers,
        "padded_vocab_size_tp1": model.padded_vocab_size(1),
        "flops_per_token": {
            "seq_len": seq,
            "forward": flops.forward,
            "training": flops.training,
            "convention": "Megatron model FLOPs: 2 per GEMM weight per token forward, 3x for training, "
                          "attention over the keys a causal mask leaves (S/2 on average), MTP modules included, "
                          "recompute not counted",
        },
        "architecture": arch,
    }
    if model.published is not None:
        out["published"] = model.published.model_dump(exclude_none=True)
    if model.notes:
        out["notes"] = model.notes
    return out


@click.group("models")
def models_group() -> None:
    """The model catalog (Megatron-LM argument names) and any model file or HF config.json.

    Example: primus models show llama3.1-70b
    """


@models_group.command("list")
@format_option("table", "json", "csv")
@guarded
def models_list(fmt: str) -> None:
    """List catalog models with their parameter counts.

    Example: primus models list --format csv
    """
    rows: list[dict[str, Any]] = []
    for slug in catalog_models():
        model = resolve_model(slug, "catalog")
        counts = count_params(model)
        rows.append({"name": slug, "total_params": counts.total, "active_params": counts.active,
                     "active_params_without_input_embedding": counts.active_without_input_embedding,
                     "num_layers": model.num_layers, "hidden_size": model.hidden_size,
                     "num_experts": model.num_experts or 0, "source": model.source or ""})
    if fmt == "json":
        emit_json(rows)
    elif fmt == "csv":
        emit_csv(rows)
    else:
        stdout_console().print(table(
            "Models (active: parameters one token passes through, input embedding included)",
            ["name", "total", "active", "layers", "hidden", "experts"],
            [(r["name"], human_params(r["total_params"]), human_params(r["active_params"]), r["num_layers"],
              r["hidden_size"], r["num_experts"] or "-") for r in rows]))


@models_group.command("show")
@click.argument("model")
@click.option("--seq-len", type=click.IntRange(1, 16_777_216), default=None,
              help="Sequence length for FLOPs per token (default: max_position_embeddings or 4096).")
@format_option("table", "json")
@guarded
def models_show(model: str, seq_len: int | None, fmt: str) -> None:
    """Show a model: exact total and active parameters, per-kind counts, FLOPs per token.

    MODEL is a catalog name, a model YAML, or a Hugging Face config.json.

    Example: primus models show llama3.1-70b --format json
    """
    spec = resolve_model(model, "command line", "MODEL")
    summary = model_summary(spec, seq_len)
    if fmt == "json":
        emit_json(summary)
        return
    con = stdout_console()
    rows = [("total params", f"{summary['total_params']:,}"),
            ("active params (input embedding included)", f"{summary['active_params']:,}"),
            ("active params without the input embedding", f"{summary['active_params_without_input_embedding']:,}")]
    published = _published_active(spec)
    if published:
        rows.append(published)
    if summary["mtp_params"]:
        rows.append(("MTP params (not in total)", f"{summary['mtp_params']:,}"))
    rows += [(f"  {k}", f"{v:,}") for k, v in summary["params_by_kind"].items()]
    f = summary["flops_per_token"]
    rows.append((f"training FLOPs/token @ seq {f['seq_len']}", f"{f['training']:,}"))
    rows += [(k, ", ".join(f"{n}={x:g}" for n, x in v.items()) if isinstance(v, dict) else str(v))
             for k, v in summary["architecture"].items()]
    con.print(table(f"{spec.name}" + (f" — {spec.display_name}" if spec.display_name else ""),
                    ["field", "value"], rows))
    if spec.source:
        con.print(f"source: {spec.source}")
    if spec.notes:  # class defaults used, what an import counted as what, what it left out
        con.print(f"notes: {spec.notes}")


@click.group("hardware")
def hardware_group() -> None:
    """The hardware catalog: accelerators with the node and network of a typical cluster.

    Example: primus hardware show mi355x
    """


@hardware_group.command("list")
@format_option("table", "json", "csv")
@guarded
def hardware_list(fmt: str) -> None:
    """List hardware entries.

    Example: primus hardware list --format json
    """
    rows = []
    for slug in catalog_hardware():
        hw = resolve_hardware(slug, "catalog")
        acc = hw.accelerator
        rows.append({"name": slug, "accelerator": acc.name, "bf16_tflops": acc.peak_tflops["bf16"],
                     "fp8_tflops": acc.peak_tflops.get("fp8"), "hbm_gib": round(acc.hbm_bytes / 2**30, 2),
                     "gpus_per_node": hw.gpus_per_node, "scaleup_domain": hw.scaleup.domain_size})
    if fmt == "json":
        emit_json(rows)
    elif fmt == "csv":
        emit_csv(rows)
    else:
        stdout_console().print(table("Hardware", list(rows[0].keys()) if rows else [],
                                     [tuple(r.values()) for r in rows]))


@hardware_group.command("show")
@click.argument("hardware")
@format_option("table", "json")
@guarded
def hardware_show(hardware: str, fmt: str) -> None:
    """Show one hardware entry with every figure and its source.

    Example: primus hardware show mi300x
    """
    hw = resolve_hardware(hardware, "command line", "HARDWARE")
    doc = hw.model_dump()
    if fmt == "json":
        emit_json(doc)
        return
    con = stdout_console()
    rows: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            rows.append((prefix, str(value)))

    walk("", doc)
    con.print(table(hw.display_name or hw.name, ["field", "value"], rows))


def job_summary(job: Job) -> dict[str, Any]:
    spec = job.spec
    stack = job.resolved_stack
    return {
        "job": job.where,
        "stack": stack.name,
        "stack_release": stack.release,
        "model": job.model.name,
        "hardware": job.cluster.name,
        "accelerator": job.cluster.accelerator.name,
        "num_gpus": job.num_gpus,
        "num_nodes": job.num_nodes,
        "gpus_per_node": job.cluster.gpus_per_node,
        "scaleup_domain_size": job.cluster.scaleup.domain_size,
        "seq_len": spec.seq_len,
        "global_batch_size": spec.global_batch_size,
        "precision": spec.precision,
        "fp8_recipe": spec.effective_fp8_recipe,
        "pinned": spec.parallel.pinned(),
        "free": sorted(set(("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "sp", "recompute", "sharding"))
                       - set(spec.parallel.pinned())),
        "settings": spec.model_dump(exclude={"model", "hardware", "parallel", "nodes", "gpus", "seq_len",
                                             "global_batch_size", "precision", "fp8_recipe", "stack"}),
        "assumed": job.assumptions(),
        # what the model's import or override assumed (class defaults, a re-derived MoE layer pattern)
        **({"model_notes": job.model.notes} if job.model.notes else {}),
    }


@click.group("job")
def job_group() -> None:
    """Job files: the model, the cluster, the convergence settings and the pinned axes.

    Example: primus job show examples/llama3.1-70b-mi300x.yaml
    """


@job_group.command("show")
@click.argument("job_file", type=click.Path(dir_okay=False))
@stack_option
@format_option("table", "json")
@guarded
def job_show(job_file: str, stack: str | None, fmt: str) -> None:
    """Show the resolved, validated job with defaults applied: its stack and release, and every
    setting the stack supplied (`assumed`).

    Example: primus job show examples/llama3.1-70b-mi300x.yaml --stack megatron-bridge --format json
    """
    job = read_job(job_file, stack)
    from primus.solver.api import Question

    Question(job)  # validated as `fit` reads it: its rules, and what the ledger refuses (recompute layer ids)
    doc = job_summary(job)
    if fmt == "json":
        emit_json(doc)
        return
    rows = [(k, json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in doc.items()]
    stdout_console().print(table("Job", ["field", "value"], rows))


@click.group("schema")
def schema_group() -> None:
    """Print machine-readable schemas.

    Example: primus schema job > job.schema.json
    """


@schema_group.command("job")
@guarded
def schema_job() -> None:
    """The JSON Schema of a job file.

    Example: primus schema job > job.schema.json
    """
    emit_json(JobSpec.model_json_schema())
