"""A pin Megatron-LM refuses is refused, and one it normalises is said (review 01, item 2): never a
silent change. Megatron-LM validate_args (megatron/training/arguments.py) asserts a pipeline under a
virtual pipeline, asserts experts under expert parallelism, and switches sequence parallelism off at
TP 1 with a warning."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

BASE = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 64,
        "precision": "bf16"}
LAYOUT = {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "dp": 4, "mbs": 1, "sp": True, "recompute": "none",
          "sharding": "dist_opt"}
SP_NOTE = ("sp: true at TP1 is evaluated with sequence parallelism off, as Megatron-LM runs it (validate_args: "
           "'Disabling sequence parallelism because tensor model parallelism is disabled')")


def _job(tmp_path: Path, **parallel: object) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**BASE, "parallel": {**LAYOUT, **parallel}}, sort_keys=False))
    return str(path)


def test_vp_2_at_pp_1_is_refused_naming_megatrons_interleaving_rule(run_cli, tmp_path):
    code, out, _ = run_cli("fit", _job(tmp_path, vp=2), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and not doc["fits"]
    assert doc["violated_rules"] == ["interleaving-needs-pipeline", "pin:pp", "pin:vp"]
    assert doc["core_details"]["interleaving-needs-pipeline"] == (
        "Megatron-LM refuses a virtual pipeline without a pipeline: pinned VP2 with PP1")
    assert doc["alternatives"][0]["changed"] == ["vp"]


def test_vp_2_at_pp_1_is_not_exported(run_cli, tmp_path):
    code, out, err = run_cli("export", _job(tmp_path, vp=2), "--to", "megatron")
    assert code == 1 and out == ""
    assert "violated: interleaving-needs-pipeline, pin:pp, pin:vp" in err


def test_ep_8_on_a_dense_model_is_refused_naming_megatrons_expert_rule(run_cli, tmp_path):
    code, out, _ = run_cli("fit", _job(tmp_path, ep=8, etp=2), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["violated_rules"] == ["ep-needs-experts", "pin:ep"]
    assert "pinned EP8 for llama3.1-8b, a dense model" in doc["core_details"]["ep-needs-experts"]


def test_etp_on_a_dense_model_fits_and_says_it_has_no_effect(run_cli, tmp_path):
    code, out, _ = run_cli("fit", _job(tmp_path, etp=2), "--format", "json")
    doc = json.loads(out)
    note = ("etp: 2 has no effect: llama3.1-8b has no expert layers for an expert tensor-parallel group to split, "
            "so the layout is evaluated as ETP1")
    assert code == 0 and doc["parallel"]["etp"] == 1
    assert doc["notes"] == [note] and doc["assumptions"][0] == note


def test_sp_at_tp_1_is_switched_off_as_megatron_does_and_said_in_text_json_and_export(run_cli, tmp_path):
    job = _job(tmp_path, tp=1, dp=8, recompute="full")
    code, out, _ = run_cli("fit", job, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["parallel"]["sp"] is False
    assert doc["notes"] == [SP_NOTE] and SP_NOTE in doc["assumptions"]
    _, text, _ = run_cli("fit", job)
    assert f"note: {SP_NOTE}" in " ".join(text.split())
    code, script, err = run_cli("export", job, "--to", "megatron")
    assert code == 0 and "--sequence-parallel" not in script
    assert f"primus: note: {SP_NOTE}" in err


def test_a_refusal_at_tp_1_with_sp_pinned_says_so_too(run_cli, tmp_path):
    code, out, _ = run_cli("fit", _job(tmp_path, tp=1, dp=8), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["parallel"]["tp"] == 1
    assert SP_NOTE in doc["notes"]


def test_a_recompute_layer_count_without_full_recompute_is_said_to_have_no_effect(run_cli, tmp_path):
    code, out, _ = run_cli("fit", _job(tmp_path, recompute="selective", recompute_num_layers=4), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["parallel"]["recompute"] == "selective"
    assert doc["notes"] == ["recompute_num_layers: 4 has no effect with recompute selective: Megatron-LM reads it "
                            "only under full recompute (--recompute-granularity full)"]
