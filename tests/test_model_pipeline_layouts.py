"""A model recipe's own pipeline layout per (PP, VP): Megatron-Bridge's DeepSeek-V3 and Kimi-K2 recipes name
one, and the perf scripts apply it at the preset's PP and VP (stacks/megatron-bridge.yaml `pipeline_layouts`).

DeepSeek-V3 has 61 decoder layers and one MTP layer; at PP 16 Megatron-Bridge v0.2.0-v0.6.0 put the
embedding and four layers on the first stage, four on each of the next fourteen, and one layer, the MTP
layer and the loss on the last ("Et*4|(t*4|)*14tmL", recipes/deepseek/deepseek_v3.py layout_map). A
balanced guess put three layers, the MTP layer and the loss on the last stage, the pipeline's bottleneck.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from primus.fidelity.runs import read_runs
from primus.fidelity.validate import prepare
from primus.job import job_from_mapping
from primus.stacks.core import resolve_stack
from primus.stacks.schema import ModelPipelineLayout
from tests.conftest import as_json

HELD_OUT = Path(__file__).resolve().parent.parent / "primus" / "fidelity" / "data" / "heldout_bridge.csv"
DSV3_PP16 = "Et*4|(t*4|)*14tmL"
JOB: dict[str, Any] = {"model": "deepseek-v3", "hardware": "b200", "gpus": 256, "seq_len": 4096,
                       "global_batch_size": 4096, "precision": "fp8", "fp8_recipe": "mxfp8",
                       "parallel": {"tp": 1, "pp": 16, "vp": 1, "ep": 8, "mbs": 1}}


def test_a_megatron_bridge_deepseek_v3_job_at_pp16_gets_the_recipes_layout_and_says_whose() -> None:
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.04"}, "t")
    assert job.spec.pipeline.layout == DSV3_PP16
    said = [a for a in job.assumed if a.startswith("pipeline (")]
    assert said and "the stack's recipe for deepseek-v3" in said[0] and "layout_map" in said[0]


def test_the_h100_presets_32_chunk_layouts_are_the_stacks_from_26_02() -> None:
    # Megatron-Bridge v0.3.0-v0.6.0 H100 presets: DeepSeek-V3 pp_layout "Et|(tt|)*30mL" at PP 8 x VP 4, Kimi-K2
    # "Et|(tt|)*30L" at PP 16 x VP 2 (v0.3.1 on); v0.2.0 (25.11) names none
    dsv3 = {**JOB, "hardware": "h100-80gb", "gpus": 1024, "parallel": {"tp": 2, "pp": 8, "vp": 4, "ep": 64, "mbs": 1}}
    assert job_from_mapping({**dsv3, "stack": "megatron-bridge@26.02"}, "t").spec.pipeline.layout == "Et|(tt|)*30mL"
    assert job_from_mapping({**dsv3, "stack": "megatron-bridge@25.11"}, "t").spec.pipeline.layout != "Et|(tt|)*30mL"
    kimi = {**dsv3, "model": "kimi-k2", "stack": "megatron-bridge@26.04",
            "parallel": {"tp": 8, "pp": 16, "vp": 2, "ep": 64, "mbs": 1}}
    assert job_from_mapping(kimi, "t").spec.pipeline.layout == "Et|(tt|)*30L"


@pytest.mark.parametrize(("pp", "vp", "layout"), [(8, 1, "Et*8|(t*8|)*6t*5mL"), (8, 2, DSV3_PP16),
                                                  (4, 4, DSV3_PP16), (4, 1, "Et*16|t*16|t*16|t*13mL")])
def test_every_pp_vp_the_deepseek_v3_recipe_maps_gets_its_layout(pp: int, vp: int, layout: str) -> None:
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.06", "gpus": 512,
                            "parallel": {**JOB["parallel"], "pp": pp, "vp": vp}}, "t")
    assert job.spec.pipeline.layout == layout


def test_a_pp_vp_the_recipe_does_not_map_keeps_the_stacks_split() -> None:
    # PP 4 x VP 8 (32 chunks) is in no DeepSeek-V3 map nor preset; PP 2 x VP 8 is in Kimi-K2's (v0.3.1 on)
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.04", "gpus": 512,
                            "parallel": {**JOB["parallel"], "pp": 4, "vp": 8}}, "t")
    assert job.spec.pipeline.layout is not None and "(t*4|)*14" not in job.spec.pipeline.layout
    kimi = job_from_mapping({**JOB, "model": "kimi-k2", "stack": "megatron-bridge@26.04",
                             "parallel": {**JOB["parallel"], "pp": 2, "vp": 8}}, "t")
    assert kimi.spec.pipeline.layout == "Et*4|(t*4|)*14tL"  # no MTP layer


def test_releases_and_stacks_without_the_recipe_keep_the_balanced_split() -> None:
    # 25.09 set one 32-chunk layout for every GPU (deepseek_v3_llm_pretrain.yaml): not described; Megatron-LM
    # ships no DeepSeek-V3 layout
    for stack in ("megatron-bridge@25.09", "megatron-lm"):
        job = job_from_mapping({**JOB, "stack": stack}, "t")
        assert job.spec.pipeline.layout != DSV3_PP16


def test_a_model_whose_layers_were_overridden_falls_back_to_the_stacks_split() -> None:
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.04",
                            "model": {"base": "deepseek-v3", "num_layers": 60}}, "t")
    assert job.spec.pipeline.layout != DSV3_PP16


def test_the_layout_the_job_writes_wins() -> None:
    own = "Et*3|(t*4|)*14t*2mL"
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.04", "pipeline": {"layout": own}}, "t")
    assert job.spec.pipeline.layout == own


def test_a_stack_layout_with_the_wrong_number_of_chunks_is_refused_when_read() -> None:
    with pytest.raises(ValueError, match="has 16 chunks, not pp x vp = 8"):
        ModelPipelineLayout(model="deepseek-v3", pp=8, vp=1, layout=DSV3_PP16, source="test source")
    with pytest.raises(ValueError, match="Et\\*4"):
        ModelPipelineLayout(model="deepseek-v3", pp=16, vp=1, layout="Et*4|(t*4|)*14tmL)", source="test source")


def test_the_recipe_applies_from_the_release_that_ships_it() -> None:
    assert resolve_stack("megatron-bridge@25.11").pipeline_layout_for("deepseek-v3", 16, 1) is not None
    assert resolve_stack("megatron-bridge@26.02").pipeline_layout_for("kimi-k2", 16, 1) is None  # v0.3.0: no perf
    assert resolve_stack("megatron-bridge@26.02.01").pipeline_layout_for("kimi-k2", 16, 1) is not None


def test_the_published_b200_run_is_projected_with_the_recipes_layout() -> None:
    # MB26.04 DGX-B200 DeepSeek-V3 MXFP8: 256 GPUs, TP1 PP16 EP8, 2,815 tokens/s/GPU (Megatron-Bridge
    # docs/performance-summary-archive.md at 4ab94df); -29.8% with the balanced split, -2.9% with the recipe's
    rows = [r for r in read_runs(HELD_OUT) if r.run_id == "MB26.04-DGX-B200-DeepSeek-V3-MXFP8"]
    (p,), bad = prepare(rows)
    assert not bad and p.jobs.project.spec.pipeline.layout == DSV3_PP16
    assert any("the stack's recipe for deepseek-v3" in a for a in p.jobs.assumed)



def test_stacks_show_lists_the_layouts_with_their_sources(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("stacks", "show", "megatron-bridge@26.04", "--format", "json")
    layouts = as_json(out)["pipeline_layouts"]
    assert code == 0 and {"model": "deepseek-v3", "pp": 16, "vp": 1, "layout": DSV3_PP16}.items() <= next(
        x for x in layouts if (x["model"], x["pp"], x["vp"]) == ("deepseek-v3", 16, 1)).items()
    assert all("Megatron-Bridge" in x["source"] for x in layouts)
    code, out, _ = run_cli("stacks", "show", "megatron-bridge@26.04")
    assert code == 0 and "per-model pipeline layouts" in out


def test_a_hugging_face_config_of_the_model_gets_the_layout_by_architecture() -> None:
    # the config.json is named after its folder, not "deepseek-v3"; its layers are the catalog entry's
    hf = str(Path(__file__).resolve().parent / "data" / "hf" / "deepseek_v3-DeepSeek-V3" / "config.json")
    job = job_from_mapping({**JOB, "model": hf, "stack": "megatron-bridge@26.04"}, "t")
    assert job.model.name != "deepseek-v3" and job.spec.pipeline.layout == DSV3_PP16


def test_the_gb300_presets_pp2_vp8_layout_is_carried_from_26_02() -> None:
    # DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_V1 pp_layout "Et*4|(t*4|)*14tmL" at PP 2 x VP 8 (v0.3.0 on)
    at = {**JOB, "hardware": "gb300", "parallel": {**JOB["parallel"], "pp": 2, "vp": 8, "ep": 32, "mbs": 2}}
    assert job_from_mapping({**at, "stack": "megatron-bridge@26.02"}, "t").spec.pipeline.layout == DSV3_PP16
    assert job_from_mapping({**at, "stack": "megatron-bridge@25.11"}, "t").spec.pipeline.layout != DSV3_PP16


def test_every_shipped_layout_names_a_catalog_model_it_fits_and_no_two_overlap() -> None:
    from primus.catalog.models import resolve_model
    from primus.memory.shapes import layout_for
    from primus.specs.job import PipelineOptions
    from primus.stacks.core import catalog_stacks, load_stack_file

    for name in catalog_stacks():
        entries = load_stack_file(name).pipeline_layouts
        for r in entries:
            layout_for(resolve_model(r.model, name), PipelineOptions(layout=r.layout), r.pp, r.vp)  # raises if not
            same = [o for o in entries if (o.model, o.pp, o.vp) == (r.model, r.pp, r.vp)]
            assert len(same) == 1, f"{name}: {r.model} at pp {r.pp}, vp {r.vp} is described twice"


def test_fit_with_pp_pinned_and_vp_free_takes_the_recipes_layout(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # 61 layers split over no PP 16 x VP evenly; the stack's recipe names a layout at VP 1, which is legal
    job = {**JOB, "stack": "megatron-bridge@26.04", "parallel": {k: v for k, v in JOB["parallel"].items() if k != "vp"}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    doc = as_json(out)
    assert code == 0 and doc["parallel"]["pp"] == 16 and doc["parallel"]["vp"] == 1
    assert f"pipeline layout {DSV3_PP16} at PP 16 x VP 1: megatron-bridge@26.04's recipe for deepseek-v3 " \
           "(primus stacks show)" in doc["assumptions"]


def test_fit_offers_the_recipes_layout_first_when_the_job_splits_otherwise(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # the job's own split (first/last stage sizes) fails at PP 16: the recipe's layout is the first fix
    job = {**JOB, "stack": "megatron-bridge@26.04", "pipeline": {"decoder_first_pipeline_num_layers": 2},
           "parallel": {k: v for k, v in JOB["parallel"].items() if k != "vp"}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    first = as_json(out)["alternatives"][0]
    assert code == 1 and first["options"]["pipeline.layout"] == DSV3_PP16 and first["pins_changed"] == []


def test_project_and_memory_say_the_layout_is_the_recipes(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    pinned = {**JOB, "stack": "megatron-bridge@26.04",
              "parallel": {**JOB["parallel"], "cp": 1, "etp": 1, "recompute": "none", "sharding": "dist_opt"}}
    path = write_job(pinned)
    for command in ("project", "memory"):
        code, out, _ = run_cli(command, path, "--format", "json")
        said = [a for a in as_json(out)["assumptions"] if a.startswith("pipeline layout")]
        assert code == 0 and said == [f"pipeline layout {DSV3_PP16} at PP 16 x VP 1: megatron-bridge@26.04's "
                                      "recipe for deepseek-v3 (primus stacks show)"]


@pytest.mark.parametrize(("mtp", "layout"), [(0, "Et*4|(t*4|)*14tL"), (2, "Et*4|(t*4|)*14tmmL")])
def test_the_recipes_mtp_tail_follows_the_models_mtp_layers(mtp: int, layout: str) -> None:
    # Megatron-Bridge: last_layer = ['mtp'] * mtp_num_layers + ['loss'] (recipes/deepseek/deepseek_v3.py)
    job = job_from_mapping({**JOB, "stack": "megatron-bridge@26.04",
                            "model": {"base": "deepseek-v3", "mtp_num_layers": mtp}}, "t")
    assert job.spec.pipeline.layout == layout


def _pairs(run_cli, write_job, stack: str) -> set[tuple[int, int]]:  # type: ignore[no-untyped-def]
    free = {**JOB, "stack": stack, "parallel": {"tp": 1, "ep": 8, "mbs": 1}}
    code, out, _ = run_cli("enumerate", write_job(free), "--format", "jsonl")
    assert code == 0
    return {(row["parallel"]["pp"], row["parallel"]["vp"]) for row in map(json.loads, out.splitlines())}


def test_enumerate_counts_the_recipes_pp_vp_pairs_as_legal_on_its_stack(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # 61 layers split evenly over no PP above 1; Megatron-Bridge's recipe names layouts at these (PP, VP)
    # (v0.4.0 recipes/deepseek/deepseek_v3.py layout_map; from 26.02 the GB300 presets' PP 2 x VP 8 and the H100
    # presets' PP 8 x VP 4, "Et|(tt|)*30mL")
    assert _pairs(run_cli, write_job, "megatron-bridge@26.04") == {(1, 1), (2, 8), (4, 1), (4, 2), (4, 4), (8, 1),
                                                                   (8, 2), (8, 4), (16, 1)}


def test_enumerate_on_a_stack_without_recipe_layouts_keeps_megatrons_even_split(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    assert _pairs(run_cli, write_job, "megatron-lm") == {(1, 1)}


FREE_DSV3 = {**JOB, "stack": "megatron-bridge@26.04", "parallel": {"tp": 1, "ep": 8, "mbs": 1, "cp": 1, "etp": 1,
                                                                   "recompute": "selective", "sharding": "dist_opt"}}


def test_a_job_from_the_python_api_keeps_its_stacks_split_through_a_stack_change() -> None:
    import primus

    job = primus.load_job(FREE_DSV3)
    again = primus.load_job(job, stack="megatron-bridge@26.06")
    assert again.pipeline_at(16, 1).layout == DSV3_PP16 and "pipeline" not in again.as_mapping()


def test_a_tune_through_the_python_api_is_audited_as_it_ran(tmp_path: Path) -> None:
    # the recorded inputs/job.yaml leaves the split to the stack, so audit verify finds the same legal set
    from click.testing import CliRunner

    import primus
    from primus.cli.main import cli

    answer = primus.tune(FREE_DSV3, out=tmp_path / "run", workers=1)
    assert answer.best["parallel"]["pp"] > 1
    verify = CliRunner().invoke(cli, ["audit", "verify", str(tmp_path / "run"), "--workers", "1"])
    assert verify.exit_code == 0, verify.output


def test_a_release_the_stack_does_not_describe_takes_the_layouts_of_its_own_date() -> None:
    # 25.11 resolves to the 25.09 description but its recipe has the layout_map (since 25.11); 25.09's has not,
    # whichever is asked first in one process
    later = job_from_mapping({**FREE_DSV3, "stack": "megatron-bridge@25.11"}, "t")
    earlier = job_from_mapping({**FREE_DSV3, "stack": "megatron-bridge@25.09"}, "t")
    assert later.pipeline_at(16, 1).layout == DSV3_PP16 and earlier.pipeline_at(16, 1).layout is None


def test_tunes_certificate_names_the_recipe_split_only_where_the_release_has_one() -> None:
    from primus.tuning.variants import pipeline_options_text

    on = job_from_mapping(FREE_DSV3, "t")
    off = job_from_mapping({**FREE_DSV3, "stack": "megatron-bridge@25.09"}, "t")
    assert "megatron-bridge@26.04's recipe for deepseek-v3" in pipeline_options_text(on)
    assert pipeline_options_text(off) == "none set: Megatron's default split"


def test_export_complete_writes_the_recipes_layout_it_completed_with(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # the launch file runs on Megatron-LM, which has no recipe layouts: it states the one fit found legal
    job = {k: v for k, v in FREE_DSV3.items() if k != "parallel"} | {"parallel": {"pp": 16}}
    code, out, _ = run_cli("export", write_job(job), "--complete", "--to", "megatron")
    assert code == 0 and f"--pipeline-model-parallel-layout '{DSV3_PP16}'" in out


def test_a_job_moved_to_megatron_lm_still_says_its_layout_is_the_recipes() -> None:
    # export to a Megatron-LM file runs the job on megatron-lm, which has no recipes; the layout it uses and
    # writes is still Megatron-Bridge's, and the ledger and the projection say so
    from primus.launch.target import on_target_stack
    from primus.memory.evaluate import MemoryModel, pinned_layout
    from primus.projection.project import project

    moved, _ = on_target_stack(job_from_mapping(FREE_DSV3, "t"), "megatron")
    pinned = moved.with_spec(parallel={**moved.spec.parallel.model_dump(), "pp": 16, "vp": 1})
    layout = pinned_layout(pinned)
    said = f"pipeline layout {DSV3_PP16} at PP 16 x VP 1: megatron-bridge@26.04's recipe for deepseek-v3 " \
           "(primus stacks show)"
    assert moved.resolved_stack.name == "megatron-lm"
    assert said in MemoryModel(pinned).evaluate(layout).assumptions
    assert said in project(pinned, layout).assumptions
