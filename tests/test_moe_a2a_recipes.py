"""The MoE all-to-all overlap a Megatron-Bridge workload preset turns on reaches the jobs built for its runs.

Megatron-Bridge turns a preset's `moe_a2a_overlap=True` into comm_overlap.overlap_moe_expert_parallel_comm
(v0.2.0 scripts/performance/utils/helpers.py set_moe_a2a_overlap_overrides; v0.3.0-v0.5.1 overrides.py
_set_moe_a2a_overlap_overrides); v0.6.0's perf_recipes set it in the recipe (qwen/common.py
_enable_hybridep_full_iteration_mxfp8: CommOverlapConfig(overlap_moe_expert_parallel_comm=True, ...)).
Qwen3-30B-A3B on 8 GB300 in MXFP8: QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1 is the FP8-CS preset without
it in v0.4.0 (26.04) and adds it in v0.5.0 (26.06); the tables measure 31,470 and 45,275 tokens/s/GPU."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from primus.fidelity.jobs import build
from primus.fidelity.runs import read_runs
from primus.memory.evaluate import pinned_layout
from primus.projection import project
from primus.stacks.core import resolve_stack
from tests.helpers.bridge_generator import bridge_generator

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "primus" / "fidelity" / "data" / "heldout_bridge.csv"
QWEN_GB300 = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": None, "mbs": 8, "gpus": 8, "gbs": 512}


def _recipe(release: str) -> Any:
    return resolve_stack(f"megatron-bridge@{release}").recipe_for("qwen3-30b-a3b", "gb300", "mxfp8", QWEN_GB300)


def _row(run_id: str) -> Any:
    return next(r for r in read_runs(HELDOUT) if r.run_id == run_id)


def _jobs() -> tuple[Any, Any]:
    """The jobs of the 26.06 and the 26.04 run of the same layout."""
    return build(_row("MB26.06-DGX-GB300-Qwen3-30B-A3B-MXFP8")), build(_row("MB26.04-DGX-GB300-Qwen3-30B-A3B-MXFP8"))


def _generator() -> ModuleType:
    return bridge_generator()


def test_the_26_06_preset_overlaps_the_all_to_all_and_the_26_04_one_does_not() -> None:
    before, after = _recipe("26.04"), _recipe("26.06")
    assert before is None or not before.settings.moe_a2a_overlap
    assert after is not None and after.settings.moe_a2a_overlap is True
    assert "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_MX_V1" in after.source and "v0.5.0" in after.source


def test_the_26_08_recipe_sets_it_through_its_comm_overlap_config() -> None:
    recipe = _recipe("26.08")
    assert recipe is not None and recipe.settings.moe_a2a_overlap is True
    assert "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8mx_config" in recipe.source


def test_a_run_takes_the_overlap_of_its_release_preset() -> None:
    new, old = _jobs()
    assert new.project.spec.overlap.moe_a2a and not old.project.spec.overlap.moe_a2a
    assert any(a.startswith("MoE all-to-all overlap on (the stack's recipe") for a in new.assumed)


def test_the_overlap_hides_part_of_the_all_to_all() -> None:
    new, old = _jobs()
    layout = pinned_layout(new.project)
    assert layout == pinned_layout(old.project)
    fast, slow = project(new.project, layout), project(old.project, layout)
    assert fast.hidden["ep_a2a"] > 0.0 and slow.hidden["ep_a2a"] == 0.0
    assert fast.step_time_s < slow.step_time_s


def test_the_generator_carries_a_presets_overlap_as_a_setting() -> None:
    gen = _generator()
    preset = gen.Preset("26.06", "v0.5.0", "c", "p", "N", "qwen3-30b-a3b", "gb300", "mxfp8", "V1",
                        {"pipeline_model_parallel_size": 1, "moe_a2a_overlap": True})
    assert gen.settings_of(preset) == {"moe_a2a_overlap": True}
    off = gen.Preset("26.04", "v0.4.0", "c", "p", "N", "qwen3-30b-a3b", "gb300", "mxfp8", "V1",
                     {"pipeline_model_parallel_size": 1, "moe_a2a_overlap": False})
    assert gen.settings_of(off) == {}


def test_the_generator_reads_a_section_assigned_whole() -> None:
    # `cfg.comm_overlap = CommOverlapConfig(...)` replaces the section: an earlier field of it does not survive
    gen = _generator()
    source = ("def r():\n    cfg = base()\n    cfg.comm_overlap.tp_comm_overlap = True\n"
              "    cfg.comm_overlap = CommOverlapConfig(overlap_moe_expert_parallel_comm=True)\n    return cfg\n")
    fn = ast.parse(source).body[0]
    flat = object.__new__(gen._Flat)
    flat.functions = {}
    state: dict[str, Any] = {}
    flat.walk("qwen", (fn, "x.py"), state)
    assert state["comm_overlap.overlap_moe_expert_parallel_comm"] is True
    assert "comm_overlap.tp_comm_overlap" not in state


def test_the_share_the_overlap_hides_is_fitted_where_runs_overlap() -> None:
    # hardware/profiles/h100-80gb.yaml: overlap.moe_a2a was the spec file's starting guess (0.6, "Fit from
    # runs"); the H100 dev rows whose presets overlap (Qwen3 on 16 H100 and more) now identify it
    fitted = yaml.safe_load((ROOT / "hardware" / "profiles" / "h100-80gb.yaml").read_text())
    spec = yaml.safe_load((ROOT / "hardware" / "profiles" / "spec" / "h100-80gb.yaml").read_text())
    assert spec["overlap"]["moe_a2a"]["value"] == 0.6
    assert "overlap.moe_a2a" in fitted["provenance"]
    assert fitted["overlap"]["moe_a2a"]["source"].startswith("fitted by primus calibrate")
    assert 0.0 < fitted["overlap"]["moe_a2a"]["value"] <= 1.0 and fitted["overlap"]["moe_a2a"]["value"] != 0.6
