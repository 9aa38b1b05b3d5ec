"""Stacks: the user's framework and release as data, so `fit` answers for the run they will launch
(issue 15). Every published run of the development set, typed as the job file its team would write,
fits under its source's stack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.fidelity.jobs import Unprojectable, published_job
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping, load_job
from primus.solver.api import Question
from primus.solver.fit import fit
from primus.stacks.core import catalog_stacks, load_stack_file, resolve_stack
from primus.stacks.schema import StackSettings
from tests.conftest import as_json
from tests.helpers.runs_csv import row_of, write_rows

BASE = {"model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192, "global_batch_size": 128}


def test_the_issue_names_seven_stacks_and_each_is_shipped() -> None:
    names = set(catalog_stacks())
    assert {"megatron-lm", "megatron-bridge", "nemo", "torchtitan", "llm-foundry", "nemo-automodel", "primus"} <= names


@pytest.mark.parametrize("name", catalog_stacks())
def test_every_field_of_every_release_has_a_value_and_a_source(name: str) -> None:
    spec = load_stack_file(name)
    first = spec.releases[0].settings.given()
    assert set(first) == set(StackSettings.model_fields)  # the first release decides every field
    for rel in spec.releases:
        assert len(rel.source) > 20
        for key, setting in rel.settings.given().items():
            assert len(setting.source) >= 10, (name, rel.release, key)


# A source names something a reader can open at the state it had: a commit (7-40 hex), a URL or an arXiv
# id, in the field or in its release's source; or it says outright what it assumes ("not stated in").
_CITABLE = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"  # a commit, letters and digits
                      r"|https?://\S+|arXiv:\d{4}\.\d{4,5}|not stated in \S")


@pytest.mark.parametrize("name", catalog_stacks())
def test_every_field_cites_a_commit_a_url_an_arxiv_id_or_says_what_it_assumes(name: str) -> None:
    spec = load_stack_file(name)
    bare = [(rel.release, key, s.source) for rel in spec.releases
            for key, s in rel.settings.given().items()
            if not (_CITABLE.search(s.source) or _CITABLE.search(rel.source))]
    assert bare == [], bare


def test_a_citable_source_is_a_commit_url_or_arxiv_id_and_a_vague_one_is_not() -> None:
    assert _CITABLE.search("NVIDIA/Megatron-LM d98e8a6 megatron/training/arguments.py line 3671")
    assert _CITABLE.search("https://github.com/pytorch/torchtitan/pull/1033")
    assert _CITABLE.search("arXiv:2205.05198 section 5")
    assert _CITABLE.search("not stated in tr11-176B-ml.slurm; assumed PyTorch's default")
    assert not _CITABLE.search("primus's default")
    assert not _CITABLE.search("3596615680 params; the word effaced")  # a number or a word is not a commit
    assert not _CITABLE.search("the ledger's default kernel set (no separate profile section)")
    assert not _CITABLE.search("not stated: PyTorch default assumed")


def test_a_bare_name_is_the_newest_release_and_an_unknown_one_the_newest_not_after_it() -> None:
    assert resolve_stack("torchtitan").release == "2026.08"  # pytorch/torchtitan b5bcd76, Python configs
    old = resolve_stack("torchtitan@2025.01")  # between torchtitan 9dec370 (2024-12) and PR #1033 (2025-04)
    assert old.release == "2024.12" and old.note and "newest release not after it" in old.note
    assert old["cross_entropy"] == "eager" and resolve_stack("torchtitan@2025.06")["cross_entropy"] == "compiled"
    assert resolve_stack("megatron-bridge@25.09").note is None


def test_a_job_names_its_stack_and_defaults_to_megatron_lm() -> None:
    plain = job_from_mapping(BASE, "t")
    assert plain.resolved_stack.name == "megatron-lm" and plain.spec.optimizer.main_grads_dtype == "fp32"
    mb = job_from_mapping({**BASE, "stack": "megatron-bridge"}, "t")
    # Megatron-Bridge's performance recipes reduce gradients in bf16 and fuse the cross-entropy
    assert mb.spec.optimizer.main_grads_dtype == "bf16" and mb.spec.kernels.cross_entropy_fusion
    assert "optimizer" in mb.assumed and mb.assumptions()[0] == "stack megatron-bridge@26.06"


def test_the_job_file_wins_over_its_stack() -> None:
    job = job_from_mapping({**BASE, "stack": "megatron-bridge", "optimizer": {"main_grads_dtype": "fp32"},
                            "kernels": {"eager_cross_entropy": True}}, "t")
    assert job.spec.optimizer.main_grads_dtype == "fp32" and job.spec.kernels.eager_cross_entropy
    assert not job.spec.kernels.cross_entropy_fusion and "optimizer.main_grads_dtype" not in job.assumed


def test_a_framework_that_only_shards_with_fsdp_limits_sharding_by_a_rule() -> None:
    # a rule, not a pin: `tune` releases the job's pins but keeps its rules
    tt = job_from_mapping({**BASE, "stack": "torchtitan@2024.12"}, "t")
    assert tt.spec.kernels.eager_cross_entropy and tt.spec.parallel.sharding is None
    assert [r["require"] for r in tt.spec.rules] == ["sharding_fsdp"]
    assert any(a.startswith("rules (stack-sharding") for a in tt.assumed)
    assert job_from_mapping(BASE, "t").spec.rules == []  # Megatron-LM offers every sharding
    layout = fit(Question(tt)).layout
    assert layout is not None and layout.sharding == "fsdp"


def test_megatron_bridge_counts_the_embedding_and_the_loss_in_the_pipeline_split() -> None:
    # Llama 3.1 405B (126 layers) at PP 8 x VP 8, Megatron-Bridge's H100 recipe: 126 does not divide by
    # 64 chunks, 126 + 2 does.
    job = {**BASE, "model": "llama3.1-405b", "gpus": 1024, "precision": "fp8", "global_batch_size": 1536,
           "parallel": {"tp": 8, "pp": 8, "vp": 8, "cp": 2, "mbs": 1}}
    mb = job_from_mapping({**job, "stack": "megatron-bridge"}, "t")
    assert mb.spec.pipeline.account_for_embedding_in_pipeline_split
    assert mb.spec.pipeline.account_for_loss_in_pipeline_split
    assert not job_from_mapping(job, "t").spec.pipeline.account_for_loss_in_pipeline_split


def test_an_unknown_stack_is_one_line_and_exit_2(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**BASE, "stack": "megatron-brige"})
    code, out, err = run_cli("job", "show", path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "did you mean 'megatron-bridge'" in err and "stack" in err


def test_stack_option_replaces_the_files_stack_and_job_show_says_so(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**BASE, "stack": "megatron-bridge"})
    code, out, _ = run_cli("job", "show", path, "--stack", "nemo@25.03", "--format", "json")
    doc = as_json(out)
    assert code == 0 and (doc["stack"], doc["stack_release"]) == ("nemo", "24.07")
    assert doc["assumed"][0].startswith("stack nemo@24.07 (nemo@25.03 is not described")


def test_stacks_list_json_gives_name_releases_and_source(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("stacks", "list", "--format", "json")
    doc = as_json(out)
    assert code == 0 and {d["name"] for d in doc} == set(catalog_stacks())
    for d in doc:
        assert {"name", "releases", "source"} <= set(d) and d["releases"]
    code, out, _ = run_cli("stacks", "show", "torchtitan@2024.12", "--format", "json")
    assert code == 0 and as_json(out)["settings"]["cross_entropy"]["value"] == "eager"


def _dev_rows() -> list[Any]:
    return [r for r in read_runs(bundled_runs_path()) if r.complete]


def test_every_complete_development_run_typed_as_its_job_file_fits(tmp_path: Path) -> None:
    """Each complete run of runs_dev.csv, written as the job file a user would type (its published
    layout, the settings its source states, `stack:` of its source) and read as `primus fit` reads
    it, fits: every one of them ran."""
    refused: list[str] = []
    checked = 0
    for i, row in enumerate(_dev_rows()):
        try:
            mapping = published_job(row)
        except Unprojectable:
            continue
        path = tmp_path / f"run{i}.yaml"
        path.write_text(yaml.safe_dump(mapping, sort_keys=False))
        job = load_job(path)
        assert job.resolved_stack.label == mapping["stack"]
        checked += 1
        if not fit(Question(job)).fits:
            refused.append(row.run_id)
    assert checked == 191 and refused == []


def test_every_complete_amd_run_outside_the_development_set_fits_as_its_job_file(tmp_path: Path) -> None:
    """The same check on AMD's published Instinct runs (amd_runs_dev.csv, not in runs_dev.csv): the
    layout, recompute layers and launch options each source states, on the `primus` stack."""
    from primus.fidelity.runs import bundled_amd_runs_path

    rows = [r for r in read_runs(bundled_amd_runs_path()) if r.complete]
    refused = []
    for i, row in enumerate(rows):
        path = tmp_path / f"amd{i}.yaml"
        path.write_text(yaml.safe_dump(published_job(row), sort_keys=False))
        job = load_job(path)
        assert job.resolved_stack.name == "primus"
        if not fit(Question(job)).fits:
            refused.append(row.run_id)
    assert len(rows) == 11 and refused == []


def test_fit_on_a_published_job_file_exits_0(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # DGX Cloud 25.04.01 Llama 3 70B FP8 on 64 H100, TP4 PP8 VP5, as published (recompute unstated)
    row = next(r for r in _dev_rows() if r.run_id == "DGXC25.04.01-H100-Llama3-70B-FP8-64")
    mapping = published_job(row)
    assert mapping["stack"] == "nemo@25.04" and "recompute" not in mapping["parallel"]
    code, out, _ = run_cli("fit", write_job(mapping), "--format", "json")
    assert code == 0 and as_json(out)["fits"] is True


LAUNCH = Path(__file__).resolve().parent / "data" / "launch"


@pytest.mark.parametrize(("kind", "name", "stack"), [
    ("primus", "primus_llama3.1_70B-BF16-pretrain.yaml", "primus"),
    ("torchtitan", "torchtitan_llama3_70b.toml", "torchtitan@2025.04"),  # [float8]: until 2025-09
    ("megatron", "llama3_8b_h100_fp8.sh", None),
])
def test_import_sets_the_stack_the_file_implies(kind: str, name: str, stack: str | None) -> None:
    from primus.launch import import_launch

    config = import_launch(kind, LAUNCH / name, hardware="h100-80gb", nodes=8)
    assert config.job.get("stack") == stack


def test_a_run_that_omits_recompute_resolves_to_its_recipe(tmp_path: Path) -> None:
    # Megatron-Bridge's Llama 3 8B H100 FP8 preset (v0.5.0 LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1: TP 1,
    # PP 1, CP 1, MBS 1, GBS 128 on 8 GPUs) sets recompute_num_layers 5 (full, block method); a published run
    # of that recipe whose table leaves recompute empty is projected with it.
    from primus.fidelity.jobs import build

    fields, row = row_of(bundled_runs_path(), "DGXC25.04.01-H100-Llama3-8B-FP8-8")
    path = write_rows(tmp_path / "runs.csv", fields, [{**row, "run_id": "mb-8b", "source": "megatron-bridge-26.06",
                                                       "model": "llama3-8b", "recompute": "", "cp": "1"}])
    jobs = build(read_runs(path)[0])
    pins = jobs.project.spec.parallel
    assert (pins.recompute, pins.recompute_num_layers, pins.recompute_method) == ("full", 5, "block")
    assert any("the stack's recipe" in a for a in jobs.assumed) and jobs.escalated == ()


def test_docs_stacks_tables_every_field_of_every_stack_with_its_source() -> None:
    from primus.stacks.doc import generated_section, render

    page = (Path(__file__).resolve().parent.parent / "docs" / "stacks.md").read_text(encoding="utf-8")
    assert generated_section(page) == render()
    for name in catalog_stacks():
        for key in StackSettings.model_fields:
            assert f"| `{key}` |" in page and f"`{name}@" in page


def test_project_names_the_stack_and_uses_its_kernels(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # torchtitan's benchmarks ran torch.compile'd PyTorch: its projection uses the profile's
    # `stacks.pytorch-compile` section, Megatron-LM's the default kernels.
    job = {**BASE, "hardware": "h100-96gb-500w", "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1,
                                                             "recompute": "selective", "sharding": "fsdp"}}
    code, out, _ = run_cli("project", write_job({**job, "stack": "torchtitan@2025.04"}), "--format", "json")
    tt = as_json(out)
    code2, out2, _ = run_cli("project", write_job(job, "mlm.yaml"), "--format", "json")
    mlm = as_json(out2)
    assert code == code2 == 0
    assert tt["assumptions"][0] == "stack torchtitan@2025.04, kernels pytorch-compile"
    assert mlm["assumptions"][0].startswith("stack megatron-lm@")
    assert tt["step_time_s"] != mlm["step_time_s"]


def test_llm_foundry_reduce_scatters_fp32_gradients(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # llm-foundry's benchmark tables ran Composer FSDP with mixed_precision DEFAULT (their MP Mode column),
    # which Composer v0.16.4 (get_mixed_precision) maps to reduce_dtype float32: twice the reduce-scatter
    # bytes of a bf16 reduction. The job file still wins over the stack.
    assert resolve_stack("llm-foundry")["main_grads_dtype"] == "fp32"
    job = {**BASE, "stack": "llm-foundry", "model": "mpt-7b", "seq_len": 2048, "global_batch_size": 48,
           "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 6, "recompute": "none", "sharding": "fsdp"}}
    totals = []
    for name, extra in (("stack.yaml", {}), ("bf16.yaml", {"optimizer": {"main_grads_dtype": "bf16"}})):
        code, out, _ = run_cli("project", write_job({**job, **extra}, name), "--format", "json")
        assert code == 0, out
        doc = as_json(out)
        totals.append(doc["breakdown"].get("fsdp_comm", 0.0) + doc["hidden"].get("fsdp_comm", 0.0))
    assert totals[0] > totals[1] > 0


def test_a_megatron_lm_of_2025_is_read_with_megatron_cores_defaults_not_the_2022_papers(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Megatron Core 0.8.0 (core_v0.8.0 baf94af, 2024-08-12): TE flash attention, no recompute by default,
    # the distributed optimizer as its MoE example launches it; the 2022.05 release is the papers' setup
    stack = job_from_mapping({**BASE, "stack": "megatron-lm@2025.06"}, "t").resolved_stack
    assert stack.release == "2025.03"  # core_v0.11.0: 2024.08's settings and the fused permutation
    assert (stack.values["flash_attention"], stack.values["recompute"], stack.values["sharding"]) == (True, "none",
                                                                                                      "dist_opt")
    assert job_from_mapping({**BASE, "stack": "megatron-lm@2022.05"}, "t").resolved_stack.values["flash_attention"] \
        is False
    # Llama 3.1 70B on 64 H100, TP8 PP4 DP2 with SP and no recompute fits a 2025 Megatron-LM at 48.28 GiB
    job = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192, "global_batch_size": 128,
           "stack": "megatron-lm@2025.06",
           "parallel": {"tp": 8, "pp": 4, "dp": 2, "cp": 1, "sp": True, "recompute": "none", "sharding": "dist_opt"}}
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    assert code == 0 and round(as_json(out)["peak_bytes"] / 2**30, 2) == 48.28


def test_a_megatron_lm_of_2023_is_warned_that_it_gets_the_2022_papers_setup(run_cli) -> None:  # type: ignore[no-untyped-def]
    # Megatron Core 0.7.0 (2024-05-30) predates the first described release after the papers (2024.08)
    code, _, err = run_cli("stacks", "show", "megatron-lm@core_v0.7.0")
    assert code == 0 and "using megatron-lm@2022.05" in err and "the 2022 papers' setup" in err
    assert "papers' setup" not in run_cli("stacks", "show", "megatron-lm@2022.05")[2]
