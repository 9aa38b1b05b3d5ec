"""Primus-LM / Primus-Turbo options a published AMD run states become named, sourced job settings
(primus/fidelity/data/primus_options.yaml); options with no sourced cost are named as not modelled.

Rows: ground_truth/amd_runs_dev.csv, the ROCm blog "MoE Training Best Practices on AMD GPUs" (Dec 2025):
DeepSeek-V2-Lite on 8 MI355X, one Primus option added per step (MoE_Features presets of its script)."""

from __future__ import annotations

from primus.fidelity.jobs import build
from primus.fidelity.options import apply_options, primus_options
from primus.fidelity.runs import read_runs
from tests.helpers.runs_csv import row_of, write_rows

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


def test_the_legacy_grouped_gemm_runs_the_experts_in_bf16_under_fp8() -> None:
    # Megatron-Core core_v0.14.0 GroupedMLP (--moe-use-legacy-grouped-gemm) calls grouped_gemm's gg.ops.gmm on
    # bf16 tensors with no FP8 path; AMD's DeepSeek-V3 MI355X recipe (Primus @11400635) sets it with --fp8.
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector, load_profile

    jobs = build(_row("moe2_mi355x_dsv3_32n_default"))
    assert jobs.project.spec.moe.grouped_gemm == "legacy"
    te = jobs.project.with_spec(moe={**jobs.project.spec.moe.model_dump(), "grouped_gemm": "te"})
    profile = load_profile(jobs.project.cluster).for_stack(jobs.rule.kernels)
    layout = pinned_layout(jobs.project)
    legacy_s = Projector(jobs.project, profile).project(layout, "fast").breakdown["gemm"]
    te_s = Projector(te, profile).project(layout, "fast").breakdown["gemm"]
    assert legacy_s > te_s  # bf16 experts take longer than FP8 ones


def test_sync_free_stage_2_spends_no_host_round_trip_per_moe_layer_and_stage_1_keeps_it() -> None:
    # Primus examples/moe_package/README.md: level 1 removes the router's and permutation's syncs, level 2
    # also DeepEP's and the grouped MLP's (the per-expert token counts stay on the device).
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector, load_profile

    stage2 = build(_row("moe2_qwen3_30b_turbo")).project
    stage1 = build(_row("moe2_qwen3_30b_best")).project
    assert stage2.spec.moe.sync_free and not stage1.spec.moe.sync_free
    profile = load_profile(stage1.cluster)
    assert Projector(stage2, profile).project(pinned_layout(stage2), "fast").breakdown["host"] == 0.0
    assert Projector(stage1, profile).project(pinned_layout(stage1), "fast").breakdown["host"] > 0.0


def test_the_qwen3_30b_rows_carry_their_scripts_settings() -> None:
    # run_qwen_30B_a3B_pretrain_mi355x.sh @38ac39ff: Turbo DeepEP, CE fusion, bf16 optimizer state, LEGACY_GG=True;
    # the Turbo-accelerated row's stage 2 and Turbo grouped GEMM refuse the legacy path.
    best = build(_row("moe2_qwen3_30b_best")).project.spec
    turbo = build(_row("moe2_qwen3_30b_turbo")).project.spec
    for spec in (best, turbo):
        assert spec.moe.token_dispatcher == "flex" and spec.kernels.cross_entropy_fusion
        assert spec.optimizer.exp_avg_dtype == "bf16"
    assert best.moe.grouped_gemm == "legacy" and turbo.moe.grouped_gemm == "te"


def test_the_legacy_grouped_gemm_keeps_the_experts_inputs_in_bf16_under_fp8() -> None:
    # one ledger: the saved inputs of bf16 grouped GEMMs are bf16, 2 bytes per element, not FP8's 1 (+ scales)
    from primus.memory.activations import layer_inventory
    from primus.memory.evaluate import MemoryModel, pinned_layout

    jobs = build(_row("moe2_mi355x_dsv3_32n_default"))
    te = jobs.project.with_spec(moe={**jobs.project.spec.moe.model_dump(), "grouped_gemm": "te"})
    layout = pinned_layout(jobs.project)
    legacy_ctx, te_ctx = MemoryModel(jobs.project).act_context(layout), MemoryModel(te).act_context(layout)
    width = {s.name: s.width for s in layer_inventory(jobs.project.model, "moe", legacy_ctx)}
    te_width = {s.name: s.width for s in layer_inventory(te.model, "moe", te_ctx)}
    assert width["experts.input"] == 2 and te_width["experts.input"] < 2


def test_primus_permutes_unfused_until_sync_free_stage_1_fuses_it() -> None:
    # Primus fd1eeabb language_model.yaml line 144 (moe_permute_fusion: false) and rocm_arg_validation.py
    # _get_sync_free_moe_options (stage >= 1 sets moe_permute_fusion): the blog's stage-0 DeepSeek-V2-Lite
    # rows run Megatron-Core's torch permutation, the sync-free rows TE's fused one.
    stage0 = [build(_row(f"moe1_mi355x_dsv2lite_mbs12_{s}")).project.spec for s in ("baseline", "deepep")]
    stage1 = [build(_row(r)).project.spec for r in ("moe1_mi355x_dsv2lite_mbs12_syncfree1", "moe2_qwen3_30b_turbo")]
    assert not any(s.moe.permute_fusion for s in stage0)
    assert all(s.moe.permute_fusion for s in stage1)


def test_the_unfused_permutation_costs_one_more_host_round_trip_per_moe_layer_forward() -> None:
    # core_v0.14.0 moe_utils.py permute: two back-to-back masked_select calls (data-dependent sizes) before the
    # dispatcher's own synchronisation: one more host.moe_layer_us per MoE layer forward, and more bytes.
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector, load_profile

    unfused = build(_row("moe1_mi355x_dsv2lite_mbs12_deepep")).project
    fused = unfused.with_spec(moe={**unfused.spec.moe.model_dump(), "permute_fusion": True})
    profile = load_profile(unfused.cluster)
    layout = pinned_layout(unfused)
    a = Projector(unfused, profile).project(layout, "fast").breakdown
    b = Projector(fused, profile).project(layout, "fast").breakdown
    assert a["host"] == 2 * b["host"] > 0.0
    assert a["memory_bound"] > b["memory_bound"]


def test_a_sync_free_job_never_pays_the_unfused_permutation() -> None:
    # sync-free MoE stage 1 already turns the fused permutation on (rocm_arg_validation.py
    # _get_sync_free_moe_options), so `sync_free: true` under the primus stack's unfused default projects
    # exactly as with `permute_fusion: true` set as well (review 40, item 6)
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector, load_profile

    job = build(_row("moe1_mi355x_dsv2lite_mbs12_deepep")).project
    sync_free = job.with_spec(moe={**job.spec.moe.model_dump(), "sync_free": True})
    both = job.with_spec(moe={**job.spec.moe.model_dump(), "sync_free": True, "permute_fusion": True})
    assert not sync_free.spec.moe.permute_fusion and sync_free.spec.moe.permutes_fused
    profile = load_profile(job.cluster)
    layout = pinned_layout(job)
    a = Projector(sync_free, profile).project(layout, "fast")
    b = Projector(both, profile).project(layout, "fast")
    assert a.step_time_s == b.step_time_s


def test_an_option_given_an_off_value_is_not_used() -> None:
    # a row that states the switch off did not use it (review 42: `=false` used to turn it on)
    for text in ("cross_entropy_loss_fusion=false", "use_turbo_deepep: false", "turbo_sync_free_moe_stage=0"):
        applied = apply_options(text, is_moe=True)
        assert applied.job == {} and applied.modelled == () and applied.not_modelled == (), text


def test_a_negated_option_is_not_used() -> None:
    assert apply_options("no DeepEP; without loss fusion", is_moe=True).modelled == ()


def test_a_stage_spelling_matches_its_own_stage_only() -> None:
    stage2 = apply_options("turbo_sync_free_moe_stage: 2", is_moe=True)
    assert stage2.job["moe"]["sync_free"] is True
    assert "sync_free" not in apply_options("turbo_sync_free_moe_stage: 1", is_moe=True).job["moe"]


def test_a_sync_free_stage_outside_0_to_3_leaves_the_row_unprojected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from primus.fidelity.validate import prepare

    fields, row = row_of(AMD_RUNS, "moe1_mi355x_dsv2lite_mbs12_syncfree1")
    path = write_rows(tmp_path / "runs.csv", fields, [{**row, "options": "turbo_sync_free_moe_stage=20"}])
    ok, bad = prepare(read_runs(path))
    assert not ok and len(bad) == 1 and "'20' is not an integer from 0 to 3" in bad[0].reason


def test_the_deepseek_v2_lite_runs_apply_mla_rope_unfused_as_their_model_config_sets() -> None:
    # Primus e97d7a76 ("moe package v2", 2025-12-12, the MoE blog's script): its experiment
    # examples/moe_package/configs/MI355X/deepseek_v2_lite-pretrain-baseline.yaml loads deepseek_v2_lite.yaml,
    # whose base deepseek_v2_base.yaml sets apply_rope_fusion: false ("multi_latent_attention does not support
    # apply_rope_fusion"); the DeepSeek-V3 and Qwen3 scripts pass --apply_rope_fusion True
    from primus.memory.evaluate import pinned_layout
    from primus.projection import Projector

    for run in ("moe1_mi355x_dsv2lite_mbs12_baseline", "moe1_mi355x_dsv2lite_mbs14_all"):
        job = build(_row(run)).project
        assert job.spec.kernels.rope_fusion is False
        p = Projector(job)
        assert p.context(pinned_layout(job)).rope_fused is False
    for run in ("moe2_mi355x_dsv3_32n_default", "moe2_qwen3_30b_best"):
        assert build(_row(run)).project.spec.kernels.rope_fusion is True
