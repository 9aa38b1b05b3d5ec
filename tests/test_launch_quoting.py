"""A Megatron-LM export is shell-safe: a bracketed list is quoted, so bash does not glob it.

Megatron-LM reads ``--moe-layer-freq`` as a Python expression (megatron/training/arguments.py
``moe_freq_type``: an int, or a list literal such as ``[1,1,0]``). Unquoted, ``[1,1,...]`` is a bash
glob bracket expression: with a file named ``1`` in the working directory bash replaces the argument by
``1`` (every layer MoE became "every layer", by luck, and ``[0,1]`` with a file ``0`` becomes ``0``).
The review's job: a Hugging Face qwen3_moe config (48 layers, every one MoE: decoder_sparse_step 1).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner

from primus.cli.main import cli

QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
             "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
             "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "max_position_embeddings": 40960, "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000.0, "attention_bias": False, "norm_topk_prob": True}
JOB = """model: qwen3moe.json
hardware: b200
nodes: 2
seq_len: 4096
global_batch_size: 512
precision: fp8
fp8_recipe: mxfp8
parallel: {tp: 1, pp: 1, vp: 1, cp: 1, ep: 16, etp: 1, mbs: 2, sp: false, recompute: none, sharding: dist_opt}
"""


def _export(tmp_path: Path) -> str:
    (tmp_path / "qwen3moe.json").write_text(json.dumps(QWEN3_MOE))
    (tmp_path / "job.yaml").write_text(JOB)
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "job.yaml"), "--to", "megatron"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_list_valued_option_is_quoted(tmp_path: Path) -> None:
    line = next(x for x in _export(tmp_path).splitlines() if "--moe-layer-freq" in x)
    assert line.strip().rstrip(" \\") == "--moe-layer-freq '[" + ",".join(["1"] * 48) + "]'"


def test_bash_passes_the_list_through_with_a_file_named_1_beside_it(tmp_path: Path) -> None:
    line = next(x for x in _export(tmp_path).splitlines() if "--moe-layer-freq" in x)
    (tmp_path / "1").write_text("")
    out = subprocess.run(["bash", "-c", "printf '%s\\n' " + line.strip().rstrip(" \\")], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["--moe-layer-freq", "[" + ",".join(["1"] * 48) + "]"]
