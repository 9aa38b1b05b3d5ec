"""Regenerate the comparison tables of docs/memory.md.

Run: python benchmarks/memory_tables.py > /tmp/memory_tables.md
Sections: the model-state bytes against Megatron-LM's formula, activations against Korthikanti et al.
2022, and peak memory against the published measurements in ground_truth/runs_dev.csv (rows with a
`peak_memory_gib`, each source's framework reproduced: torchtitan's FSDP2 and op-level selective
checkpointing). The torch-trace table comes from benchmarks/trace_memory_table.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from primus.fidelity.jobs import build
from primus.fidelity.runs import read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.test_ledger import megatron_weight_and_optimizer_bytes  # noqa: E402

GT = ROOT.parent / "shared" / "ground_truth" / "runs_dev.csv"


def megatron_table() -> None:
    print("| model | GPUs | TP | PP | CP | sharding | params on stage 0 | primus W+G+O bytes | Megatron formula "
          "| diff |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    cases = [("llama3.1-70b", 16, 8, 1, 1, "dist_opt"), ("llama3.1-70b", 64, 8, 1, 2, "dist_opt"),
             ("llama3.1-8b", 8, 2, 1, 1, "dist_opt"), ("llama3.1-8b", 16, 1, 1, 1, "none"),
             ("llama2-7b", 8, 4, 1, 1, "dist_opt"), ("mistral-7b", 32, 2, 1, 2, "dist_opt")]
    for slug, gpus, tp, pp, cp, sharding in cases:
        job = job_from_mapping({"model": slug, "hardware": "mi300x", "gpus": gpus, "seq_len": 8192,
                                "global_batch_size": 512, "parallel": {"tp": tp, "pp": pp, "cp": cp, "mbs": 1,
                                                                       "sp": tp > 1, "recompute": "full",
                                                                       "sharding": sharding}}, slug)
        s0 = MemoryModel(job).evaluate(pinned_layout(job)).stages[0]
        m = job.model
        spec = {"hidden_size": m.hidden_size, "num_layers": m.num_layers,
                "num_attention_heads": m.num_attention_heads, "query_groups": m.query_groups, "head_dim": m.head_dim,
                "swiglu": m.swiglu, "ffn_hidden_size": m.ffn_hidden_size, "vocab_size": m.vocab_size,
                "untied": m.untie_embeddings_and_output_weights}
        dp = gpus // (tp * pp * cp)
        ref = megatron_weight_and_optimizer_bytes(spec, tp, pp, dp, cp, sharding == "dist_opt")
        ours = s0.breakdown["weights"] + s0.breakdown["gradients"] + s0.breakdown["optimizer"]
        print(f"| {slug} | {gpus} | {tp} | {pp} | {cp} | {sharding} | {s0.params:,} | {ours:,} | {ref:,.0f} | "
              f"{100 * (ours / ref - 1):+.3f}% |")


def korthikanti_table() -> None:
    print("| model | TP | setting | primus bytes/layer | Korthikanti formula | diff |")
    print("|---|---:|---|---:|---:|---:|")
    for slug in ("gpt-22b", "gpt3-175b", "gpt-530b", "gpt-1t"):
        for sp, rec, label in ((False, "none", "TP"), (True, "none", "TP+SP"), (True, "selective", "TP+SP+selective")):
            job = job_from_mapping({"model": slug, "hardware": "a100-80gb", "gpus": 64, "seq_len": 2048,
                                    "global_batch_size": 64, "precision": "fp16",
                                    "kernels": {"flash_attention": False},
                                    "parallel": {"tp": 8, "pp": 1, "cp": 1, "mbs": 1, "sp": sp, "recompute": rec,
                                                 "sharding": "dist_opt"}}, slug)
            r = MemoryModel(job).evaluate(pinned_layout(job), strict=False)
            got = r.stages[0].terms["activations.dense_layers"] / job.model.num_layers
            s, h, a, t = 2048, job.model.hidden_size, job.model.num_attention_heads, 8
            ref = {"TP": s * h * (10 + 24 / t + 5 * a * s / (h * t)), "TP+SP": s * h / t * (34 + 5 * a * s / h),
                   "TP+SP+selective": 34 * s * h / t}[label]
            print(f"| {slug} | {t} | {label} | {got:,.0f} | {ref:,.0f} | {100 * (got / ref - 1):+.3f}% |")


def measured_table() -> None:
    """The complete published rows with a measured peak, each built exactly as `primus validate` builds it
    (the source's rule for its release: framework, sharding, cross-entropy form)."""
    if not GT.exists():
        print("(ground truth not available)")
        return
    print("| run | GPU | GPUs | layout | loss | primus peak GiB | measured GiB | error | fits |")
    print("|---|---|---:|---|---|---:|---:|---:|---|")
    for row in read_runs(GT):
        if not row.complete or row.measured_peak_gib is None:
            continue
        job = build(row).project
        report = MemoryModel(job).evaluate(pinned_layout(job))
        ours = report.peak_bytes / 2**30
        meas = row.measured_peak_gib
        k = job.spec.kernels
        loss = "fused" if k.cross_entropy_fusion else "eager" if k.eager_cross_entropy else "in place"
        layout = f"TP{row['tp']} PP{row['pp']} CP{row['cp']} MBS{row['mbs']} {row['sharding']} {row['recompute']}"
        print(f"| {row.run_id} | {row['gpu']} | {row['num_gpus']} | {layout} | {loss} | {ours:.2f} | "
              f"{meas:.2f} | {100 * (ours / meas - 1):+.1f}% | {'yes' if report.fits else 'NO'} |")


if __name__ == "__main__":
    print("## Model state against Megatron-LM's formula\n")
    megatron_table()
    print("\n## Activations against Korthikanti et al. 2022\n")
    korthikanti_table()
    print("\n## Peak memory against published measurements\n")
    measured_table()
