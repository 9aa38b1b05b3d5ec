"""The MoE token dispatcher a Megatron-Bridge workload preset's run used reaches the jobs built for its runs.

Every Megatron-Bridge model provider of the catalog's MoE models defaults to `moe_token_dispatcher_type
"alltoall"` (v0.2.0 src/megatron/bridge/models/*/..._provider.py; v0.4.0-v0.6.0 the model bridges). A preset's
`moe_flex_dispatcher_backend` turns the flex dispatcher on only where the perf scripts hand it to
`apply_flex_dispatcher_backend`, which skips DeepEP on GB200/GB300 (and, in v0.2.0, HybridEP off GB200/GB300).

Qwen3-235B-A22B FP8 on 256 H100 (TP2 PP8 VP4 EP32, QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2 in each
release): v0.3.0 (26.02) names no backend; v0.3.1 (26.02.01) names DeepEP in BASE_QWEN3_235B_A22B_CONFIG, but
its qwen3_llm_pretrain.py sets `moe_token_dispatcher_type = "alltoall"` for this model on H100 (line 185);
v0.4.0 (26.04) names none again. Qwen3-30B-A3B FP8 on 16 H100 (EP16, two nodes) runs flex from v0.3.1: set
outright by qwen3_llm_pretrain.py there, then the HybridEP of QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1, which
v0.4.0's overrides.py set_workload_base_configs applies."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from primus.fidelity.jobs import build
from primus.fidelity.runs import read_runs
from primus.memory.evaluate import pinned_layout
from primus.projection import project
from primus.stacks.core import resolve_stack
from tests.helpers.bridge_generator import bridge_generator

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "primus" / "fidelity" / "data" / "runs_dev.csv"
QWEN_H100 = {"tp": 2, "pp": 8, "vp": 4, "cp": 1, "ep": 32, "etp": 1, "mbs": 1, "gpus": 256, "gbs": 8192}


def _recipe(release: str) -> Any:
    return resolve_stack(f"megatron-bridge@{release}").recipe_for("qwen3-235b-a22b", "h100-80gb", "fp8", QWEN_H100)


def _job(run_id: str) -> Any:
    return build(next(r for r in read_runs(DEV) if r.run_id == run_id))


def _generator() -> ModuleType:
    return bridge_generator()


def _preset(gen: ModuleType, tag: str, release: str, model: str, gpu: str, backend: str | None) -> Any:
    return gen.Preset(release, tag, "c", "p", "N", model, gpu, "fp8", "V1",
                      {"pipeline_model_parallel_size": 1, "moe_flex_dispatcher_backend": backend})


def test_the_stacks_default_is_the_providers_alltoall() -> None:
    for release in ("25.09", "26.02", "26.04", "26.08"):
        assert resolve_stack(f"megatron-bridge@{release}").values["moe_dispatcher"] == "alltoall"


def test_qwen3_235b_on_h100_ran_alltoall_in_every_release() -> None:
    for release in ("26.02", "26.02.01", "26.04"):
        recipe = _recipe(release)
        assert recipe is None or recipe.settings.moe_dispatcher is None, release


def test_qwen3_30b_on_h100_runs_flex_from_26_02_01() -> None:
    # 26.02.01: qwen3_llm_pretrain.py sets flex outright (line 315); 26.04-26.06.01: the preset's HybridEP
    recipe = resolve_stack("megatron-bridge@26.04").recipe_for(
        "qwen3-30b-a3b", "h100-80gb", "fp8", {"tp": 1, "pp": 1, "cp": 1, "ep": 16, "mbs": 1, "gpus": 16})
    assert recipe is not None and recipe.settings.moe_dispatcher == "flex" and "v0.3.1-v0.5.1" in recipe.source


def test_a_run_takes_the_dispatcher_of_its_release_preset() -> None:
    hybridep, plain = _job("MB26.04-DGX-H100-Qwen3-30B-A3B-FP8"), _job("MB26.04-DGX-H100-Qwen3-235B-A22B-FP8")
    assert hybridep.project.spec.moe.token_dispatcher == "flex"
    assert plain.project.spec.moe.token_dispatcher == "alltoall"
    assert any(a.startswith("MoE dispatcher flex (the stack's recipe") for a in hybridep.assumed)


def test_the_flex_dispatcher_sends_fewer_bytes_across_nodes() -> None:
    # EP 16 over two 8-GPU nodes: each token crosses to the other node once (HybridEP) instead of once per copy
    job = _job("MB26.04-DGX-H100-Qwen3-30B-A3B-FP8").project
    alltoall = job.with_spec(moe={**job.spec.moe.model_dump(), "token_dispatcher": "alltoall"})
    layout = pinned_layout(job)
    fast, slow = project(job, layout), project(alltoall, layout)
    assert fast.breakdown["ep_a2a"] + fast.hidden["ep_a2a"] < slow.breakdown["ep_a2a"] + slow.hidden["ep_a2a"]


def test_26_02_01_qwen3_scripts_set_the_type_outright() -> None:
    gen = _generator()
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "qwen3-235b-a22b", "h100-80gb", "deepep"))[0] \
        == "alltoall"
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "qwen3-235b-a22b", "gb200", "hybridep"))[0] == "flex"
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "qwen3-30b-a3b", "h100-80gb", "deepep"))[0] == "flex"


def test_26_02_01_kimi_applies_its_recipes_deepep_when_the_preset_names_none() -> None:
    gen = _generator()
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "kimi-k2", "h100-80gb", None))[0] == "flex"
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "kimi-k2", "gb300", None))[0] == "alltoall"
    assert gen.dispatcher_of(_preset(gen, "v0.3.1", "26.02.01", "kimi-k2", "gb300", "hybridep"))[0] == "flex"


def test_deepseek_v3_on_h100_took_deepep_in_25_09() -> None:
    # v0.1.0rc3 scripts/performance/run_script.py: enable_deepep for DeepSeek-V3 on H100 only (B200/GB200 drop tokens)
    gen = _generator()
    h100 = gen.Preset("25.09", "v0.1.0rc3", "c", "p", "N", "deepseek-v3", "h100-80gb", "fp8", "", {})
    b200 = gen.Preset("25.09", "v0.1.0rc3", "c", "p", "N", "deepseek-v3", "b200", "fp8", "", {})
    assert gen.dispatcher_of(h100) == ("flex", None) and gen.dispatcher_of(b200) == ("alltoall", None)


def test_deepep_falls_back_to_alltoall_on_grace_blackwell() -> None:
    gen = _generator()
    assert gen.dispatcher_of(_preset(gen, "v0.4.0", "26.04", "qwen3-30b-a3b", "b200", "deepep"))[0] == "flex"
    fallback, why = gen.dispatcher_of(_preset(gen, "v0.4.0", "26.04", "qwen3-30b-a3b", "gb200", "deepep"))
    assert fallback == "alltoall" and why is not None and "skipped on gb200" in why


def test_hybridep_ran_only_on_grace_blackwell_in_25_11() -> None:
    gen = _generator()
    assert gen.dispatcher_of(_preset(gen, "v0.2.0", "25.11", "qwen3-30b-a3b", "b200", "hybridep"))[0] == "alltoall"
    assert gen.dispatcher_of(_preset(gen, "v0.2.0", "25.11", "qwen3-30b-a3b", "gb200", "hybridep"))[0] == "flex"
    assert gen.dispatcher_of(_preset(gen, "v0.3.0", "26.02", "qwen3-30b-a3b", "b200", "hybridep"))[0] == "flex"


def test_gpt_oss_presets_backend_reaches_the_model_only_from_26_04() -> None:
    # gpt_oss_llm_pretrain.py passes no backend in v0.2.0-v0.3.1; overrides.py applies it for every model from v0.4.0
    gen = _generator()
    early, why = gen.dispatcher_of(_preset(gen, "v0.3.0", "26.02", "gpt-oss-120b", "gb200", "hybridep"))
    assert early == "alltoall" and why is not None and "not passed on" in why
    assert gen.dispatcher_of(_preset(gen, "v0.4.0", "26.04", "gpt-oss-120b", "gb200", "hybridep"))[0] == "flex"


def test_dense_presets_choose_no_dispatcher() -> None:
    gen = _generator()
    assert gen.dispatcher_of(_preset(gen, "v0.4.0", "26.04", "llama3-70b", "h100-80gb", "deepep")) == (None, None)
