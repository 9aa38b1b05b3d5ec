"""One rule per source for unstated settings: each source maps to its framework's defaults (with
evidence), applied the same way to every row of that source, and the docs page keeps its measured
section."""

from __future__ import annotations

from primus.fidelity.accuracy_doc import END, START, measured_section
from primus.fidelity.defaults import all_rules, rule_for
from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.schedule.layout import build_layout
from primus.stacks.apply import recipe_layout
from primus.stacks.core import load_stack_file, resolve_stack


def test_every_source_of_the_development_set_has_a_stack_that_names_it() -> None:
    sources = {r.source for r in read_runs(bundled_runs_path()) if r.complete}
    for source in sources:
        rule = rule_for(source)
        prefixes = load_stack_file(rule.stack.name).validate_sources
        assert any(source.lower().startswith(p) for p in prefixes), source
        assert len(rule.evidence) > 40 and rule.describe().startswith(rule.name)
    assert rule_for("some-new-lab").name == resolve_stack(None).label  # the default stack, newest release
    assert len({r.name for r in all_rules()}) == len(all_rules())


def test_rules_set_the_framework_defaults_of_their_release() -> None:
    mb = rule_for("megatron-bridge-26.06").job_keys(tp=4, scaleup_domain=8, is_moe=True)
    assert mb["optimizer"]["main_grads_dtype"] == "bf16" and mb["kernels"]["cross_entropy_fusion"]
    # the model providers' alltoall (Megatron-Bridge v0.2.0 *_provider.py, v0.4.0+ the bridges); a preset's
    # DeepEP/HybridEP backend reaches a run through its recipe (tests/test_moe_dispatcher_recipes.py)
    assert mb["overlap"]["tp_comm"] and mb["moe"]["token_dispatcher"] == "alltoall"
    assert not rule_for("megatron-bridge-26.06").job_keys(tp=1, scaleup_domain=8, is_moe=False)["overlap"]["tp_comm"]
    nemo = rule_for("dgxc-25.05")
    assert nemo.job_keys(tp=2, scaleup_domain=72, is_moe=True)["moe"]["token_dispatcher"] == "alltoall"
    # NeMo 7a8f1cc (llmb r2.3.0, what DGX Cloud 25.05 checks out) recipes/deepseek.py line 86: alltoall on
    # H100 too; the flex/DeepEP dispatcher on H100 came with NeMo v2.4.0 (2381f42, 2025-07-25)
    assert nemo.job_keys(tp=2, scaleup_domain=8, is_moe=True)["moe"]["token_dispatcher"] == "alltoall"
    assert nemo.etp_is_tp and not rule_for("megatron-bridge-25.11").etp_is_tp
    kort = rule_for("korthikanti2022")
    assert not kort.stack["flash_attention"] and kort.sharding == "none" and kort.stack["main_grads_dtype"] == "fp32"
    tt = rule_for("torchtitan")
    assert tt.framework == "torchtitan" and tt.kernels == "pytorch-compile" and tt.sharding == "fsdp"
    assert rule_for("mosaicml").kernels == "pytorch-eager"


def test_torchtitan_rows_get_the_rule_of_their_release() -> None:
    # benchmarks/llama3_h100_202412_torchtitan.md ran torchtitan 9dec370 (2024-12-26), before PR #1033
    # (2025-04-01) compiled the loss; llama3-8b_h200_202506_trainy-whitefiber.md ran e7c0cae (2025-06-13)
    old = _row("TT-8B-128gpu-FSDP + torch.compile + Float8")
    new = _row("TT-Trainy-H200-8B-8node")
    assert (old.published, new.published) == ("2024-12", "2025-06")
    assert rule_for(old.source, old.published).eager_cross_entropy
    assert not rule_for(new.source, new.published).eager_cross_entropy
    assert not rule_for("torchtitan").eager_cross_entropy  # undated: the current release
    assert build(old).project.spec.kernels.eager_cross_entropy
    assert not build(new).project.spec.kernels.eager_cross_entropy


def _row(run_id: str):  # type: ignore[no-untyped-def]
    return next(r for r in read_runs(bundled_runs_path()) if r.run_id == run_id)


def test_stated_cells_win_and_unstated_ones_are_recorded() -> None:
    jobs = build(_row("Korthikanti22-A100-1T-SP+selective"))  # vp left empty by the source
    spec = jobs.project.spec
    assert spec.parallel.recompute == "selective" and spec.parallel.vp == 1 and not spec.kernels.flash_attention
    assert any(a.startswith("vp 1") for a in jobs.assumed)
    assert "vp" not in jobs.fit.spec.parallel.pinned()  # the fit check leaves it free
    mb = build(_row("MB26.04.01-DGX-H100-Llama3-70B-FP8"))
    assert mb.project.spec.fp8_recipe == "tensorwise" and mb.project.spec.optimizer.main_grads_dtype == "bf16"
    assert "recompute" not in mb.fit.spec.parallel.pinned() and "sp" not in mb.fit.spec.parallel.pinned()


def test_recompute_left_empty_is_the_stacks_and_any_escalation_is_recorded() -> None:
    small = build(_row("DGXC25.04.01-H100-Llama3-8B-BF16-128"))
    assert small.project.spec.parallel.recompute == "none" and small.escalated == ()
    # Megatron-Bridge 25.11's GPT-OSS 120B H100 preset recomputes layernorm and moe_act at MBS 1; the
    # published table's MBS 4 does not fit that way (docs/stacks.md), so the row escalates, on the record
    big = build(_row("MB25.11-DGX-H100-GPT-OSS-120B-BF16"))
    assert big.project.spec.parallel.recompute == "full"
    assert big.escalated and big.escalated[0].startswith("recompute selective -> full")


def test_recipe_layouts_keep_the_extra_layers_off_the_ends() -> None:
    for layers, pp, vp, mtp in ((61, 8, 4, 0), (61, 2, 8, 1), (94, 8, 4, 0), (61, 16, 1, 1)):
        text = recipe_layout(layers, pp, vp, mtp)
        layout = build_layout(layers, pp, vp, mtp_num_layers=mtp, layout=text)
        per_rank = [layout.num_decoder_layers_on(r) for r in range(pp)]
        assert sum(per_rank) == layers
        assert max(per_rank) - min(per_rank) <= vp
        assert per_rank[-1] == min(per_rank)


def test_the_measured_section_survives_regeneration() -> None:
    old = f"# Accuracy\n\nold table\n{START}\nCPU numbers by another generator\n{END}\ntrailer\n"
    assert measured_section(old) == f"{START}\nCPU numbers by another generator\n{END}"
    assert measured_section("no markers") == f"{START}\n{END}"
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "accuracy.md").read_text()
    assert doc.count(START) == 1 and doc.count(END) == 1 and doc.index(START) < doc.index(END)


def test_flagged_data_conflicts_are_development_rows_and_stay_visible_on_the_page() -> None:
    from pathlib import Path

    from primus.fidelity.accuracy_sections import data_conflicts

    conflicts = data_conflicts()
    ids = {r.run_id for r in read_runs(bundled_runs_path()) if r.complete}
    assert "DGXC25.05-GB200-DeepSeek-V3-BF16-128" in conflicts
    assert set(conflicts) <= ids and all(len(e) > 100 for e in conflicts.values())
    page = (Path(__file__).resolve().parent.parent / "docs" / "accuracy.md").read_text()
    assert "## Published-data conflicts" in page and all(run_id in page for run_id in conflicts)
