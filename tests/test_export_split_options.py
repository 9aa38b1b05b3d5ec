"""The export writes the job's own pipeline options: a split Megatron-LM refuses is not silently made
legal by adding --account-for-embedding/loss-in-pipeline-split (hostile review 50, M2). AMD Primus's
MI355X llama3.1_405B-BF16-pretrain.yaml splits Llama 3.1 405B's 126 layers over PP 8, which Megatron-LM
refuses ('Number of layers should be divisible by the pipeline-model-parallel size', core_v0.18.0
arguments.py lines 976-977); with the embedding and the loss counted, 128 layers split 16 per stage."""

from __future__ import annotations

from pathlib import Path

JOB = {"model": "llama3.1-405b", "hardware": "mi355x", "nodes": 8, "seq_len": 8192, "global_batch_size": 256,
       "precision": "bf16",
       "parallel": {"tp": 8, "pp": 8, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 1, "mbs": 1, "sp": True,
                    "recompute": "none", "sharding": "dist_opt"}}
LAUNCH = Path(__file__).parent / "data" / "launch"


def test_an_export_of_a_split_megatron_refuses_is_refused_with_the_fix_named(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("export", write_job(JOB), "--to", "megatron")
    assert code == 1 and out == ""
    assert "not exported: `primus fit` refuses this job" in err and "pipeline-split" in err
    assert "the job does not set them" in err and "--fix N" in err


def test_the_split_options_are_written_when_fix_asks_for_them(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # fit's suggestion 2 for this job sets both accounting options (suggestion 1 is a layout string)
    code, out, err = run_cli("export", write_job(JOB), "--to", "megatron", "--fix", "2")
    assert code == 0 and "--account-for-embedding-in-pipeline-split" in out
    assert "suggestion 2 changes pipeline.account_for_embedding_in_pipeline_split=true" in err


def test_the_job_with_the_options_set_is_exported_as_written(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    job = {**JOB, "pipeline": {"account_for_embedding_in_pipeline_split": True,
                               "account_for_loss_in_pipeline_split": True}}
    code, out, _ = run_cli("export", write_job(job), "--to", "megatron")
    assert code == 0 and "--account-for-loss-in-pipeline-split" in out


def test_an_import_of_a_split_megatron_refuses_says_so(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py --num-layers 126 --hidden-size 16384 "
                      "--ffn-hidden-size 53248 --num-attention-heads 128 --group-query-attention "
                      "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 131072 "
                      "--position-embedding-type rope --swiglu --normalization RMSNorm "
                      "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 "
                      "--micro-batch-size 1 --global-batch-size 256 --bf16 --tensor-model-parallel-size 8 "
                      "--pipeline-model-parallel-size 8 --sequence-parallel --use-distributed-optimizer\n")
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--hardware", "mi355x")
    assert code == 0 and "pp: 8" in out
    assert "126 layers do not divide over --pipeline-model-parallel-size 8" in err
