"""`primus memory` answers for the pins as written, with `fit`'s rules (review 47, H1).

Megatron-LM refuses some layouts outright and normalises others. NVIDIA/Megatron-LM d98e8a6
megatron/training/arguments.py:
- 1000-1009: a virtual pipeline asserts pipeline_model_parallel_size > 1 (> 2 without --overlap-p2p-comm);
- 1655-1656: expert_model_parallel_size > 1 asserts "num_experts must be non None to use expert model
  parallelism";
- 1433-1439: sequence parallelism at tensor_model_parallel_size 1 is switched off with a warning.
So `memory` refuses the first two (exit 1, the ledger still printed, the rule named as `fit` names it)
and keeps the third, said in its assumptions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import primus

# Llama 3.1 8B on one node of 8 H100 at TP2 (DP4): 48,000,512,000 B on stage 0, within the 78,918,092,063 B
# capacity (85,029,158,912 B of HBM less the 1 GiB context and the default allocator's reserve).
BASE: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                        "global_batch_size": 64, "precision": "bf16"}
PINS: dict[str, Any] = {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                        "sharding": "dist_opt"}
PEAK_TP2 = 48_000_512_000
REFUSED = [({"ep": 2}, "ep-needs-experts", "ep", 1), ({"vp": 4}, "interleaving-needs-pipeline", "vp", 1)]


def job(**pins: Any) -> dict[str, Any]:
    return {**BASE, "parallel": {**PINS, **pins}}


@pytest.mark.parametrize(("extra", "rule", "axis", "read_as"), REFUSED, ids=["ep2-dense", "vp4-pp1"])
def test_a_layout_megatron_refuses_does_not_fit_and_names_the_rule(run_cli, write_job, extra, rule, axis, read_as):
    code, out, err = run_cli("memory", write_job(job(**extra)), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and err == ""
    assert doc["fits"] is False and doc["legal"] is False and doc["verdict"] == "does not fit"
    assert doc["violated_rules"] == [rule]
    assert doc["peak_bytes"] == PEAK_TP2  # the ledger is still the answer's body
    assert doc["parallel"][axis] == read_as
    assert any(n.startswith(f"{axis}: {extra[axis]} is refused by Megatron-LM ({rule})") for n in doc["notes"])
    assert doc["assumptions"][0] == doc["notes"][0]


@pytest.mark.parametrize(("extra", "rule", "axis", "read_as"), REFUSED, ids=["ep2-dense", "vp4-pp1"])
def test_memory_names_a_rule_fit_names_for_the_same_pins(run_cli, write_job, extra, rule, axis, read_as):
    path = write_job(job(**extra))
    fit = json.loads(run_cli("fit", path, "--format", "json")[1])
    memory = json.loads(run_cli("memory", path, "--format", "json")[1])
    assert fit["fits"] is False and rule in fit["violated_rules"]
    assert memory["rule_details"][rule] == fit["core_details"][rule]


def test_the_refusal_is_said_in_the_table_with_the_bytes(run_cli, write_job):
    code, out, _ = run_cli("memory", write_job(job(ep=2)))
    assert code == 1
    assert ("capacity 73.50 GiB (78,918,092,063 B): DOES NOT FIT: the layout breaks ep-needs-experts "
            "(the bytes alone: fit)") in out
    assert ("  - ep-needs-experts: Megatron-LM refuses expert parallelism without experts: pinned EP2 for "
            "llama3.1-8b, a dense model") in out


@pytest.mark.parametrize(("extra", "rule", "axis", "read_as"), REFUSED, ids=["ep2-dense", "vp4-pp1"])
def test_project_names_the_same_rule(run_cli, write_job, extra, rule, axis, read_as):
    code, out, _ = run_cli("project", write_job(job(**extra)), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["fits"] is False
    assert doc["reason"].startswith(f"the pinned layout breaks {rule}: Megatron-LM refuses")


def test_sp_at_tp_1_is_run_without_sequence_parallelism_and_said(run_cli, write_job):
    # Llama 3.1 8B at TP1 DP8 with full recompute fits; sp: true is read as Megatron-LM reads it at TP1
    code, out, _ = run_cli("memory", write_job(job(tp=1, recompute="full")), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["legal"] is True and doc["violated_rules"] == []
    assert doc["parallel"]["sp"] is False
    assert doc["notes"] == ["sp: true at TP1 is evaluated with sequence parallelism off, as Megatron-LM runs it "
                            "(validate_args: 'Disabling sequence parallelism because tensor model parallelism is "
                            "disabled')"]
    assert doc["assumptions"][0] == doc["notes"][0]


def test_a_rule_the_job_file_adds_is_read_by_memory_as_by_fit(run_cli, write_job):
    path = write_job({**job(), "rules": [{"id": "tp-at-least-4", "why": "site policy", "source": "ops",
                                         "require": "tp >= 4"}]})
    doc = json.loads(run_cli("memory", path, "--format", "json")[1])
    assert doc["violated_rules"] == ["tp-at-least-4"] and doc["fits"] is False
    assert "tp-at-least-4" in json.loads(run_cli("fit", path, "--format", "json")[1])["violated_rules"]


def test_a_legal_layout_that_fits_is_unchanged(run_cli, write_job):
    code, out, _ = run_cli("memory", write_job(job()), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["fits"] is True and doc["legal"] is True and doc["verdict"] == "fits"
    assert doc["peak_bytes"] == PEAK_TP2 and doc["notes"] == []


def test_the_python_api_gives_the_cli_document(run_cli, write_job):
    path = write_job(job(ep=2))
    answer = primus.memory_ledger(path)
    assert answer.negative and not answer.legal and answer.violated_rules == ("ep-needs-experts",)
    assert answer.report.peak_bytes == PEAK_TP2
    assert answer.to_json() == json.loads(run_cli("memory", path, "--format", "json")[1])


# Megatron-LM asserts a global batch of whole microbatches on every data-parallel rank (arguments.py,
# "global batch size (...) is not divisible by micro batch size (...) times data parallel size (...)"): 100 at
# MBS 1 x DP 4 is 25 microbatches, 102 is not a whole number of them, and no layout exists to count bytes for.
@pytest.mark.parametrize("command", ["memory", "project", "fit"])
def test_a_global_batch_of_no_whole_microbatches_does_not_fit_in_every_command(run_cli, write_job, command):
    code, out, err = run_cli(command, write_job({**job(), "global_batch_size": 102}), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and err == "" and doc["fits"] is False
    said = doc.get("violated_rules") or [doc["reason"].split(":")[0].removeprefix("the pinned layout breaks ")]
    assert "batch-divisible" in said  # fit also lists the pins it could not keep


def test_pins_that_describe_no_layout_have_no_ledger_and_say_why(run_cli, write_job):
    path = write_job({**job(), "global_batch_size": 102})
    doc = json.loads(run_cli("memory", path, "--format", "json")[1])
    assert doc["peak_bytes"] is None and doc["stages"] == [] and doc["legal"] is False
    code, out, _ = run_cli("memory", path)
    assert code == 1 and "DOES NOT FIT: the pinned layout breaks batch-divisible" in out
    assert primus.memory_ledger(path).to_json() == doc
    code, out, err = run_cli("memory", path, "--format", "csv")  # a table of stages has no place for the reason
    assert code == 1 and out.count("\n") == 1 and err.startswith("primus: does not fit: the pinned layout breaks "
                                                                  "batch-divisible: ")


# Megatron-LM's interleaved schedule runs microbatches in groups of PP (schedules.py
# forward_backward_pipelining_with_interleaving: "number of microbatches ... is not divisible by pipeline-model-
# parallel-size"): PP 4 x VP 2 with 6 microbatches is refused, but its bytes are still those of a layout.
def test_an_interleaved_schedule_of_uneven_microbatch_groups_keeps_its_ledger(run_cli, write_job):
    path = write_job({**job(pp=4, vp=2), "global_batch_size": 6})
    code, out, _ = run_cli("memory", path, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["violated_rules"] == ["interleaved-microbatches"] and doc["peak_bytes"] > 0
    fit = json.loads(run_cli("fit", path, "--format", "json")[1])
    assert "interleaved-microbatches" in fit["violated_rules"]
    code, out, err = run_cli("project", path, "--format", "json")
    assert code == 1 and err == "" and json.loads(out)["reason"].startswith(
        "the pinned layout breaks interleaved-microbatches")
