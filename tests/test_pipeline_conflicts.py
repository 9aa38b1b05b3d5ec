"""Pipeline split options Megatron refuses together, and layouts its parser refuses, are bad input in
every command (review 45: a layout with the embedding accounting answered DOES NOT FIT, a Megatron line
with both was imported, nested groups were proved and exported verbatim), and a fix names exactly the
options it changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import as_json

# Llama 3.1 70B (80 decoder layers) on 32 MI300X at PP 4 x VP 2, review 45's lay4.yaml
JOB: dict[str, Any] = {"model": "llama3.1-70b", "hardware": "mi300x", "nodes": 4, "seq_len": 8192,
                       "global_batch_size": 128,
                       "parallel": {"tp": 8, "pp": 4, "vp": 2, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                                    "sharding": "dist_opt"}}
LAYOUT = "Et*10|(t*10|)*6t*10L"


def test_a_layout_with_the_embedding_accounting_is_bad_input_naming_the_layout(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NVIDIA/Megatron-LM 000c4ac transformer_config.py lines 1058-1072: any_conflict raises ValueError
    # "pipeline_model_parallel_layout cannot be set with other pipeline layout arguments"
    path = write_job({**JOB, "pipeline": {"layout": LAYOUT, "account_for_embedding_in_pipeline_split": True}})
    code, out, err = run_cli("fit", path, "--format", "json")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "pipeline.layout" in err and "account_for_embedding_in_pipeline_split" in err


def test_a_layout_with_a_last_stage_size_is_bad_input_in_enumerate(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # the same any_conflict: num_layers_in_last_pipeline_stage beside the layout (000c4ac line 1060)
    path = write_job({**JOB, "pipeline": {"layout": LAYOUT, "decoder_last_pipeline_num_layers": 10}})
    code, out, err = run_cli("enumerate", path, "--count")
    assert (code, out) == (2, "") and "pipeline.layout" in err and "decoder_last_pipeline_num_layers" in err


def test_first_stage_size_with_the_loss_accounting_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # 000c4ac transformer_config.py lines 1042-1052: first/last stage sizes "cannot be set at the same time
    # with account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split"
    path = write_job({**JOB, "pipeline": {"decoder_first_pipeline_num_layers": 10,
                                          "account_for_loss_in_pipeline_split": True}})
    code, out, err = run_cli("fit", path)
    assert (code, out) == (2, "") and "pipeline.account_for_loss_in_pipeline_split" in err


def test_nested_layout_groups_are_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Megatron-Core parse_str_to_list (000c4ac pipeline_parallel_layer_layout.py lines 284-305) unrolls one
    # level of '(...)*n' and asserts "Invalid layer character" on the '(' a nested group leaves
    path = write_job({**JOB, "parallel": {**JOB["parallel"], "recompute": "full"},
                      "pipeline": {"layout": "Et*10|((t*10|)*3)*2t*10L"}})
    code, out, err = run_cli("fit", path)
    assert (code, out) == (2, "") and "pipeline.layout" in err and "inside another" in err


def test_a_megatron_line_with_a_layout_and_the_loss_accounting_is_refused_on_import(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the any_conflict above, named as the launch line spells it
    line = ("torchrun pretrain_gpt.py --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 "
            "--num-attention-heads 64 --group-query-attention --num-query-groups 8 --seq-length 8192 "
            "--max-position-embeddings 131072 --position-embedding-type rope --normalization RMSNorm --swiglu "
            "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 "
            "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
            f"--pipeline-model-parallel-layout '{LAYOUT}' --account-for-loss-in-pipeline-split "
            "--micro-batch-size 1 --global-batch-size 128 --bf16\n")
    script = tmp_path / "train.sh"
    script.write_text(line)
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--hardware", "mi300x", "--nodes", "4")
    assert (code, out) == (2, "")
    assert "--pipeline-model-parallel-layout" in err and "--account-for-loss-in-pipeline-split" in err


def test_per_stage_virtual_size_with_a_first_stage_size_is_refused_on_import(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 000c4ac arguments.py lines 558-560: "please use --num-virtual-stages-per-pipeline-rank to specify
    # virtual pipeline parallel degree when enable uneven pipeline parallelism" (review 45's train.sh)
    script = tmp_path / "train.sh"
    script.write_text(_LLAMA_LINE.format(vp="--num-layers-per-virtual-pipeline-stage 5"))
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--hardware", "mi300x")
    assert (code, out) == (2, "") and "--num-layers-per-virtual-pipeline-stage" in err


_LLAMA_LINE = ("torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py --num-layers 80 --hidden-size 8192 "
               "--ffn-hidden-size 28672 --num-attention-heads 64 --group-query-attention --num-query-groups 8 "
               "--seq-length 8192 --max-position-embeddings 131072 --position-embedding-type rope "
               "--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
               "--vocab-size 128256 --attention-dropout 0.0 --hidden-dropout 0.0 --tensor-model-parallel-size 8 "
               "--pipeline-model-parallel-size 4 {vp} --decoder-first-pipeline-num-layers 15 --sequence-parallel "
               "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 128 --bf16 "
               "--recompute-activations\n")


@pytest.fixture()
def first_15(run_cli, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    """Review 45's train.sh with the VP Megatron takes beside uneven stages: first stage 15 of 80 layers at
    PP 4 x VP 4, which no split allows (65 layers left over 3 stages)."""
    script = tmp_path / "train.sh"
    script.write_text(_LLAMA_LINE.format(vp="--num-virtual-stages-per-pipeline-rank 4"))
    code, out, _ = run_cli("import", "--from", "megatron", str(script), "--hardware", "mi300x")
    assert code == 0
    job = tmp_path / "job.yaml"
    job.write_text(out)
    return str(job)


def test_a_last_stage_fix_names_the_first_stage_size_it_removes(run_cli, first_15: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", first_15, "--format", "json")
    fix = next(a for a in as_json(out)["alternatives"] if "pipeline.decoder_last_pipeline_num_layers" in a["options"])
    assert code == 1
    assert fix["options"] == {"pipeline.decoder_first_pipeline_num_layers": None,
                              "pipeline.decoder_last_pipeline_num_layers": 20}
    assert fix["changed"] == list(fix["options"])


def test_no_fix_names_an_option_it_leaves_as_the_job_has_it(run_cli, first_15: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", first_15, "--format", "json")
    assert code == 1
    for fix in as_json(out)["alternatives"]:
        assert "pipeline.decoder_first_pipeline_num_layers" not in fix["options"] \
            or fix["options"]["pipeline.decoder_first_pipeline_num_layers"] != 15


def test_export_of_the_last_stage_fix_says_and_writes_the_removal(run_cli, first_15: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("export", first_15, "--to", "megatron", "--fix", "1")
    assert code == 0
    assert "pipeline.decoder_first_pipeline_num_layers unset" in err
    assert "--decoder-last-pipeline-num-layers 20" in out and "--decoder-first-pipeline-num-layers" not in out


def test_an_exported_layout_carries_no_whitespace(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Megatron-Core parse_str_to_list removes commas only and asserts on a space (000c4ac
    # pipeline_parallel_layer_layout.py lines 275 and 302)
    path = write_job({**JOB, "parallel": {**JOB["parallel"], "recompute": "full"},
                      "pipeline": {"layout": "Et*10 | (t*10|)*6 t*10L"}})
    code, out, _ = run_cli("export", path, "--to", "megatron")
    assert code == 0 and f"--pipeline-model-parallel-layout '{LAYOUT}'" in out


def test_a_changed_option_is_spelled_as_a_job_file_writes_it_by_fit_export_and_tune() -> None:
    # review 46, L4: fit printed `...split=True` where tune printed `=true`; one spelling (option_text)
    from primus.solver.suggest import option_text
    from primus.tuning.variants import changes_text

    assert option_text("pipeline.account_for_loss_in_pipeline_split", True) == \
        "pipeline.account_for_loss_in_pipeline_split=true"
    assert option_text("pipeline.decoder_first_pipeline_num_layers", None) == \
        "pipeline.decoder_first_pipeline_num_layers unset"
    assert changes_text({"pipeline.account_for_embedding_in_pipeline_split": False, "recompute": "full"}) == \
        "pipeline.account_for_embedding_in_pipeline_split=false, recompute=full"
