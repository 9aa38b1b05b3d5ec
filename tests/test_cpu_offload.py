"""CPU activation offloading (Megatron-Core `cpu_offloading`, Transformer Engine's offload handler) in the
byte ledger, the rules and the step time; Megatron-Bridge 25.11's Llama 3 70B FP8 presets on GB200/GB300
offload 40 and 20 of 80 layers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from primus.errors import InputError
from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.activations import layer_inventory
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.offload import reloaded_layers, resident_layers
from primus.projection.cost import HOST, N_CAT
from primus.projection.offload import with_offload
from primus.projection.project import project
from primus.projection.stages import ChunkWork
from primus.solver.api import Question
from primus.stacks.core import resolve_stack

ROWS = {r.run_id: r for r in read_runs(bundled_runs_path())}
# Megatron-Bridge 25.11 preset LLAMA3_70B_GB200_FP8_CS: 64 GPUs, MBS 2, Megatron-FSDP, 8192 tokens
GB200_70B = {"stack": "megatron-bridge@25.11", "model": "llama3-70b", "hardware": "gb200", "gpus": 64,
             "seq_len": 8192, "global_batch_size": 256, "precision": "fp8",
             "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 2, "sp": False, "recompute": "none", "sharding": "fsdp"}}
# One Llama 3 70B layer at 16,384 tokens (MBS 2), TP 1, FP8 (tensorwise): norm input 2 B + fp32 statistic +
# FP8 normalised output, q/k/v 2 B (64 + 8 + 8 heads of 128), attention output 2 B + its FP8 copy for the
# projection, fp32 log-sum-exp per head, MLP norm (2 B + fp32 + FP8), FC1 output 2 B (2 x 28672), SwiGLU
# output in FP8 (28672).
T = 16384
LAYER = (T * 8192 * 2 + T * 4 + T * 8192 + T * (8192 + 1024 + 1024) * 2 + T * 8192 * 2 + T * 8192 + T * 64 * 4
         + T * 8192 * 2 + T * 4 + T * 8192 + T * 57344 * 2 + T * 28672)


def _memory(offloaded: int, **extra: Any) -> Any:
    job = job_from_mapping({**GB200_70B, "cpu_offloading": {"num_layers": offloaded}, **extra}, "t")
    return MemoryModel(job).evaluate(pinned_layout(job))


def test_transformer_engine_frees_the_last_offloaded_layer_before_the_loss_and_reloads_it_after() -> None:
    # TE 2.9 cpu_offload.py (v2.9 70f5366): offload group i is freed at the commit after layer
    # (L // K)(i + 1) - 1 (line 345, 516), so group K - 1 goes at the commit after layer L - 1, which
    # Megatron-Core places before the final norm (0d8e071 transformer_block.py 725-746); the commit's
    # backward reloads it (line 641) after the loss's backward, before layer L - 1's
    assert resident_layers(tuple(range(80)), 40) == tuple(range(40, 80))
    assert reloaded_layers(tuple(range(80)), 40) == (39,)
    assert resident_layers(tuple(range(80)), 0) == tuple(range(80)) and reloaded_layers(tuple(range(80)), 0) == ()


@pytest.mark.parametrize(("offloaded", "resident"), [(0, 80), (20, 60), (40, 40)])
def test_offloading_k_of_80_layers_leaves_80_minus_k_layers_beside_the_loss(offloaded: int, resident: int) -> None:
    assert LAYER == 3_896_639_488
    report = _memory(offloaded)
    assert report.stages[0].terms["activations.dense_layers"] == resident * LAYER


def test_a_gb200_preset_layer_keeps_what_transformer_engine_2_9_and_megatron_core_save() -> None:
    # Read tensor by tensor (docs/stacks.md), FP8 current scaling on Blackwell at 16,384 tokens, TP 1:
    # TE v2.9 (70f5366) LayerNormLinear keeps its bf16 input, the fp32 RMSNorm statistic and its FP8 output
    # column-wise only (module/layernorm_linear.py lines 404-421, 448-458); FusedAttnFunc keeps q, k, v,
    # the output (bf16: fp8_dot_product_attention off, Megatron-LM 0d8e071 transformer_config.py line 419)
    # and the fp32 softmax statistics (attention/dot_product_attention/backends.py lines 1236-1247,
    # 1298-1318), v copied out of the QKV output (utils.py lines 2000-2003), which is therefore not kept;
    # Linear keeps its FP8 input column-wise only (module/linear.py lines 371-398), with no transpose on
    # Blackwell (tensor/storage/float8_tensor_storage.py lines 204-209); Megatron-Core's SwiGLU keeps its
    # bf16 input (transformer/mlp.py lines 188-196, activation_func_fp8_input_store False;
    # fusions/fused_bias_swiglu.py lines 163-166).
    job = job_from_mapping({**GB200_70B, "fp8_recipe": "tensorwise", "cpu_offloading": {"num_layers": 40}}, "t")
    model = MemoryModel(job)
    inventory = {s.name: s.bytes for s in layer_inventory(job.model, "dense", model.act_context(pinned_layout(job)))}
    assert inventory == {
        "input_layernorm.input": T * 8192 * 2, "input_layernorm.stats": T * 4, "input_layernorm.output": T * 8192,
        "core_attention.q": T * 8192 * 2, "core_attention.k": T * 1024 * 2, "core_attention.v": T * 1024 * 2,
        "core_attention.output": T * 8192 * 2, "linear_proj.input": T * 8192,
        "core_attention.softmax_lse": T * 64 * 4,
        "pre_mlp_layernorm.input": T * 8192 * 2, "pre_mlp_layernorm.stats": T * 4, "pre_mlp_layernorm.output": T * 8192,
        "mlp.linear_fc1.output": T * 57344 * 2, "mlp.activation.output": T * 28672,
    }
    assert sum(inventory.values()) == LAYER


def test_the_reloaded_layer_counts_only_where_the_last_layers_backward_outweighs_the_loss() -> None:
    # Llama 3 70B at MBS 2 with Megatron-Core's native fused loss: the loss keeps 4,739,760,128 B (bf16
    # logits over the 128,256 vocabulary, the final norm and the output layer's input) plus one bf16 logits
    # transient of 4,202,692,608 B; the last layer's backward adds the reloaded layer (3,896,639,488 B) and
    # its working set (the FC1 output's gradient and the layer input's, 2,147,483,648 B): 8.94 GB against
    # 6.04 GB, so the loss makes the peak
    native = {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "native"}
    report = _memory(40, kernels=native)
    terms = report.stages[0].terms
    assert terms["other.logits_and_loss"] == 4_739_760_128
    assert terms["activations.backward_working_set"] == 4_202_692_608
    assert terms["activations.offload_reload"] == 0
    # with the vocabulary a tenth as large the last layer's backward makes the peak: the reloaded layer
    # and that layer's working set replace the loss and its transient
    small = job_from_mapping({**GB200_70B, "model": {"base": "llama3-70b", "vocab_size": 12_800},
                              "cpu_offloading": {"num_layers": 40}, "kernels": native}, "t")
    small_terms = MemoryModel(small).evaluate(pinned_layout(small)).stages[0].terms
    gap = (LAYER + 2_147_483_648 - small_terms["other.logits_and_loss"]
           - small_terms["activations.backward_working_set"])
    assert gap > 0 and small_terms["activations.offload_reload"] == gap


def test_weight_offloading_alone_moves_nothing() -> None:
    # TE get_cpu_offload_context: "Offloading weights is deprecated. Using offload_weights=True does not
    # have any effect"
    plain = _memory(0)
    weights_only = _memory(40, cpu_offloading={"num_layers": 40, "activations": False, "weights": True})
    assert weights_only.peak_bytes == plain.peak_bytes


def test_megatron_core_offloads_fewer_layers_than_the_model_has_and_only_at_pp_1_without_recompute() -> None:
    with pytest.raises(InputError, match="not below the model's 80"):
        _memory(80)
    with pytest.raises(InputError, match="only without pipeline parallelism"):
        _memory(20, parallel={**GB200_70B["parallel"], "recompute": "selective"})
    job = job_from_mapping({"model": {"base": "llama3.1-8b", "num_layers": 8}, "hardware": "h100-80gb", "nodes": 1,
                            "seq_len": 4096, "global_batch_size": 16, "cpu_offloading": {"num_layers": 3}}, "t")
    layouts = Question(job).candidates.parallel_dicts()
    assert layouts and {(d["pp"], d["recompute"]) for d in layouts} == {(1, "none")}  # rule cpu-offload


@pytest.mark.parametrize(("release", "gbs", "preset"), [
    ("25.09", 128, "perf_matrix.gb200.num_gpus_64.fp8_cs"),  # v0.1.0rc3 llama3_70b_llm_pretrain.yaml
    ("25.11", 128, "LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG"),  # v0.2.0 workload_base_configs.py
    ("26.02", 128, "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1"),  # v0.3.0: V1 GBS 128, V2 GBS 256 at 64 GPUs
    ("26.04", 256, "LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2"),
])
def test_the_70b_gb200_fp8_preset_offloads_40_layers_under_megatron_fsdp(release: str, gbs: int, preset: str) -> None:
    layout = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "mbs": 2, "gpus": 64, "gbs": gbs}
    recipe = resolve_stack(f"megatron-bridge@{release}").recipe_for("llama3-70b", "gb200", "fp8", layout)
    assert recipe is not None and preset in recipe.source
    assert (recipe.settings.cpu_offloading_num_layers, recipe.settings.sharding) == (40, "fsdp")


def test_the_gb300_preset_fits_with_its_20_offloaded_layers() -> None:
    jobs = build(ROWS["MB25.11-DGX-GB300-Llama3-70B-FP8-CS"])
    assert jobs.escalated == () and jobs.project.spec.cpu_offloading.num_layers == 20
    report = MemoryModel(jobs.project).evaluate(pinned_layout(jobs.project))
    assert report.verdict == "tight" and report.stages[0].terms["activations.dense_layers"] == 60 * LAYER


def test_the_gb200_preset_runs_as_published_without_escalation() -> None:
    # 41 layers beside the last layer's working set: 170.47 GiB, within the 172.31 GiB the default allocator's
    # 6% reserve leaves
    # (the reserve this very run bounds, stacks/allocators.yaml), so validate keeps the preset's 40 layers
    jobs = build(ROWS["MB25.11-DGX-GB200-Llama3-70B-FP8-CS"])
    assert jobs.project.spec.cpu_offloading.num_layers == 40
    assert not jobs.escalated


def test_a_copy_is_exposed_only_where_it_outruns_the_compute_of_its_pass() -> None:
    zero = (0.0,) * N_CAT
    work = ChunkWork.of((1.0, *zero[1:]), (2.0, *zero[1:]), zero, (0,) * N_CAT, (0,) * N_CAT)  # 1 s / 2 s of GEMM
    out = with_offload(work, 1.5)
    assert out.fwd[HOST] == 0.5 and out.bwd[HOST] == 0.0 and out.hidden[HOST] == 1.0 + 1.5


def test_offloading_costs_no_time_over_nvlink_c2c_and_some_over_pcie() -> None:
    gb200 = job_from_mapping({**GB200_70B, "cpu_offloading": {"num_layers": 40}}, "t")
    plain = job_from_mapping(GB200_70B, "t")
    layout = pinned_layout(gb200)
    assert project(gb200, layout).step_time_s == pytest.approx(project(plain, layout).step_time_s, rel=1e-12)
    h100 = {**GB200_70B, "hardware": "h100-80gb", "parallel": {**GB200_70B["parallel"], "mbs": 1}}
    slow = job_from_mapping({**h100, "cpu_offloading": {"num_layers": 60}}, "t")
    fast = job_from_mapping(h100, "t")
    p_slow, p_fast = project(slow, pinned_layout(slow)), project(fast, pinned_layout(fast))
    assert p_slow.breakdown["host"] > p_fast.breakdown["host"] and p_slow.step_time_s > p_fast.step_time_s


def test_hardware_without_a_host_link_cannot_time_offloading() -> None:
    job = job_from_mapping({**GB200_70B, "hardware": "b200", "gpus": 64, "cpu_offloading": {"num_layers": 40}}, "t")
    with pytest.raises(InputError, match="host_link"):
        project(job, pinned_layout(job))


def test_cpsat_counts_the_resident_layers_to_the_byte() -> None:
    from tests.test_solver_agreement import assert_rows_agree_to_the_byte, setup

    job, _, structural, _, built = setup("cpu-offload")
    rows = [i for i in range(structural.n)
            if structural.layout(i).pp == 1 and structural.layout(i).recompute == "none"]
    assert rows
    assert_rows_agree_to_the_byte(job, structural, built, rows[:: max(1, len(rows) // 6)])


def test_a_gb200_preset_job_file_through_fit_holds_41_layers_beside_the_last_layers_backward(run_cli,  # type: ignore[no-untyped-def]
                                                                                              write_job) -> None:
    # Megatron-Bridge v0.2.0 (7af9601, NeMo 25.11) LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG: 64 GB200, MBS 2,
    # Megatron-FSDP, cpu_offloading_num_layers 40, as a user types it. The backward peaks at one of two moments
    # (primus.memory.ledger.backward_moments): 40 layers beside the loss 4,739,760,128 and its own transient
    # 262,144 B (Transformer Engine's cross-entropy, which the preset runs, writes the gradient over the logits),
    # or, once the loss and output layer have run backward and freed theirs, 41 layers (the reloaded one) beside
    # the last layer's backward working set 2,147,483,648 B: the second is larger. + FSDP state 20,567,549,696 +
    # NCCL 563,085,312 + token ids 131,072 B: 183,040,468,736 B (170.47 GiB). The run ran, and bounds the default
    # allocator's reserve at 7.00% (stacks/allocators.yaml keeps 6%): 1.84 GiB of headroom, less than the
    # 11.0 GiB reserve, so fit answers yes, tight.
    job = {**GB200_70B, "fp8_recipe": "tensorwise", "cpu_offloading": {"num_layers": 40}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    answer = json.loads(out)
    assert code == 0 and answer["peak_bytes"] == 41 * LAYER + 2_147_483_648 + 20_567_549_696 \
        + 563_085_312 + 131_072 == 183_040_468_736
    assert 40 * LAYER + 4_739_760_128 + 262_144 < 41 * LAYER + 2_147_483_648
    assert answer["verdict"] == "tight" and answer["headroom_bytes"] == 1_133_933_865 + 183_883_589_376 \
        - 183_040_468_736


def test_a_gb300_preset_job_file_through_fit_fits(run_cli, write_job) -> None:
    # Megatron-Bridge v0.2.0 LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG: the same at cpu_offloading_num_layers 20
    job = {**GB200_70B, "hardware": "gb300", "fp8_recipe": "tensorwise", "cpu_offloading": {"num_layers": 20}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    answer = json.loads(out)
    assert code == 0 and answer["verdict"] == "tight"
    report = _memory(20, hardware="gb300")
    assert report.stages[0].terms["activations.dense_layers"] == 60 * LAYER
    assert answer["peak_bytes"] == report.peak_bytes
