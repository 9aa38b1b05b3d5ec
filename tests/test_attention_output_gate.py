"""Megatron-Core's attention output gate and weightless q/k norms reach every count (issue 21: torchtitan's
Muse Glimmer, whose attention has a sigmoid ``o_gate`` and ``elementwise_affine=False`` q/k norms).

Megatron-LM d98e8a6 megatron/core/transformer/attention.py: with ``attention_output_gate`` the QKV
projection also yields a gate of heads × head_dim, and ``_apply_output_gate`` computes
``x * torch.sigmoid(gate.float())`` before ``linear_proj``."""

from __future__ import annotations

from typing import Any

from primus.catalog.models import resolve_model
from primus.launch.megatron import export_megatron
from primus.memory.activations import ActContext, layer_inventory
from primus.memory.numerics import numerics_for
from primus.projection.ops import OpContext, layer_block
from primus.specs.flops import flops_per_token
from primus.specs.model import ModelSpec
from primus.specs.params import count_params

LLAMA = resolve_model("llama3-8b", "test")  # 32 layers, h 4096, 32 heads of 128, 8 query groups
CTX = ActContext(seq_len=4096, mbs=1, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None))


def variant(spec: ModelSpec, **changes: Any) -> ModelSpec:
    return ModelSpec.model_validate({**spec.model_dump(), **changes})


def test_the_gate_adds_heads_times_head_dim_outputs_to_the_qkv_projection() -> None:
    gated = variant(LLAMA, attention_output_gate=True)
    # 32 layers x 4096 inputs x (32 heads x 128) gate outputs = 536,870,912 parameters
    assert count_params(gated).total - count_params(LLAMA).total == 32 * 4096 * 32 * 128
    # and two FLOPs per weight per token in the forward GEMMs
    assert flops_per_token(gated, 4096).gemm - flops_per_token(LLAMA, 4096).gemm == 2 * 32 * 4096 * 32 * 128


def test_the_gate_keeps_its_fp32_sigmoid_and_the_gated_product_for_backward() -> None:
    gated = variant(LLAMA, attention_output_gate=True)
    extra = sum(s.bytes for s in layer_inventory(gated, "dense", CTX)) - \
        sum(s.bytes for s in layer_inventory(LLAMA, "dense", CTX))
    # 4096 tokens x 4096 gate features: the fp32 sigmoid (4 B) and linear_proj's own bf16 input (2 B)
    assert extra == 4096 * 4096 * (4 + 2)
    names = {s.name for s in layer_inventory(gated, "dense", CTX)}
    assert {"attention_output_gate.sigmoid", "linear_proj.input"} <= names


def test_the_gate_is_timed_in_the_projection() -> None:
    gated = variant(LLAMA, attention_output_gate=True)
    ctx = OpContext(CTX, ep=1, padded_vocab=gated.padded_vocab_size(1), low_precision=False)
    block = layer_block(gated, "dense", ctx)
    qkv = next(g for g in block.gemms if g.name == "attention.linear_qkv")
    assert qkv.n == (32 + 2 * 8) * 128 + 32 * 128  # q, k, v and the gate
    assert "attention.output_gate" in {m.name for m in block.memops}


def test_weightless_qk_norms_hold_no_parameters_but_keep_their_saved_inputs() -> None:
    normed = variant(LLAMA, qk_layernorm=True)
    scaleless = variant(normed, qk_layernorm_affine=False)
    # Megatron's per-head q and k norms hold 2 x 128 weights per layer; elementwise_affine=False holds none
    assert count_params(normed).total - count_params(scaleless).total == 32 * 2 * 128
    assert layer_inventory(normed, "dense", CTX) == layer_inventory(scaleless, "dense", CTX)


def test_megatron_export_writes_the_gate_and_says_it_cannot_write_weightless_norms() -> None:
    from primus.job import job_from_mapping
    from primus.memory.evaluate import pinned_layout

    model = {"base": "llama3-8b", "name": "gated", "attention_output_gate": True, "qk_layernorm": True,
             "qk_layernorm_affine": False}
    job = job_from_mapping({"model": model, "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                            "global_batch_size": 8, "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1,
                                                                 "recompute": "full", "sharding": "dist_opt"}}, "test")
    exported = export_megatron(job, pinned_layout(job))
    assert "--attention-output-gate" in exported.text
    assert any("qk_layernorm_affine" in n for n in exported.notes)


def test_a_megatron_launch_with_the_gate_imports_with_it() -> None:
    from primus.job import job_from_mapping
    from primus.launch.megatron import import_megatron
    from primus.memory.evaluate import pinned_layout

    model = {"base": "llama3-8b", "name": "gated", "attention_output_gate": True}
    job = job_from_mapping({"model": model, "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                            "global_batch_size": 8, "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1,
                                                                 "recompute": "full", "sharding": "dist_opt"}}, "test")
    text = export_megatron(job, pinned_layout(job)).text
    config = import_megatron(text, "exported.sh", hardware="h100-80gb", nodes=1)
    assert resolve_model(config.job["model"], "test").attention_output_gate
