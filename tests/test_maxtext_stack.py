"""MaxText: the stack DGX Cloud's Llama 2 70B recipe ran on, and its remat policies in the byte ledger
and the projection (issue 15).

Sources: NVIDIA/dgxc-benchmarking 35a9aec maxtext/configure.sh (bf16: save_dot_except_mlpwi, fp8:
save_dot_except_mlp, each spelled again as `remat_policy=custom` with the same names `=device`) and
AI-Hypercomputer/maxtext 02a8f5c MaxText/layers/models.py (`save_only_these_names(...)` per policy),
MaxText/layers/llama2.py (the decoder layer) and configs/base.yml (decoder_layer_input is always kept).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from primus.fidelity.jobs import build, published_job
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.activations import (
    ActContext,
    layer_bytes,
    layer_inventory,
    layer_working_bytes,
    maxtext_remat,
)
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.numerics import numerics_for
from primus.memory.units import act_units
from primus.projection import load_profile
from primus.projection.project import Projector
from primus.specs.job import SelectiveMode
from primus.stacks.core import resolve_stack, stack_of_source

LLAMA2_70B = job_from_mapping({"model": "llama2-70b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 4096,
                               "global_batch_size": 128}, "t").model
# the recipe's layout: MBS 2 x 4096 tokens, TP 1 (FSDP only), bf16
CTX = ActContext(seq_len=4096, mbs=2, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None),
                 selective="save_dot_except_mlp")
T = 2 * 4096


def test_save_dot_except_mlp_keeps_the_layer_input_q_k_v_and_the_attention_output_projection() -> None:
    # decoder_layer_input T x 8192, query_proj T x 64 heads x 128, key_proj and value_proj T x 8 x 128,
    # out_proj T x 8192, all bf16: 8192 x (8192 + 8192 + 1024 + 1024 + 8192) x 2 B = 436,207,616 B
    kept = maxtext_remat(LLAMA2_70B, CTX, "save_dot_except_mlp")
    assert [s.name for s in kept] == ["decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj"]
    assert layer_bytes(LLAMA2_70B, "dense", CTX, "selective") == T * (8192 + 8192 + 1024 + 1024 + 8192) * 2
    assert layer_bytes(LLAMA2_70B, "dense", CTX, "selective") == 436_207_616


def test_it_keeps_more_than_full_recompute_and_far_less_than_no_recompute() -> None:
    kept = layer_bytes(LLAMA2_70B, "dense", CTX, "selective")
    assert layer_bytes(LLAMA2_70B, "dense", CTX, "ckpt") == T * 8192 * 2 < kept  # full: the layer input only
    assert kept < layer_bytes(LLAMA2_70B, "dense", CTX, "none") // 4


def test_mlpwi_policy_keeps_the_mlp_output_only_where_a_norm_reads_it() -> None:
    # JAX keeps only residuals the backward reads: after Llama 2's MLP comes the residual add, whose
    # backward reads nothing, so mlpwo is kept only with a post-MLP (sandwich) norm
    wi = replace(CTX, selective="save_dot_except_mlpwi")
    assert layer_bytes(LLAMA2_70B, "dense", wi, "selective") == layer_bytes(LLAMA2_70B, "dense", CTX, "selective")
    sandwich = job_from_mapping({"model": {"base": "llama2-70b", "norm_placement": "sandwich"},
                                 "hardware": "h100-80gb", "gpus": 64, "seq_len": 4096, "global_batch_size": 128},
                                "t").model
    extra = layer_bytes(sandwich, "dense", wi, "selective") - layer_bytes(sandwich, "dense", CTX, "selective")
    assert extra == T * 8192 * 2


def test_the_layer_being_rebuilt_holds_what_the_policy_did_not_keep() -> None:
    # during one layer's backward the rest of its inventory is rebuilt: the backward working set grows by
    # the full inventory less the 436,207,616 B the policy kept
    inventory = sum(s.bytes for s in layer_inventory(LLAMA2_70B, "dense", CTX))
    au = act_units(LLAMA2_70B, CTX, "selective", 32_000)
    assert au.work_dense - layer_working_bytes(LLAMA2_70B, "dense", CTX) == inventory - 436_207_616


def test_the_nearest_megatron_module_list_keeps_the_norm_output_and_attention_output_more() -> None:
    # Megatron-Core recompute_modules [core_attn, mlp] (RECOMPUTED_MODULES) also keeps input_layernorm's
    # output (T x 8192 bf16) and statistics (T fp32) and the attention output (T x 8192 bf16), and keeps
    # the MLP's input where MaxText keeps out_proj (both T x 8192): 2 x T x 8192 x 2 + T x 4 B more
    from primus.memory.activations import RECOMPUTED_MODULES

    mods = frozenset(RECOMPUTED_MODULES["save_dot_except_mlp"])
    megatron = layer_bytes(LLAMA2_70B, "dense", replace(CTX, selective=None, recompute_modules=mods), "selective")
    assert megatron == 704_675_840
    assert megatron - 436_207_616 == 2 * T * 8192 * 2 + T * 4


def test_the_job_key_takes_exactly_the_ledgers_modes() -> None:
    from typing import get_args

    from primus.memory.activations import SELECTIVE_MODES

    assert get_args(SelectiveMode) == SELECTIVE_MODES


MAXTEXT_JOB = {"stack": "maxtext", "model": "llama2-70b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 4096,
               "global_batch_size": 128,
               "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 2, "sharding": "fsdp", "recompute": "selective"}}


def test_the_maxtext_stack_sets_its_policy_and_the_ledger_reads_it() -> None:
    job = job_from_mapping(MAXTEXT_JOB, "t")
    assert job.spec.selective_recompute == "save_dot_except_mlp" and "selective_recompute" in job.assumed
    assert job.spec.optimizer.main_grads_dtype == "fp32"  # fp32 parameters (MaxText weight_dtype float32)
    report = MemoryModel(job).evaluate(pinned_layout(job))
    assert report.fits
    assert any("save_dot_except_mlp" in a and "recompute_modules: core_attn, mlp" in a for a in report.assumptions)
    # 80 layers x 436,207,616 B kept, one microbatch in flight
    assert report.stages[0].terms["activations.dense_layers"] == 80 * 436_207_616


def test_a_megatron_stack_job_keeps_core_attention_selective() -> None:
    job = job_from_mapping({**MAXTEXT_JOB, "stack": "nemo"}, "t")
    assert job.spec.selective_recompute is None and "selective_recompute" not in job.assumed


def _recompute_seconds(job_map: dict[str, Any]) -> float:
    job = job_from_mapping(job_map, "t")
    proj = Projector(job, load_profile(job.cluster)).project(pinned_layout(job), "auto", explain=False)
    return proj.breakdown["recompute"]


def test_the_policy_re_runs_more_than_core_attention_and_less_than_the_whole_forward() -> None:
    maxtext = _recompute_seconds(MAXTEXT_JOB)
    core = _recompute_seconds({**MAXTEXT_JOB, "selective_recompute": "core_attention"})
    full = _recompute_seconds({**MAXTEXT_JOB, "parallel": {**MAXTEXT_JOB["parallel"], "recompute": "full"}})
    assert core < maxtext < full


class _Flops:
    """A timer that answers a GEMM's FLOPs as its 'seconds' and nothing else costs time."""

    def gemm(self, call: Any) -> tuple[float, bool]:
        return 2.0 * call.m * call.n * call.k * call.count, False

    def attention(self, call: Any) -> tuple[float, bool]:
        return 0.0, False

    def memory(self, call: Any) -> tuple[float, bool]:
        return 0.0, False

    def collective(self, call: Any) -> tuple[float, bool]:
        return 0.0, False


def test_of_the_gemms_the_policy_re_runs_only_fc1() -> None:
    # q/k/v and out_proj outputs are kept and FC2's output is read by no backward computation, so the
    # re-run forward GEMM work is FC1 alone: 2 x T x (2 x 28672) x 8192 FLOPs
    from primus.projection.cost import block_cost

    job = job_from_mapping(MAXTEXT_JOB, "t")
    proj = Projector(job, load_profile(job.cluster))
    layout = pinned_layout(job)
    ctx = proj.context(layout)
    cost = block_cost(proj.block("dense", ctx), _Flops(), proj.groups(layout), proj.cost_settings)
    assert cost.selective == 0.0  # the core attention costs nothing under this timer
    assert cost.selective_remat == 2.0 * T * (2 * 28672) * 8192


def test_dgx_cloud_maxtext_rows_run_on_the_maxtext_stack_with_their_recipes_policy() -> None:
    rows = [r for r in read_runs(bundled_runs_path()) if "maxtext_jax" in r.flags and r.complete]
    assert len(rows) == 12
    for row in rows:
        jobs = build(row)
        assert jobs.rule.name == "maxtext@2024.12"
        want = "save_dot_except_mlpwi" if row["precision"].lower() == "bf16" else "save_dot_except_mlp"
        assert jobs.project.spec.selective_recompute == want
        assert jobs.project.spec.parallel.recompute == "selective" and jobs.escalated == ()
        assert published_job(row)["stack"] == "maxtext@2024.12"
    # the same source's NeMo recipes stay on NeMo
    assert stack_of_source("dgxc-24.11.1").name == "nemo"
    assert stack_of_source("dgxc-24.11.1", None, frozenset({"maxtext_jax"})).label == "maxtext@2024.12"


def test_the_stack_pins_the_container_month() -> None:
    stack = resolve_stack("maxtext")
    assert stack.release == "2024.12" and stack["recompute"] == "full"  # MaxText base.yml remat_policy 'full'
    assert stack.recipe_for("llama2-70b", "h100-80gb", "bf16") is not None


def test_mla_layers_keep_core_attention_selective_in_the_ledger_and_the_projection() -> None:
    # MaxText's policies are modelled for standard attention; a dense MLA layer keeps Megatron's
    # core-attention inventory and re-runs its core attention, in both engines alike
    job = job_from_mapping({"model": {"base": "deepseek-v3", "num_layers": 4, "moe_layer_freq": "([0]*1+[1]*3)",
                                      "mtp_num_layers": 0}, "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
                            "global_batch_size": 64, "selective_recompute": "save_dot_except_mlp"}, "t")
    ctx = replace(CTX, mbs=1)
    assert layer_bytes(job.model, "dense", ctx, "selective") == layer_bytes(job.model, "dense",
                                                                            replace(ctx, selective=None), "selective")
    assert Projector(job, load_profile(job.cluster)).selective == "core_attention"
