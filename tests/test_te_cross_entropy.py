"""Transformer Engine's fused cross-entropy (Megatron-Core `cross_entropy_fusion_impl: te`) works in place:
its forward writes the loss's gradient over the bf16 logits and its backward scales them in place
(NVIDIA/TransformerEngine v2.9 70f5366 transformer_engine/pytorch/triton/cross_entropy.py lines 187 and 263),
so the loss allocates no second logit-sized tensor; Megatron-Core's native kernel returns a new one."""

from __future__ import annotations

import json
from pathlib import Path

from primus.job import job_from_mapping
from primus.memory.activations import loss_working_bytes
from primus.memory.evaluate import MemoryModel, pinned_layout

# Llama 3.1 8B, one H100 node, TP1 PP1 MBS 1 at 8,192 tokens: one bf16 logit tensor over the padded
# 128,256-row vocabulary is 8,192 x 128,256 x 2 = 2,101,346,304 B
JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64,
       "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 1, "sp": False,
                    "recompute": "full", "sharding": "dist_opt"}}
LOGITS = 8192 * 128_256 * 2


def _ctx(impl: str, tp: int = 1):  # type: ignore[no-untyped-def]
    parallel = {**JOB["parallel"], "tp": tp, "dp": 8 // tp}  # type: ignore[dict-item]
    job = job_from_mapping({**JOB, "parallel": parallel,
                            "kernels": {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": impl}}, "t")
    mm = MemoryModel(job)
    return mm.act_context(pinned_layout(job)), job.model.padded_vocab_size(tp)


def test_the_native_fused_loss_allocates_one_more_logit_tensor() -> None:
    ctx, vocab = _ctx("native")
    assert loss_working_bytes(ctx, vocab) == LOGITS == 2_101_346_304


def test_transformer_engines_loss_allocates_only_its_per_token_statistics() -> None:
    # the fp32 loss and three fp32 softmax statistics per token: 8,192 x 4 x 4 = 131,072 B
    ctx, vocab = _ctx("te")
    assert loss_working_bytes(ctx, vocab) == 8192 * 4 * 4 == 131_072


def test_under_tp_transformer_engine_all_gathers_every_ranks_statistics() -> None:
    # TP 2: its own three, the gathered 3 x 2, and the loss: 8,192 x 10 x 4 B
    ctx, vocab = _ctx("te", tp=2)
    assert loss_working_bytes(ctx, vocab) == 8192 * 10 * 4


def test_a_job_peak_moves_by_the_logit_tensor_less_the_statistics_when_it_is_the_largest_transient() -> None:
    peaks = {}
    for impl in ("native", "te"):
        job = job_from_mapping({**JOB, "kernels": {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": impl}},
                               "t")
        report = MemoryModel(job).evaluate(pinned_layout(job))
        peaks[impl] = report.stages[0].terms["activations.backward_working_set"]
    assert peaks["native"] == LOGITS and peaks["te"] < peaks["native"]


def test_megatron_bridge_and_nemo_from_v2_3_run_transformer_engines_loss() -> None:
    impl = {stack: job_from_mapping({**JOB, "stack": stack}, "t").spec.kernels.cross_entropy_fusion_impl
            for stack in ("megatron-bridge@25.09", "megatron-bridge@26.06", "nemo@24.07", "nemo@25.04", "megatron-lm")}
    assert impl == {"megatron-bridge@25.09": "te", "megatron-bridge@26.06": "te", "nemo@24.07": "native",
                    "nemo@25.04": "te", "megatron-lm": "native"}


def test_a_fused_loss_the_job_asks_for_runs_its_stacks_kernel_unless_it_names_one() -> None:
    fused = {"cross_entropy_fusion": True}
    assert job_from_mapping({**JOB, "stack": "megatron-bridge", "kernels": fused},
                            "t").spec.kernels.cross_entropy_fusion_impl == "te"
    assert job_from_mapping({**JOB, "stack": "megatron-bridge",
                             "kernels": {**fused, "cross_entropy_fusion_impl": "native"}},
                            "t").spec.kernels.cross_entropy_fusion_impl == "native"


# A Megatron-LM launch line for Llama 3.1 8B on one node, written here; the loss options are the test's
LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
          "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 8192 "
          "--max-position-embeddings 8192 --vocab-size 128256 --swiglu --normalization RMSNorm "
          "--position-embedding-type rope --untie-embeddings-and-output-weights --disable-bias-linear "
          "--micro-batch-size 1 --global-batch-size 64 --bf16 ")


def _launch(tmp_path: Path, loss_options: str) -> Path:
    script = tmp_path / "train.sh"
    script.write_text(LAUNCH + loss_options + "\n")
    return script


def test_a_megatron_launch_line_with_the_te_loss_imports_it(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = _launch(tmp_path, "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te")
    code, out, _ = run_cli("import", "--from", "megatron", str(script), "--hardware", "h100-80gb")
    assert code == 0 and "cross_entropy_fusion_impl: te" in out
    script.write_text(script.read_text().replace("impl te", "impl triton"))
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--hardware", "h100-80gb")
    assert code == 2 and out == "" and err.count("\n") == 1 and "must be native or te" in err


def test_megatron_lm_export_writes_the_native_loss_it_accepts_and_checks_that_job(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Megatron-LM core_v0.18.2 arguments.py lines 1528-1532 refuse te with --cross-entropy-loss-fusion (#5115)
    path = write_job({**JOB, "stack": "megatron-lm@core_v0.18.2",
                      "kernels": {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "te"}})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 0 and "--cross-entropy-loss-fusion" in out and "--cross-entropy-fusion-impl" not in out
    assert "native fused kernel" in err and "core_v0.18.2" in err and "1528-1532" in err


def test_a_megatron_lm_release_before_the_refusal_keeps_transformer_engines_loss(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # #5115 (168cb15d70) is first tagged core_v0.18.2: core_v0.18.0, the Megatron Core of NeMo 26.06's
    # Megatron-Bridge 0.5.0, has no such assert and runs the user's loss
    path = write_job({**JOB, "stack": "megatron-bridge@26.06"})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 0 and "--cross-entropy-fusion-impl te" in out and "native fused kernel" not in err


def test_primus_export_keeps_transformer_engines_loss(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**JOB, "stack": "megatron-bridge@26.06"})
    code, out, _ = run_cli("export", path, "--to", "primus")
    assert code == 0 and "cross_entropy_fusion_impl: te" in out


def test_the_assumption_list_names_the_in_place_loss(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("memory", write_job({**JOB, "stack": "megatron-bridge@26.06"}), "--format", "json")
    assert code == 0
    assert any("Transformer Engine, in place" in a for a in json.loads(out)["assumptions"])


def test_an_export_refused_only_as_megatron_lm_runs_it_says_so(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Llama 3 8B at MBS 2, sequence 1,856, DP 8: 73.21 GiB with Transformer Engine's loss fits the H100's
    # 73.50 GiB; Megatron-LM's native loss adds a bf16 logit tensor (73.87 GiB) and does not
    job = {"model": "llama3-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 1856, "global_batch_size": 64,
           "stack": "megatron-lm@core_v0.18.2",
           "kernels": {"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "te"},
           "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 2, "sp": False,
                        "recompute": "none", "sharding": "dist_opt"}}
    path = write_job(job)
    assert run_cli("fit", path)[0] == 0
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert code == 1 and out == ""
    assert "not as the file is written" in err and "native fused kernel" in err


def test_the_te_loss_without_loss_fusion_is_noted_not_dropped_silently(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = _launch(tmp_path, "--cross-entropy-fusion-impl te")
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--hardware", "h100-80gb")
    assert code == 0 and "cross_entropy_fusion: false" in out
    assert "te selects nothing without --cross-entropy-loss-fusion" in err
