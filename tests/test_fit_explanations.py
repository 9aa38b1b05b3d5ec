"""`fit` explanations a user can act on (issue 16): the definition pins break, sizes in GPUs and nodes."""

from __future__ import annotations

import json

import pytest

from primus.solver.fit import nodes_text

# A user pins TP8 × PP4 × DP4 = 128 ranks on a 16-GPU job: the world-size definition is what breaks.
SIXTEEN = {"model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 16, "seq_len": 8192,
           "global_batch_size": 128, "parallel": {"tp": 8, "pp": 4, "dp": 4}}
ONE_GPU_8B = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 1, "seq_len": 4096, "global_batch_size": 64}


def test_pins_whose_product_contradicts_the_gpu_count_name_the_world_size_rule(run_cli, write_job):
    code, out, _ = run_cli("fit", write_job(SIXTEEN), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["violated_rules"][0] == "world-size"
    assert "memory" not in doc["violated_rules"]  # no byte is read before the pins contradict the world
    pins = [n for n in doc["violated_rules"] if n.startswith("pin:")]
    assert len(pins) >= 2  # a conflict between pins, not one impossible pin
    assert "16 GPUs" in doc["core_details"]["world-size"]


def test_the_world_size_arithmetic_is_shown_in_the_table(run_cli, write_job):
    out = run_cli("fit", write_job(SIXTEEN))[1]
    assert "world-size" in out and "TP8" in out and "16 GPUs" in out


def test_a_refusal_before_any_layout_is_evaluated_still_names_its_stack_and_capacity(run_cli, write_job):
    # the pins contradict the world size, so no layout is evaluated; the answer still says which framework
    # it answered for and the capacity it would have checked against (H100 80 GB: 85,029,158,912 B of HBM)
    job = write_job({**SIXTEEN, "stack": "megatron-bridge@26.06"})
    doc = json.loads(run_cli("fit", job, "--format", "json")[1])
    assert doc["stages"] == []
    assert doc["assumptions"][0].startswith("stack megatron-bridge@26.06")
    assert "HBM 85,029,158,912 B" in doc["assumptions"][1]
    text = run_cli("fit", job)[1]
    assert "assumptions:" in text and "stack megatron-bridge@26.06" in text


def test_pins_that_fit_the_world_keep_the_memory_explanation(run_cli, write_job):
    doc = json.loads(run_cli("fit", write_job({**SIXTEEN, "parallel": {"tp": 8, "pp": 1, "dp": 2, "cp": 1,
                                                                      "recompute": "none"}}),
                             "--format", "json")[1])
    assert "world-size" not in doc["violated_rules"] and "memory" in doc["violated_rules"]


def test_a_one_gpu_job_that_needs_two_gpus_says_two_gpus_not_two_nodes(run_cli, write_job):
    code, out, _ = run_cli("fit", write_job(ONE_GPU_8B), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and not doc["alternatives"]
    assert doc["min_gpus"] == 2 and doc["min_nodes"] == 1
    text = run_cli("fit", write_job(ONE_GPU_8B))[1]
    assert "the smallest size at which one does: 2 GPUs (part of 1 node of 8)" in text
    assert run_cli("enumerate", write_job({**ONE_GPU_8B, "gpus": 2}), "--count")[0] == 0


def test_sizes_are_said_in_gpus_and_in_nodes():
    assert nodes_text(16, 8) == "16 GPUs (2 nodes of 8)"
    assert nodes_text(8, 8) == "8 GPUs (1 node of 8)"
    assert nodes_text(1, 8) == "1 GPU (part of 1 node of 8)"


# Llama 3.1 8B on 32 nodes of H100: CP is bounded by the attention tile, 128 tokens per chunk and 2 chunks
# per rank (FlashAttention-2/3 query tiles; Megatron-Core's 2 x CP load-balanced split).
CP_JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 32, "seq_len": 4096, "global_batch_size": 256}


@pytest.mark.parametrize(("seq_len", "largest_cp"), [(4096, 16), (8192, 32)])
def test_no_legal_layout_splits_a_sequence_below_one_attention_tile_per_chunk(run_cli, write_job, seq_len,
                                                                               largest_cp):
    rows = [json.loads(x) for x in run_cli("enumerate", write_job({**CP_JOB, "seq_len": seq_len}),
                                           "--format", "jsonl")[1].splitlines()]
    assert max(r["parallel"]["cp"] for r in rows) == largest_cp  # seq / (2 x CP) >= 128


def test_fit_does_not_offer_cp_256_at_sequence_4096(run_cli, write_job):
    doc = json.loads(run_cli("fit", write_job(CP_JOB), "--format", "json")[1])
    assert doc["fits"] and doc["parallel"]["cp"] <= 4096 // (2 * 128)


def test_a_cp_pin_below_one_tile_per_chunk_is_refused_by_the_tile_rule(run_cli, write_job):
    doc = json.loads(run_cli("fit", write_job({**CP_JOB, "nodes": 4, "parallel": {"cp": 32}}), "--format", "json")[1])
    assert doc["violated_rules"] == ["cp-chunk-tile", "pin:cp"]


def test_a_cp_pin_that_does_not_halve_the_chunks_evenly_is_refused_by_megatrons_rule(run_cli, write_job):
    # 24 GPUs, CP 3: 4,000 tokens do not split into 2 x 3 equal chunks (Megatron-Core get_batch_on_this_cp_rank)
    job = {**CP_JOB, "nodes": 3, "seq_len": 4000, "global_batch_size": 24, "parallel": {"cp": 3}}
    doc = json.loads(run_cli("fit", write_job(job), "--format", "json")[1])
    assert doc["violated_rules"] == ["cp-sequence", "pin:cp"]
