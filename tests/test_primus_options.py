"""Primus-LM / Primus-Turbo options a published AMD run states become named, sourced job settings
(primus/fidelity/data/primus_options.yaml); options with no sourced cost are named as not modelled.

Rows: ground_truth/amd_runs_dev.csv, the ROCm blog "MoE Training Best Practices on AMD GPUs" (Dec 2025):
DeepSeek-V2-Lite on 8 MI355X, one Primus option added per step (MoE_Features presets of its script)."""

from __future__ import annotations

from primus.fidelity.jobs import build
from primus.fidelity.options import apply_options, primus_options
from primus.fidelity.runs import read_runs

AMD_RUNS = "primus/fidelity/data/amd_runs_dev.csv"


def _row(run_id: str):  # type: ignore[no-untyped-def]
    return next(r for r in read_runs(AMD_RUNS) if r.run_id == run_id)


def test_every_option_names_its_source_and_what_it_sets_or_that_it_is_not_modelled() -> None:
    for opt in primus_options():
        assert len(opt.source) > 40, opt.name
        assert opt.job or opt.model or not opt.modelled, opt.name


def test_the_moe_feature_presets_accumulate_as_the_blog_adds_them() -> None:
    base = build(_row("moe1_mi355x_dsv2lite_mbs12_baseline")).project.spec
    loss = build(_row("moe1_mi355x_dsv2lite_mbs12_lossfusion")).project.spec
    deepep = build(_row("moe1_mi355x_dsv2lite_mbs12_deepep")).project.spec
    assert not base.kernels.cross_entropy_fusion and base.moe.token_dispatcher == "alltoall"
    assert loss.kernels.cross_entropy_fusion and loss.moe.token_dispatcher == "alltoall"
    assert deepep.kernels.cross_entropy_fusion and deepep.moe.token_dispatcher == "flex"


def test_options_without_a_sourced_cost_are_named_not_fitted() -> None:
    jobs = build(_row("moe1_mi355x_dsv2lite_mbs12_syncfree1"))
    assert any("not modelled" in a and "turbo_sync_free_moe" in a for a in jobs.assumed)


def test_the_deepseek_v3_recipe_runs_without_mtp_and_with_bf16_optimizer_state() -> None:
    spec = build(_row("moe2_mi355x_dsv3_32n_default")).project
    assert spec.model.mtp_num_layers == 0
    assert spec.spec.optimizer.exp_avg_dtype == "bf16" and spec.spec.optimizer.main_grads_dtype == "bf16"


def test_moe_settings_do_not_reach_a_dense_model() -> None:
    applied = apply_options("Turbo DeepEP, CE fusion (te)", is_moe=False)
    assert "moe" not in applied.job and applied.job["kernels"]["cross_entropy_fusion"]
