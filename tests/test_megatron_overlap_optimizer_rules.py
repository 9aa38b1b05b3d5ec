"""Layouts Megatron-LM refuses at start-up for the MoE all-to-all overlap and the precision-aware optimizer
(review 50, H1 and H2): `fit` names the rule, `enumerate` never lists them and `export` never writes them.

Sources: NVIDIA/Megatron-LM core_v0.18.0 megatron/core/transformer/transformer_config.py lines 2405-2441
(overlap_moe_expert_parallel_comm asserts) and megatron/core/optimizer/optimizer_config.py lines 428-430
("--use-precision-aware-optimizer only supported with distributed optimizer").
"""

from __future__ import annotations

import json

MIXTRAL = {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
           "global_batch_size": 256, "precision": "bf16", "overlap": {"moe_a2a": True}}
PINS = {"tp": 1, "pp": 4, "vp": 2, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False, "recompute": "selective",
        "sharding": "dist_opt"}
LLAMA = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64,
         "precision": "bf16", "optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}}


def _fit(run_cli, path: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    code, out, _ = run_cli("fit", path, "--format", "json")
    doc = json.loads(out)
    assert code == (0 if doc["fits"] else 1)
    return doc


def test_the_moe_all_to_all_overlap_at_pp_4_needs_virtual_stages(run_cli, write_job):
    doc = _fit(run_cli, write_job({**MIXTRAL, "parallel": {**PINS, "vp": 1}}))
    assert doc["fits"] is False and "moe-a2a-overlap-needs-vp" in doc["violated_rules"]


def test_the_moe_all_to_all_overlap_refuses_full_recompute(run_cli, write_job):
    doc = _fit(run_cli, write_job({**MIXTRAL, "parallel": {**PINS, "recompute": "full"}}))
    assert doc["fits"] is False and "moe-a2a-overlap-no-full-recompute" in doc["violated_rules"]


def test_the_moe_all_to_all_overlap_with_vp_and_selective_recompute_fits(run_cli, write_job):
    assert _fit(run_cli, write_job({**MIXTRAL, "parallel": PINS}))["fits"] is True


def test_no_legal_layout_of_the_overlap_has_full_recompute_ep_1_or_pp_without_vp(run_cli, write_job):
    code, out, _ = run_cli("enumerate", write_job({**MIXTRAL, "parallel": {"tp": 1, "cp": 1}}), "--format", "json")
    rows = [r["parallel"] for r in json.loads(out)["layouts"]]
    assert code == 0 and rows
    assert all(r["recompute"] != "full" and r["ep"] > 1 and (r["pp"] == 1 or r["vp"] > 1) for r in rows)


def test_export_never_writes_the_overlap_for_a_layout_megatron_refuses(run_cli, write_job):
    code, out, err = run_cli("export", write_job({**MIXTRAL, "parallel": {**PINS, "vp": 1}}), "--to", "megatron")
    assert code == 1 and "--overlap-moe-expert-parallel-comm" not in out and "moe-a2a-overlap-needs-vp" in err


def test_bf16_moments_without_a_sharded_optimizer_are_refused(run_cli, write_job):
    pins = {"tp": 4, "pp": 1, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "none"}
    doc = _fit(run_cli, write_job({**LLAMA, "parallel": {**pins, "sharding": "none"}}))
    assert doc["fits"] is False and doc["violated_rules"] == ["precision-aware-optimizer-needs-dist-opt",
                                                              "pin:sharding"]
    assert _fit(run_cli, write_job({**LLAMA, "parallel": {**pins, "sharding": "dist_opt"}}))["fits"] is True


def test_a_primus_export_of_fsdp_with_bf16_moments_writes_megatron_fsdp_not_torch_fsdp2(run_cli, write_job):
    # torch FSDP2 asserts no distributed optimizer (core_v0.18.0 arguments.py line 1017), which the
    # precision-aware optimizer needs; Megatron FSDP turns it on (lines 1107-1119)
    pins = {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "none", "sharding": "fsdp"}
    code, out, err = run_cli("export", write_job({**LLAMA, "parallel": pins}), "--to", "primus")
    assert code == 0, err
    assert "use_torch_fsdp2: true" not in out and "use_megatron_fsdp: true" in out
    assert "use_precision_aware_optimizer: true" in out
