"""Megatron-Bridge workload presets with several variants (V1/V2, LARGE_SCALE) for one model, GPU, precision
and release: a run gets the variant whose layout it ran (`Stack.recipe_for`, stacks/megatron-bridge.yaml
`layout:`), and a newly described preset's settings reach the job built for its published run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from primus.fidelity.jobs import build
from primus.fidelity.runs import read_runs
from primus.stacks.core import resolve_stack

HELDOUT = Path(__file__).resolve().parent.parent / "primus" / "fidelity" / "data" / "heldout_bridge.csv"
#: Megatron-Bridge v0.4.0 scripts/performance/configs/llama/llama31_workload_base_configs.py: the GB300 FP8-CS
#: preset's V1 runs TP 2 under Megatron-FSDP with 10 layers' activations offloaded (128 GPUs, GBS 64), its V2
#: TP 4 PP 8 VP 4 (256 GPUs, GBS 1536)
V1 = {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "ep": None, "mbs": 1, "gpus": 128, "gbs": 64}
V2 = {"tp": 4, "pp": 8, "vp": 4, "cp": 1, "ep": None, "mbs": 1, "gpus": 256, "gbs": 1536}


def _405b(layout: dict[str, int | None] | None):  # type: ignore[no-untyped-def]
    return resolve_stack("megatron-bridge@26.04").recipe_for("llama3.1-405b", "gb300", "fp8", layout)


def test_a_run_gets_the_variant_whose_layout_it_ran() -> None:
    v1, v2 = _405b(V1), _405b(V2)
    assert v1 is not None and "LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V1" in v1.source
    assert (v1.settings.sharding, v1.settings.cpu_offloading_num_layers) == ("fsdp", 10)
    assert v2 is not None and "LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2" in v2.source
    assert v2.settings.vp == 4 and v2.settings.cpu_offloading_num_layers is None


def test_without_a_layout_the_default_variant_is_taken() -> None:
    # v0.4.0 scripts/performance/argument_parser.py: --config_variant defaults to "v2"
    recipe = _405b(None)
    assert recipe is not None and recipe.source.endswith("LLAMA31_405B_PRETRAIN_CONFIG_GB300_FP8_CS_V2")


def test_the_fewest_contradicted_axes_win_over_the_listing_order() -> None:
    # a V1 layout at another scale (256 GPUs): still V1, whose TP, PP and VP it states
    recipe = _405b({**V1, "gpus": 256, "gbs": 128})
    assert recipe is not None and "_V1" in recipe.source


@pytest.mark.parametrize(("gbs", "variant"), [(128, "_V1"), (256, "_V2"), (512, "_V2")])
def test_variants_of_one_layout_are_told_apart_by_the_global_batch_per_gpu(gbs: int, variant: str) -> None:
    # v0.3.0 llama3_workload_base_configs.py LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V1/V2: GBS 128 and 256 at
    # 64 GPUs, same layout; a 128-GPU run at GBS 512 is V2's batch per GPU
    gpus = 128 if gbs == 512 else 64
    layout = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "mbs": 2, "gpus": gpus, "gbs": gbs}
    recipe = resolve_stack("megatron-bridge@26.02").recipe_for("llama3-70b", "gb200", "fp8", layout)
    assert recipe is not None and recipe.source.endswith(variant)


def _heldout(run_id: str):  # type: ignore[no-untyped-def]
    return next(r for r in read_runs(HELDOUT) if r.run_id == run_id)


def test_a_26_02_gb300_llama3_70b_fp8_run_offloads_as_its_preset() -> None:
    # v0.3.0 LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2 (GBS 256 at 64 GPUs): Megatron-FSDP, MBS 2,
    # cpu_offloading_num_layers 20; the table states FSDP and the layout
    jobs = build(_heldout("MB26.02-DGX-GB300-Llama3-70B-FP8"))
    assert jobs.project.spec.cpu_offloading.num_layers == 20
    assert any("LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_CS_V2" in a for a in jobs.assumed)


def test_a_26_04_b300_deepseek_v3_run_recomputes_as_its_preset() -> None:
    # v0.4.0 deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX (PP 16, EP 8, GBS 4096
    # at 256 GPUs): recompute_modules ['mla_up_proj']
    jobs = build(_heldout("MB26.04-DGX-B300-DeepSeek-V3-MXFP8"))
    pins = jobs.project.spec.parallel
    assert (pins.recompute, pins.recompute_modules) == ("selective", ("mla_up_proj",))
    assert any("DEEPSEEK_V3_PRETRAIN_CONFIG_B300_FP8_MX" in a for a in jobs.assumed)


def _releases(recipe) -> tuple[tuple[int, ...], tuple[int, ...]]:  # type: ignore[no-untyped-def]
    key = lambda label: tuple(int(p) for p in label.split("."))  # noqa: E731
    return key(recipe.since or "0"), key(recipe.until or "99")


def test_every_megatron_bridge_recipe_cites_a_tag_a_commit_and_its_preset() -> None:
    for r in resolve_stack("megatron-bridge").recipes:
        assert r.source.startswith("NVIDIA-NeMo/Megatron-Bridge v0."), r.source
        assert re.search(r"\b[0-9a-f]{40}\b", r.source) and re.search(r"(CONFIG\w*|_config|perf_matrix\.\S+)", r.source)


def test_no_two_variants_of_a_preset_share_a_layout_in_one_release() -> None:
    # else the layout could not tell them apart and the listing order would decide
    recipes = resolve_stack("megatron-bridge").recipes
    for i, a in enumerate(recipes):
        for b in recipes[i + 1:]:
            if (a.model, a.gpu, a.precision) != (b.model, b.gpu, b.precision) or a.layout is None:
                continue
            (a0, a1), (b0, b1) = _releases(a), _releases(b)
            if a0 <= b1 and b0 <= a1:
                assert a.layout != b.layout, (a.source, b.source)


def test_a_run_that_splits_the_model_otherwise_than_every_variant_takes_none() -> None:
    # NVIDIA's 26.02.01 table: Llama 3.1 405B FP8 on 256 GB300 at TP 2, PP 8, CP 2; v0.3.1's presets are
    # TP 2 PP 1 (V1, Megatron-FSDP, offloading) and TP 4 PP 8 (V2): the run ran neither, so the stack's
    # defaults hold rather than settings chosen for another split
    layout = {"tp": 2, "pp": 8, "vp": 4, "cp": 2, "mbs": 1, "gpus": 256, "gbs": 1536}
    assert resolve_stack("megatron-bridge@26.02.01").recipe_for("llama3.1-405b", "gb300", "fp8", layout) is None


def test_a_preset_holds_for_a_run_at_another_expert_parallel_size() -> None:
    # v0.2.0 GPT_OSS_120B_B200_BF16_BASE_CONFIG is EP 64; NVIDIA's 25.11 table prints its run at EP 8 with the
    # same TP, PP and CP: scaled, not another preset
    layout = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "mbs": 4, "gpus": 64, "gbs": 512}
    recipe = resolve_stack("megatron-bridge@25.11").recipe_for("gpt-oss-120b", "b200", "bf16", layout)
    assert recipe is not None and recipe.settings.recompute_modules == ("layernorm", "moe_act")


def test_stacks_show_lists_each_variant_with_its_layout(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("stacks", "show", "megatron-bridge@26.04")
    assert code == 0 and "layout" in out and '"gbs": 1536' in out  # LLAMA31_405B_..._GB300_FP8_CS_V2's
