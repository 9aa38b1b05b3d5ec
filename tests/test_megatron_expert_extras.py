"""gpt-oss's clamped GLU and expert biases run eager work around Megatron-Core's fused expert kernels
(issue 19, item 1; read at core_v0.16.0, the same at the Megatron-Core of every Megatron-Bridge release
25.11 to 26.06): fused_bias_geglu.py `weighted_bias_quick_geglu_impl` clamps and concatenates the FC1
output before its fused GLU (lines 424-432), and `TEGroupedMLP._apply_bias` adds the FC2 biases in a
Python loop over the local experts (experts.py lines 608-626). The projection prices both, and the ledger
keeps the concatenated copy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from primus.catalog.hf import model_from_hf_config
from primus.catalog.models import resolve_model
from primus.memory.activations import ActContext, layer_inventory, routed_tokens
from primus.memory.numerics import numerics_for
from primus.projection.ops import ACT, FP32, OpContext, layer_block
from primus.specs.model import ModelSpec

HF = Path(__file__).parent / "data" / "hf" / "gpt_oss-gpt-oss-120b" / "config.json"


def _ctx(ep: int = 8, dispatcher: str = "alltoall", te_grouped: bool = True, mbs: int = 1,
         framework: str = "megatron") -> OpContext:
    act = ActContext(seq_len=4096, mbs=mbs, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None),
                     framework=framework)
    m = resolve_model("gpt-oss-120b", "test")
    return OpContext(act, ep, m.padded_vocab_size(1), False, dispatcher, per_expert_launches=te_grouped)


def _ops(m: ModelSpec, c: OpContext) -> dict[str, object]:
    return {op.name: op for op in layer_block(m, "moe", c).memops}


def test_gpt_oss_clamps_at_7_in_the_catalog_and_from_its_hf_config() -> None:
    assert resolve_model("gpt-oss-120b", "test").activation_func_clamp_value == 7.0
    assert resolve_model("gpt-oss-20b", "test").activation_func_clamp_value == 7.0
    data = json.loads(HF.read_text())
    assert model_from_hf_config(data, str(HF)).activation_func_clamp_value == data["swiglu_limit"] == 7.0


def test_the_clamp_moves_16f_bytes_forward_and_30f_backward_inside_moe_act() -> None:
    # forward: two clamps (read and write f each) and the cat (read and write 2f); backward: clamp_backward's
    # ge/le/logical_and_/where (14 bytes an element of the two-sided half, 8 of the gate half), the chunk's cat
    m, c = resolve_model("gpt-oss-120b", "test"), _ctx()
    r, f = routed_tokens(m, c.act), m.moe_ffn_hidden_size or 0
    clamp = _ops(m, c)["mlp.experts.activation_clamp"]
    assert (clamp.fwd_bytes, clamp.bwd_bytes) == (r * f * 16, r * f * 30)  # type: ignore[attr-defined]
    assert (clamp.launches, clamp.bwd_launches) == (3, 7)  # type: ignore[attr-defined]
    assert clamp.module == "moe_act"  # type: ignore[attr-defined]


def test_the_fc2_bias_loop_costs_kernels_per_local_expert_and_fp32_under_flex() -> None:
    m = resolve_model("gpt-oss-120b", "test")
    c = _ctx(ep=8)
    r, h, local = routed_tokens(m, c.act), m.hidden_size, 128 // 8
    bias = _ops(m, c)["mlp.experts.bias_add"]
    assert (bias.fwd_bytes, bias.bwd_bytes) == (r * h * 6 * ACT, r * h * 8 * ACT)  # type: ignore[attr-defined]
    assert (bias.launches, bias.bwd_launches) == (2 * local + 1, 4 * local + 1)  # type: ignore[attr-defined]
    flex = _ops(m, _ctx(ep=8, dispatcher="flex"))["mlp.experts.bias_add"]
    assert (flex.fwd_bytes, flex.bwd_bytes) == (r * h * 28, r * h * 40)  # type: ignore[attr-defined]
    assert (flex.launches, flex.bwd_launches) == (2 * local + 2, 5 * local + 2)  # type: ignore[attr-defined]
    assert FP32 == 2 * ACT


def test_the_host_issues_every_kernel_of_the_loops() -> None:
    from primus.projection import Projector
    from primus.projection.cost import MEM

    job = _oss_job("gb300", precision="bf16", recipe=None, grouped="te")
    plain = _oss_job("gb300", precision="bf16", recipe=None, grouped="te")
    plain = dataclasses.replace(plain, model=job.model.model_copy(
        update={"activation_func_clamp_value": None, "add_bias_linear": False}))
    from primus.memory.evaluate import pinned_layout

    layout = pinned_layout(job)
    calls = []
    for j in (job, plain):
        p = Projector(j)
        calls.append(p.block_cost("moe", layout, p.context(layout), p.groups(layout)).calls[MEM])
    local = 128 // 64
    assert calls[0] - calls[1] == (3 + 7) + (2 * local + 1) + (4 * local + 1)


def test_no_extras_without_te_grouped_mlp_or_without_the_features() -> None:
    m = resolve_model("gpt-oss-120b", "test")
    assert not {"mlp.experts.activation_clamp", "mlp.experts.bias_add"} & set(_ops(m, _ctx(te_grouped=False)))
    plain = m.model_copy(update={"activation_func_clamp_value": None, "add_bias_linear": False})
    assert not {"mlp.experts.activation_clamp", "mlp.experts.bias_add"} & set(_ops(plain, _ctx()))
    qwen = resolve_model("qwen3-30b-a3b", "test")
    assert not {"mlp.experts.activation_clamp", "mlp.experts.bias_add"} & set(_ops(qwen, _ctx()))


def test_the_ledger_keeps_the_concatenated_fc1_copy_until_moe_act_recompute_frees_it() -> None:
    m, c = resolve_model("gpt-oss-120b", "test"), _ctx()
    saved = {s.name: s for s in layer_inventory(m, "moe", c.act)}
    copy = saved["experts.activation_clamp.output"]
    fc1 = saved["experts.linear_fc1.output"]
    assert copy.elements == fc1.elements == routed_tokens(m, c.act) * 2 * (m.moe_ffn_hidden_size or 0)
    assert copy.freed_by == "moe_act"
    other = layer_inventory(m, "moe", dataclasses.replace(c.act, framework="torchtitan"))
    assert "experts.activation_clamp.output" not in {s.name for s in other}


def _oss_job(hardware: str, precision: str = "fp8", recipe: str | None = "mxfp8", grouped: str = "te_fused") -> Any:
    from primus.job import job_from_mapping

    data: dict[str, Any] = {"model": "gpt-oss-120b", "hardware": hardware, "gpus": 64, "seq_len": 4096,
                            "global_batch_size": 1280, "precision": precision, "moe": {"grouped_gemm": grouped},
                            "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 64, "etp": 1, "mbs": 4,
                                         "recompute": "none", "sharding": "dist_opt"}}
    if recipe is not None:
        data["fp8_recipe"] = recipe
    return job_from_mapping(data, "job.yaml")


def test_te_fused_is_refused_off_mxfp8_and_off_compute_capability_10() -> None:
    import pytest

    from primus.errors import InputError

    assert _oss_job("gb300").spec.moe.grouped_gemm == "te_fused"
    with pytest.raises(InputError, match=r"moe\.grouped_gemm.*MXFP8"):
        _oss_job("gb300", recipe="tensorwise")
    with pytest.raises(InputError, match=r"moe\.grouped_gemm.*MXFP8"):
        _oss_job("gb300", precision="bf16", recipe=None)
    with pytest.raises(InputError, match=r"moe\.grouped_gemm.*compute capability 10"):
        _oss_job("h100-80gb")


def test_te_fused_keeps_no_clamped_copy_in_the_ledger() -> None:
    from primus.memory.evaluate import MemoryModel, pinned_layout

    for grouped, kept in (("te_fused", False), ("te", True)):
        job = _oss_job("gb300", grouped=grouped)
        ctx = MemoryModel(job).act_context(pinned_layout(job))
        assert ctx.fused_grouped_mlp is (not kept)
        names = {x.name for x in layer_inventory(job.model, "moe", ctx)}
        assert ("experts.activation_clamp.output" in names) is kept


def test_te_fused_is_refused_with_expert_tp_and_before_megatron_core_0_18() -> None:
    import pytest

    from primus.errors import InputError
    from primus.job import job_from_mapping
    from primus.solver.api import Question

    job = job_from_mapping({"model": "gpt-oss-120b", "hardware": "gb300", "gpus": 64, "seq_len": 4096,
                            "global_batch_size": 1280, "precision": "fp8", "fp8_recipe": "mxfp8",
                            "moe": {"grouped_gemm": "te_fused"},
                            "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 64, "mbs": 4, "recompute": "none",
                                         "sharding": "dist_opt"}}, "job.yaml")
    assert {lay.layout.etp for lay in Question(job).legal()} == {1}  # rule fused-grouped-mlp-needs-etp-1
    with pytest.raises(InputError, match=r"moe\.grouped_gemm.*core_v0\.18\.0"):
        job_from_mapping({"stack": "megatron-lm@core_v0.16.1", "model": "gpt-oss-120b", "hardware": "gb300",
                          "gpus": 64, "seq_len": 4096, "global_batch_size": 1280, "precision": "fp8",
                          "fp8_recipe": "mxfp8", "moe": {"grouped_gemm": "te_fused"}}, "job.yaml")


def test_te_fused_pays_no_eager_clamp_or_bias_loop_and_one_launch_per_grouped_gemm() -> None:
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector, load_profile

    fused, plain = _oss_job("gb300"), _oss_job("gb300", grouped="te")
    prof = load_profile(fused.cluster)
    p = Projector(fused, prof)
    layout = pinned_layout(fused)
    names = {op.name for op in layer_block(fused.model, "moe", p.context(layout)).memops}
    # the GLU runs in the FC1 grouped GEMM's epilogue: no activation kernel of its own either
    assert not {"mlp.experts.activation_clamp", "mlp.experts.bias_add", "mlp.experts.activation"} & names
    q = Projector(plain, prof)
    assert {"mlp.experts.activation_clamp", "mlp.experts.bias_add"} <= \
        {op.name for op in layer_block(plain.model, "moe", q.context(pinned_layout(plain))).memops}
    assert p.project(layout).step_time_s < q.project(pinned_layout(plain)).step_time_s


def test_megatron_bridge_26_06_mxfp8_gpt_oss_presets_on_gb300_build_the_fused_experts() -> None:
    # v0.5.0 gpt_oss_workload_base_configs.py GPT_OSS_120B_PRETRAIN_CONFIG_GB300_FP8_MX_V2 (lines 201-220):
    # cutedsl_fused_grouped_mlp=True, which overrides.py lines 238-243 turn into use_transformer_engine_op_fuser
    from primus.fidelity.jobs import build
    from primus.fidelity.runs import bundled_runs_path, read_runs

    row = next(r for r in read_runs(bundled_runs_path()) if r.run_id == "MB26.06-DGX-GB300-GPT-OSS-120B-MXFP8")
    jobs = build(row)
    assert jobs.project.spec.moe.grouped_gemm == "te_fused"
    assert any(a.startswith("experts te_fused (the stack's recipe") for a in jobs.assumed)
    bf16 = next(r for r in read_runs(bundled_runs_path()) if r.run_id == "MB25.11-DGX-B200-GPT-OSS-120B-BF16")
    assert build(bf16).project.spec.moe.grouped_gemm == "te"


def test_the_megatron_export_writes_the_clamp_and_import_reads_it_back() -> None:
    # core_v0.15.0 megatron/training/arguments.py line 1650 adds --activation-func-clamp-value; from
    # core_v0.16.0 it is the TransformerConfig field's generated flag (not in the factory's exclude list)
    from primus.job import job_from_mapping
    from primus.launch.megatron import export_megatron, import_megatron
    from primus.memory.evaluate import pinned_layout

    job = job_from_mapping({"stack": "megatron-bridge@26.02", "model": "gpt-oss-120b", "hardware": "b200", "gpus": 64,
                            "seq_len": 4096, "global_batch_size": 512, "precision": "bf16",
                            "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False,
                                         "recompute": "full", "sharding": "dist_opt"}}, "job.yaml")
    text = export_megatron(job, pinned_layout(job)).text
    assert "--activation-func-clamp-value 7.0" in text
    config = import_megatron(text, "exported.sh", hardware="b200", nodes=8)
    assert resolve_model(config.job["model"], "test").activation_func_clamp_value == 7.0
