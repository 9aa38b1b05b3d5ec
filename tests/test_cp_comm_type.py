"""Context parallelism other than the p2p ring: Megatron-Core's `--cp-comm-type` (TransformerConfig cp_comm_type),
which Transformer Engine runs as AttnFuncWithCPAndKVP2P (p2p), AttnFuncWithCPAndKVAllGather (all_gather) or
AttnFuncWithCPAndQKVOA2A (a2a, DeepSpeed Ulysses) in dot_product_attention/context_parallel.py (TE v2.12).

- TE runs sliding-window attention under CP only with a2a or all_gather (lines 4026-4029), attention sinks only
  with a2a (lines 4045-4047), multi-latent attention only with p2p or a2a+p2p (lines 4031-4035), and a2a needs
  the query and key/value heads per rank to divide by CP (lines 3365-3367).
- Megatron-Bridge's own gpt-oss recipe trains with cp_comm_type "a2a" (v0.6.0 recipes/gpt_oss/h100/gpt_oss.py
  line 70).
- --cp-comm-type first appears in Megatron-LM core_v0.10.0 (arguments.py line 1755).

The model is Llama 3.1 8B (32 heads in 8 groups of head dim 128, hidden 4096; meta-llama/Llama-3.1-8B
config.json) at sequence 16384, MBS 1, TP 1, CP 2: 8192 tokens per rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.job import job_from_mapping
from primus.memory.activations import cp_gather_bytes, layer_inventory
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.projection import Projector, load_profile
from primus.projection.ops import layer_block

LLAMA_CP2: dict[str, Any] = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 16, "seq_len": 16384, "global_batch_size": 64,
    "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 2, "mbs": 1, "sp": False, "recompute": "selective",
                 "sharding": "dist_opt"}}
#: the same at TP 2 with sequence parallelism, which fits an H100 (the byte tests above need no fit)
LLAMA_TP2_CP2: dict[str, Any] = {**LLAMA_CP2, "parallel": {**LLAMA_CP2["parallel"], "tp": 2, "sp": True}}
MISTRAL_CP2: dict[str, Any] = {
    "model": "mistral-7b", "hardware": "h100-80gb", "gpus": 16, "seq_len": 16384, "global_batch_size": 64,
    "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 2, "mbs": 1, "sp": True, "recompute": "selective",
                 "sharding": "dist_opt"}}
GPT_OSS_CP2: dict[str, Any] = {
    "model": "gpt-oss-20b", "hardware": "b200", "gpus": 16, "seq_len": 16384, "global_batch_size": 64,
    "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 2, "ep": 8, "etp": 1, "mbs": 1, "sp": False, "recompute": "full",
                 "sharding": "dist_opt"}}
#: 8192 tokens x 32 heads x 128 x 2 B: the rank's q (and the attention output) as a bf16 tensor
Q_BYTES = 8192 * 32 * 128 * 2
#: 8192 tokens x 8 groups x 128 x 2 B: its k (or v)
KV_BYTES = 8192 * 8 * 128 * 2


def _job(data: dict[str, Any], comm: str) -> Any:
    return job_from_mapping({**data, "context_parallel": {"comm_type": comm}}, "job.yaml")


def _cp_comms(comm: str) -> list[tuple[str, float, int, int, str]]:
    job = _job(LLAMA_CP2, comm)
    ctx = Projector(job, load_profile(job.cluster)).context(pinned_layout(job))
    return [(c.kind, c.nbytes, c.fwd, c.bwd, c.overlap) for c in layer_block(job.model, "dense", ctx).comms
            if c.name == "cp_comm"]


def _fit(run_cli, write_job, job: dict[str, Any]) -> tuple[int, dict[str, Any]]:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    return code, json.loads(out)


def test_p2p_passes_k_and_v_round_the_ring_overlapped() -> None:
    # CP - 1 = 1 step forward (K and V), 2 backward (K, V and their gradients)
    assert _cp_comms("p2p") == [("p2p", 2 * KV_BYTES, 1, 2, "cp")]


def test_a2a_sends_q_k_v_and_the_output_through_one_all_to_all_each_way() -> None:
    assert _cp_comms("a2a") == [("all_to_all", Q_BYTES, 1, 1, "none"), ("all_to_all", KV_BYTES, 1, 1, "none"),
                                ("all_to_all", KV_BYTES, 1, 1, "none"), ("all_to_all", Q_BYTES, 1, 1, "none")]


def test_all_gather_gathers_k_and_v_twice_and_reduce_scatters_their_gradients() -> None:
    full = 2 * KV_BYTES  # CP x the local K (or V)
    assert _cp_comms("all_gather") == [("all_gather", full, 1, 1, "none"), ("all_gather", full, 1, 1, "none"),
                                       ("reduce_scatter", full, 0, 1, "none"),
                                       ("reduce_scatter", full, 0, 1, "none")]


def test_the_ring_talks_to_its_neighbour_and_the_collectives_to_the_whole_cp_group() -> None:
    # a ring step goes to the next rank; an all-gather, reduce-scatter or all-to-all spans the CP group
    for comm, group in (("p2p", "cp"), ("a2a", "cp_group"), ("all_gather", "cp_group")):
        job = _job(LLAMA_CP2, comm)
        ctx = Projector(job, load_profile(job.cluster)).context(pinned_layout(job))
        assert {c.group for c in layer_block(job.model, "dense", ctx).comms if c.name == "cp_comm"} == {group}


def test_the_all_gathers_time_grows_with_the_share_of_k_and_v_each_rank_receives() -> None:
    # Llama 3.1 8B on 8 H100 at sequence 32,768: each rank receives (CP - 1) / CP of the gathered K and V,
    # 1/2 at CP 2 and 7/8 at CP 8 (the same 8.39 MB x CP per gathered tensor); timed on a pair, as it was,
    # the all-gather cost the same at every CP (0.58 ms per layer and microbatch)
    per_layer = {}
    for cp in (2, 8):
        job = job_from_mapping({"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 32768,
                                "global_batch_size": 8, "context_parallel": {"comm_type": "all_gather"},
                                "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": cp, "ep": 1, "etp": 1, "mbs": 1,
                                             "sp": False, "recompute": "selective", "sharding": "dist_opt"}}, "j")
        p = Projector(job, load_profile(job.cluster)).project(pinned_layout(job), "auto")
        per_layer[cp] = p.breakdown["cp_comm"] / p.num_microbatches / job.model.num_layers
    assert per_layer[8] / per_layer[2] >= (7 / 8) / (1 / 2)


def test_a2a_and_all_gather_keep_a_second_copy_of_the_attention_output() -> None:
    for comm, copies in (("p2p", 0), ("a2a", 1), ("all_gather", 1)):
        job = _job(LLAMA_CP2, comm)
        act = MemoryModel(job).act_context(pinned_layout(job))
        saved = [s for s in layer_inventory(job.model, "dense", act) if s.name == "core_attention.cp_output"]
        assert [s.elements * 2 for s in saved] == [Q_BYTES] * copies


def test_all_gather_backward_holds_the_full_k_v_their_gradients_and_each_steps() -> None:
    sizes = {}
    for comm in ("p2p", "a2a", "all_gather"):
        job = _job(LLAMA_CP2, comm)
        sizes[comm] = cp_gather_bytes(job.model, MemoryModel(job).act_context(pinned_layout(job)))
    # in units of the rank's K (= its V): the zeroed full dK, dV (2 x 2), the re-gathered K, V (2 x 2), the two
    # steps' dK, dV over 5 of the 4 half-chunks (2 x 2 x 5/4) and the reordered copy of dK (2): 15
    assert sizes == {"p2p": 0, "a2a": 0, "all_gather": 15 * KV_BYTES}


def test_the_projection_charges_the_exchange_and_names_it(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    seen = {}
    for comm in ("p2p", "a2a", "all_gather"):
        code, out, _ = run_cli("project", write_job({**LLAMA_TP2_CP2, "context_parallel": {"comm_type": comm}}),
                               "--format", "json")
        doc = json.loads(out)
        assert code == 0
        assert any(a.startswith(f"context parallel: {'ring attention (p2p' if comm == 'p2p' else comm}")
                   for a in doc["assumptions"])
        seen[comm] = doc["breakdown"]["cp_comm"]
    # the ring hides its exchange behind 8192-token attention; the other two are not overlapped
    assert seen["p2p"] < seen["a2a"] and seen["p2p"] < seen["all_gather"]


@pytest.mark.parametrize(("job", "comm", "rule"), [
    (MISTRAL_CP2, "p2p", "cp-window-needs-a2a-or-all-gather"),  # sliding window 4096
    (GPT_OSS_CP2, "p2p", "cp-window-needs-a2a-or-all-gather"),  # every other layer a 128-token window
    (GPT_OSS_CP2, "all_gather", "cp-sinks-need-a2a"),  # learnable sink logits
    ({**LLAMA_CP2, "model": "deepseek-v2-lite", "parallel": {**LLAMA_CP2["parallel"], "ep": 8, "etp": 1}}, "a2a",
     "cp-mla-needs-p2p"),
    ({**LLAMA_CP2, "gpus": 64, "parallel": {**LLAMA_CP2["parallel"], "tp": 8, "sp": True}}, "a2a",
     "cp-a2a-heads-divisible"),  # 8 groups / TP 8 = 1 per rank, not divisible by CP 2
])
def test_transformer_engine_refusals_are_rules(run_cli, write_job, job: dict[str, Any], comm: str,  # type: ignore[no-untyped-def]
                                               rule: str) -> None:
    code, doc = _fit(run_cli, write_job, {**job, "context_parallel": {"comm_type": comm}})
    assert code == 1 and rule in doc["violated_rules"]


@pytest.mark.parametrize(("job", "comm"), [(MISTRAL_CP2, "a2a"), (MISTRAL_CP2, "all_gather"), (GPT_OSS_CP2, "a2a"),
                                           (LLAMA_TP2_CP2, "p2p"), (LLAMA_TP2_CP2, "a2a"),
                                           (LLAMA_TP2_CP2, "all_gather")])
def test_the_types_transformer_engine_runs_are_legal(run_cli, write_job, job: dict[str, Any],  # type: ignore[no-untyped-def]
                                                     comm: str) -> None:
    code, doc = _fit(run_cli, write_job, {**job, "context_parallel": {"comm_type": comm}})
    assert code == 0, doc["violated_rules"]


@pytest.mark.parametrize(("extra", "why"), [
    ({"framework": "torchtitan"}, "context_parallel.comm_type: a2a is Megatron-Core's --cp-comm-type"),
    ({"stack": "megatron-lm@core_v0.9.0"}, "needs Megatron-LM core_v0.10.0 or later"),
    ({"stack": "megatron-lm@2022.05"}, "needs Megatron-LM core_v0.10.0 or later"),  # the 2022 papers' Megatron-LM
    ({"stack": "megatron-deepspeed"}, "which megatron-deepspeed@2022.03 does not run"),
])
def test_stacks_without_the_option_refuse_it_on_load(run_cli, write_job, extra: dict[str, Any], why: str) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**LLAMA_TP2_CP2, **extra, "context_parallel": {"comm_type": "a2a"}})
    code, out, err = run_cli("fit", path)
    assert (code, out) == (2, "") and why in err


def test_a_per_layer_list_needs_core_0_17(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.15.0 transformer_layer.py line 294 indexes the list by the 1-based layer number (IndexError at the
    # last layer) until d3a8584533 (#3389), first in core_v0.17.0
    job = {**LLAMA_TP2_CP2, "context_parallel": {"comm_type": "a2a", "per_layer_list": True}}
    code, out, err = run_cli("fit", write_job({**job, "stack": "megatron-lm@core_v0.16.1"}))
    assert (code, out) == (2, "") and "context_parallel.per_layer_list" in err and "IndexError" in err
    code, out, err = run_cli("export", write_job({**job, "stack": "megatron-lm@core_v0.17.0"}), "--to", "megatron")
    assert code == 0, err
    words = out.split()
    at = words.index("--cp-comm-type")
    assert words[at + 1:at + 33] == ["a2a"] * 32 and words[at + 33] != "a2a"  # one per layer of the 32


MODEL = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
         "--num-query-groups 8 --vocab-size 128256 --position-embedding-type rope --max-position-embeddings 131072 "
         "--untie-embeddings-and-output-weights --normalization RMSNorm --swiglu --disable-bias-linear --bf16 "
         "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 64 --seq-length 16384 "
         "--context-parallel-size 2")


def _launch(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "train.sh"
    path.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} {extra}\n")
    return str(path)


@pytest.mark.parametrize(("flag", "comm"), [("", None), ("--cp-comm-type p2p", None), ("--cp-comm-type a2a", "a2a"),
                                            ("--cp-comm-type all_gather", "all_gather")])
def test_import_reads_the_type(run_cli, tmp_path: Path, flag: str, comm: str | None) -> None:  # type: ignore[no-untyped-def]
    out_file = tmp_path / "job.yaml"
    code, _, err = run_cli("import", "--from", "megatron", _launch(tmp_path, flag), "--hardware", "h100-80gb",
                           "--out", str(out_file))
    assert code == 0, err
    job = yaml.safe_load(out_file.read_text())
    assert job.get("context_parallel", {}).get("comm_type") == comm


def test_import_reads_a_per_layer_list_and_nothing_at_cp_1(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out_file = tmp_path / "job.yaml"
    script = _launch(tmp_path, "--cp-comm-type " + " ".join(["a2a"] * 32))
    code, _, err = run_cli("import", "--from", "megatron", script, "--hardware", "h100-80gb", "--out", str(out_file))
    assert code == 0, err
    assert yaml.safe_load(out_file.read_text())["context_parallel"] == {"comm_type": "a2a", "per_layer_list": True}
    # at CP 1 Megatron-Core never hands the type to Transformer Engine: even a spelling TE refuses runs
    path = tmp_path / "cp1.sh"
    path.write_text(Path(_launch(tmp_path, "--cp-comm-type allgather")).read_text().replace(
        "--context-parallel-size 2", "--context-parallel-size 1"))
    code, _, err = run_cli("import", "--from", "megatron", str(path), "--hardware", "h100-80gb", "--out",
                           str(tmp_path / "cp1.yaml"))
    assert code == 0, err
    assert "has no effect at CP 1" in err and "context_parallel" not in (tmp_path / "cp1.yaml").read_text()


@pytest.mark.parametrize(("flag", "why"), [
    ("allgather", "allgather is refused by Transformer Engine ('Unsupported communication type'): its name is "
                  "all_gather"),
    ("a2a+p2p", "a2a+p2p (hierarchical context parallelism) is not modelled"),
    (" ".join(["a2a"] * 16 + ["p2p"] * 16), "mixes a2a, p2p across layers, which primus does not model"),
    ("a2a a2a", "lists 2 types for 32 layers"),
])
def test_import_refuses_what_it_cannot_model(run_cli, tmp_path: Path, flag: str, why: str) -> None:  # type: ignore[no-untyped-def]
    path = _launch(tmp_path, f"--cp-comm-type {flag}")
    code, out, err = run_cli("memory", "--from", "megatron", path, "--hardware", "h100-80gb", "--format", "json")
    assert (code, out) == (2, "")
    assert err.startswith(f"primus: {path}: --cp-comm-type: ") and why in err and err.count("\n") == 1


def test_export_writes_the_type_and_import_reads_it_back(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**MISTRAL_CP2, "context_parallel": {"comm_type": "a2a"}})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 0, err
    words = out.split()
    assert words[words.index("--cp-comm-type") + 1] == "a2a"
    script = tmp_path / "exported.sh"
    script.write_text(out)
    code, out, err = run_cli("memory", "--from", "megatron", str(script), "--format", "json")
    assert code == 0, err
    code, p2p_out, _ = run_cli("export", write_job({**LLAMA_TP2_CP2}), "--to", "megatron")
    assert code == 0 and "--cp-comm-type" not in p2p_out  # Megatron's default is not written
