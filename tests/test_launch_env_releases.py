"""CUDA_DEVICE_MAX_CONNECTIONS as each Megatron-LM release's validate_args asks for it, and `export --stack`
honoured for a job given on the command line (a hostile review of the export path, items 1 and 3).

- core_v0.8.0 to core_v0.11.x raise unless the variable is 1 whenever async tensor-parallel all-reduce (on by
  default) or sequence parallelism is on: every layout, every device (core_v0.11.0 arguments.py lines 656-664);
- core_v0.12.x assert it for `tp > 1 or cp > 1 and arch < 10`: Python's precedence exempts Blackwell for CP
  only (core_v0.12.0 line 768);
- core_v0.13.0 and later: `(tp > 1 or cp > 1) and arch < 10`; core_v0.14.0 adds the MoE all-to-all overlap's
  exemption."""

from __future__ import annotations

from typing import Any

import pytest

from primus.launch.launch_env import megatron_env

ON = "export CUDA_DEVICE_MAX_CONNECTIONS=1"


@pytest.mark.parametrize(("tp", "cp", "major", "release", "needed"), [
    (1, 1, 9, "core_v0.11.0", True),  # TP 1 on Hopper: the async all-reduce asserts it
    (1, 1, 10, "core_v0.8.0", True),  # and on Blackwell
    (2, 1, 10, "core_v0.12.0", True),  # the missing parentheses: TP on Blackwell still asserts
    (1, 2, 10, "core_v0.12.3", False),  # CP on Blackwell does not
    (2, 1, 10, "core_v0.13.0", False),
    (2, 1, 9, "core_v0.13.0", True),
    (1, 1, 9, "core_v0.12.0", False),
    (2, 1, 9, None, True),  # the newest rule when no release is named
])
def test_the_requirement_follows_the_release(tp: int, cp: int, major: int, release: str | None,
                                             needed: bool) -> None:
    settings = megatron_env(tp, cp, False, False, major, release)
    assert bool(settings and settings[0].value == "1") is needed


def test_the_moe_overlap_exemption_starts_at_core_v0_14_0() -> None:
    assert megatron_env(2, 1, False, True, 9, "core_v0.14.0") == ()
    assert megatron_env(2, 1, False, True, 9, "core_v0.13.1")[0].value == "1"


JOB: dict[str, Any] = {"model": "gpt-1.7b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 2048,
                       "global_batch_size": 64, "precision": "bf16",
                       "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "none",
                                    "sharding": "dist_opt"}}


def test_an_export_for_core_v0_11_0_sets_it_at_tp_1(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("export", write_job({**JOB, "stack": "megatron-lm@core_v0.11.0"}), "--to", "megatron")
    assert code == 0, err
    assert ON in out.splitlines()
    code, out, err = run_cli("export", write_job({**JOB, "stack": "megatron-lm@core_v0.13.0"}), "--to", "megatron")
    assert code == 0 and ON not in out.splitlines()


AXES = ["--model", "llama3.1-8b", "--hardware", "h100-80gb", "--nodes", "1", "--seq-len", "8192",
        "--global-batch-size", "64", "--tp", "2", "--pp", "2", "--vp", "2", "--cp", "1", "--mbs", "1", "--sp",
        "--recompute", "selective", "--sharding", "dist_opt", "--to", "megatron"]


def test_export_stack_applies_to_a_job_given_by_axes(run_cli) -> None:  # type: ignore[no-untyped-def]
    # it was ignored: the line said core_v0.18.0 and wrote --num-virtual-stages-per-pipeline-rank, which
    # core_v0.10.0 stops at ('unrecognized arguments'); core_v0.10.0 interleaves by layers per virtual stage
    code, out, err = run_cli("export", *AXES, "--stack", "megatron-lm@core_v0.10.0")
    assert code == 0, err
    assert "Megatron-LM core_v0.10.0 argument names" in out
    words = " ".join(line for line in out.splitlines() if not line.startswith("#")).split()
    assert "--num-virtual-stages-per-pipeline-rank" not in words
    assert words[words.index("--num-layers-per-virtual-pipeline-stage") + 1] == "8"  # 32 layers / (PP 2 x VP 2)
