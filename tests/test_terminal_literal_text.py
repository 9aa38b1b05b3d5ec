"""Text from input reaches the terminal as written, and assumption lines say what the ledger counts
(review 47, L5).

The console reads no markup unless a call asks for it (`primus.cli.output.SafeConsole`), so escaping
markup for a plain print only adds backslashes: `[red]` became `\\[red]`, a file `a\\[b].json` became
`a\\\\\\[b].json`.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import yaml

from tests.conftest import REPO

LLAMA_3_1_8B = Path(__file__).parent / "data" / "hf" / "llama-Llama-3.1-8B" / "config.json"


def test_a_model_source_with_brackets_is_printed_verbatim(run_cli, tmp_path: Path):
    model = yaml.safe_load((REPO / "models" / "llama3.1-8b.yaml").read_text(encoding="utf-8"))
    model["source"] = "[red]x[/red] from a\\[b]"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(model), encoding="utf-8")
    code, out, _ = run_cli("models", "show", str(path))
    assert code == 0
    assert "source: [red]x[/red] from a\\[b]\n" in out


def test_a_config_path_with_a_backslash_and_brackets_is_printed_verbatim(run_cli, tmp_path: Path):
    path = tmp_path / "a\\[b].json"
    shutil.copy(LLAMA_3_1_8B, path)
    out = run_cli("models", "show", str(path))[1]
    assert f"read from {path}\n" in out


def test_no_plain_print_escapes_markup():
    """A print that escapes markup (`lit`, `escape`) must ask for markup, or its backslashes show."""
    offenders = []
    for file in sorted((REPO / "primus").rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "print"):
                continue
            escapes = any(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None))
                          in ("lit", "escape", "markup_escape") for n in ast.walk(node))
            if escapes and not any(k.arg == "markup" for k in node.keywords):
                offenders.append(f"{file.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


# Llama 3.1 8B at TP2: 32 layers × (2 × 4096² + 2 × 4096 × 1024 + 3 × 4096 × 14336) / 2 = 3,489,660,928 GEMM
# weights per rank; tensorwise FP8 keeps each as an FP8 weight and its FP8 transpose (2 B/param).
FP8_JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64,
           "precision": "fp8", "fp8_recipe": "tensorwise",
           "parallel": {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                        "sharding": "dist_opt"}}


def test_the_fp8_weights_line_says_bf16_weights_and_the_fp8_cache_the_ledger_counts(run_cli, write_job):
    doc = json.loads(run_cli("memory", write_job(FP8_JOB), "--format", "json")[1])
    assert ("FP8 compute with bf16 weights 2 B/param, plus a 2 B/param FP8 cache of every GEMM weight "
            "(fp8-tensorwise); main gradients 4 B/param (fp32)") in doc["assumptions"]
    assert doc["stages"][0]["terms"]["weights.low_precision_cache"] == 2 * 3_489_660_928


def test_fp8_param_gather_says_the_gemm_weights_have_no_bf16_copy(run_cli, write_job):
    doc = json.loads(run_cli("memory", write_job({**FP8_JOB, "fp8_param_gather": True}), "--format", "json")[1])
    assert ("FP8 compute: GEMM weights only in FP8 (--fp8-param-gather), 2 B/param FP8 cache of every GEMM weight "
            "(fp8-tensorwise); other weights bf16 2 B/param; main gradients 4 B/param (fp32)") in doc["assumptions"]


def test_a_bf16_job_says_bf16_weights(run_cli, write_job):
    doc = json.loads(run_cli("memory", write_job({**FP8_JOB, "precision": "bf16", "fp8_recipe": None}),
                             "--format", "json")[1])
    assert "bf16 weights 2 B/param; main gradients 4 B/param (fp32)" in doc["assumptions"]
