"""`export --to megatron` writes one Megatron-LM release's arguments and says which (review 46, M3).

The release is the job's own on megatron-lm, the one a Primus, Megatron-Bridge or NeMo release pins, else the
newest described; an argument that release does not have, and the legacy grouped GEMM on a release without
GroupedMLP, are bad input (one line naming file and field, exit 2), not a line the release stops at. Facts
from NVIDIA/Megatron-LM tags (megatron/training/arguments.py) unless said otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from primus.launch import import_launch
from primus.stacks.core import resolve_stack
from primus.stacks.megatron_release import has_option, megatron_target

MIXTRAL: dict[str, Any] = {
    "model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096, "global_batch_size": 256,
    "precision": "bf16",
    "parallel": {"tp": 2, "pp": 2, "vp": 2, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": True,
                 "recompute": "selective", "sharding": "dist_opt"}}
LEGACY: dict[str, Any] = {**MIXTRAL, "moe": {"grouped_gemm": "legacy"}}


def _header(out: str) -> tuple[str, dict[str, Any]]:
    names = next(line for line in out.splitlines() if line.startswith("# Option names:"))
    job = json.loads(next(line for line in out.splitlines() if "primus-job:" in line).split("primus-job:", 1)[1])
    return names, job


def test_the_default_stack_writes_core_v0_18_0_arguments(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # megatron-lm@2026.06 is Megatron Core 0.18.0: tag core_v0.18.0 of 2026-06-22 (stacks/megatron-lm.yaml)
    code, out, _ = run_cli("export", write_job(MIXTRAL), "--to", "megatron")
    names, job = _header(out)
    assert code == 0 and "Megatron-LM core_v0.18.0 argument names" in names and job["stack"] == "megatron-lm@2026.06"


def test_a_primus_job_is_written_for_the_megatron_lm_primus_pins(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # AMD-AGI/Primus fd1eeab third_party/Megatron-LM is NVIDIA/Megatron-LM d3528a2 (2026-03-06), first tagged
    # core_v0.17.0: the header names that release, not megatron-lm's newest
    code, out, err = run_cli("export", write_job({**MIXTRAL, "stack": "primus"}), "--to", "megatron")
    names, job = _header(out)
    assert code == 0 and "core_v0.17.0 argument names" in names and job["stack"] == "megatron-lm@core_v0.17.0"
    assert "the Megatron-LM primus@26.1 runs" in err


def test_a_megatron_bridge_job_is_written_for_its_megatron_core(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NVIDIA-NeMo/Megatron-Bridge e49e451 docs/releases/software-versions.md line 100: 25.09 runs Megatron Core 0.14.0
    code, out, _ = run_cli("export", write_job({**MIXTRAL, "stack": "megatron-bridge@25.09"}), "--to", "megatron")
    assert code == 0 and "Megatron-LM core_v0.14.0 argument names" in _header(out)[0]


def test_a_primus_job_with_the_legacy_grouped_gemm_is_not_exported_to_megatron(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # d3528a2 holds 2caa681a1d "[Cleanup] Remove the deprecated GroupedMLP (#3410)": its argparse refuses
    # --moe-use-legacy-grouped-gemm ("unrecognized arguments"); AMD Primus runs its own copy of GroupedMLP
    path = write_job({**LEGACY, "stack": "primus"})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert f"{path}: moe.grouped_gemm: legacy" in err and "#3410" in err and "export --to primus" in err


def test_a_primus_job_with_the_legacy_grouped_gemm_exports_to_primus(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # AMD-AGI/Primus fd1eeab primus/backends/megatron/core/transformer/moe/deprecated_2caa681a1/experts.py
    code, out, _ = run_cli("export", write_job({**LEGACY, "stack": "primus"}), "--to", "primus")
    assert code == 0 and "moe_use_legacy_grouped_gemm: true" in out


def test_the_legacy_grouped_gemm_on_megatron_lm_without_grouped_mlp_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.17.0 megatron/core/transformer/transformer_config.py has no moe_use_legacy_grouped_gemm (core_v0.16.1
    # line 655 had it), so neither `fit` nor `export` takes the job on megatron-lm@2026.04
    path = write_job({**LEGACY, "stack": "megatron-lm@2026.04"})
    code, out, err = run_cli("fit", path)
    assert (code, out, err.count("\n")) == (2, "", 1) and f"{path}: moe.grouped_gemm:" in err and "core_v0.17.0" in err


def test_a_release_with_grouped_mlp_writes_the_legacy_flag_and_keeps_its_name(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.16.1 arguments.py line 1621 generates --moe-use-legacy-grouped-gemm from TransformerConfig; the
    # header keeps the release the job named, so import writes for it again
    code, out, _ = run_cli("export", write_job({**LEGACY, "stack": "megatron-lm@core_v0.16.1"}), "--to", "megatron")
    names, job = _header(out)
    assert code == 0 and "--moe-use-legacy-grouped-gemm" in out.split()
    assert "core_v0.16.1 argument names" in names and job["stack"] == "megatron-lm@core_v0.16.1"


def test_an_imported_legacy_line_is_dated_to_a_release_that_has_the_flag(tmp_path: Path) -> None:
    # core_v0.11.0 arguments.py line 2212 adds the flag; #3410 removed it in core_v0.17.0: a line using it ran
    # on core_v0.11.0 to core_v0.16.1, not on the default stack's core_v0.18.0
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nnodes 4 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
                    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
                    "--num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --moe-use-legacy-grouped-gemm "
                    "--expert-model-parallel-size 8 --seq-length 4096 --max-position-embeddings 32768 "
                    "--micro-batch-size 1 --global-batch-size 256 --bf16 --use-distributed-optimizer "
                    "--vocab-size 32000 --position-embedding-type rope --normalization RMSNorm --swiglu "
                    "--untie-embeddings-and-output-weights --disable-bias-linear\n")
    config = import_launch("megatron", path, hardware="h100-80gb")
    assert config.job["stack"] == "megatron-lm@core_v0.16.1" and config.job["moe"]["grouped_gemm"] == "legacy"
    assert any("core_v0.16.1" in n and "#3410" in n for n in config.notes)


def test_an_argument_the_release_lacks_is_bad_input_naming_the_field(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Mistral 7B needs --window-size (sliding window 4096): core_v0.15.0 arguments.py line 1575 adds it;
    # core_v0.14.0, Megatron-Bridge 25.09's Megatron Core, does not have it (gpt-oss, which also needs
    # --softmax-type, is refused there before any argument: its TEGroupedMLP builds no expert biases)
    job = {"stack": "megatron-bridge@25.09", "model": "mistral-7b", "hardware": "b200", "gpus": 8,
           "seq_len": 4096, "global_batch_size": 64, "precision": "bf16",
           "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "full",
                        "sharding": "dist_opt"}}
    path = write_job(job)
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert (code, out, err.strip().splitlines()[-1].startswith(f"primus: {path}: model: needs --")) == (2, "", True)
    assert "core_v0.14.0" in err and "added in core_v0.15.0" in err


def test_interleaving_before_core_v0_11_0_is_written_in_layers_per_virtual_stage(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.10.0 arguments.py line 1685 has only --num-layers-per-virtual-pipeline-stage; core_v0.11.0 line 1777
    # adds --num-virtual-stages-per-pipeline-rank. Llama 3.1 8B: 32 layers over PP 2 x VP 2 = 8 per chunk
    job = {"stack": "megatron-lm@core_v0.10.0", "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1,
           "seq_len": 4096, "global_batch_size": 64, "precision": "bf16",
           "parallel": {"tp": 2, "pp": 2, "vp": 2, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                        "sharding": "dist_opt"}}
    code, out, _ = run_cli("export", write_job(job), "--to", "megatron")
    args = [" ".join(line.split()[:2]) for line in out.splitlines() if line.startswith("    --")]
    assert code == 0 and "--num-layers-per-virtual-pipeline-stage 8" in args
    assert not any(a.startswith("--num-virtual-stages-per-pipeline-rank") for a in args)


def test_a_megatron_lm_older_than_every_release_read_is_not_exported(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # megatron-lm@2022.05 is the 2022 papers' Megatron-LM; primus has read the arguments of core_v0.8.0 on
    path = write_job({**MIXTRAL, "stack": "megatron-lm@2022.05"})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert (code, out, err.count("\n")) == (2, "", 1) and f"{path}: stack:" in err and "core_v0.8.0" in err


def test_a_release_is_its_newest_tag_of_the_month_or_the_tag_named() -> None:
    # stacks/megatron-lm.yaml release_names: core_v0.17.0 of 2026-04-14, core_r0.14.0 = tag core_v0.14.0
    assert megatron_target(resolve_stack("megatron-lm@2026.04")).tag == "core_v0.17.0"
    assert megatron_target(resolve_stack("megatron-lm@core_r0.14")).tag == "core_v0.14.0"


def test_the_legacy_flag_is_in_core_v0_11_0_to_core_v0_16_1_only() -> None:
    # core_v0.10.0 has no --moe-use-legacy-grouped-gemm; core_v0.11.0 line 2212 adds it; core_v0.17.0 has none
    assert [has_option(t, "--moe-use-legacy-grouped-gemm") for t in
            ("core_v0.10.0", "core_v0.11.0", "core_v0.16.1", "core_v0.17.0")] == [False, True, True, False]


def test_a_value_the_releases_argparse_does_not_take_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # --fp8-recipe choices: core_v0.12.0 tensorwise, delayed, mxfp8; core_v0.13.0 adds blockwise (NeMo v2.3.0, the
    # nemo@25.04 stack, runs core_v0.12.0: stacks/nemo.yaml megatron_lm)
    job = {**MIXTRAL, "stack": "nemo@25.04", "precision": "fp8", "fp8_recipe": "blockwise"}
    path = write_job(job)
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert (code, out) == (2, "") and f"{path}: fp8_recipe: needs --fp8-recipe blockwise" in err
    assert "core_v0.12.0" in err and "core_v0.13.0" in err
