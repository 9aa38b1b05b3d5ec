"""A refused size says the limit it broke, and each limit is stated once (review 47, L2 and L5).

Counts (layers, widths, heads, positions) are bounded by `primus.specs.base.MAX_COUNT` = 10^9 in job,
model and hardware files and in Hugging Face configs alike; a job's nodes by `MAX_NODES` = 100,000 and its
GPUs by `MAX_GPUS` = 1,000,000, in the job file and on the command line alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_bad_input import one_line

LLAMA_3_1_8B = Path(__file__).parent / "data" / "hf" / "llama-Llama-3.1-8B" / "config.json"


@pytest.mark.parametrize(("key", "value"), [("num_hidden_layers", 10**12), ("max_position_embeddings", 10**15),
                                            ("num_hidden_layers", -1)])
def test_an_hf_count_out_of_range_states_the_range(run_cli, tmp_path: Path, key, value):
    data = json.loads(LLAMA_3_1_8B.read_text(encoding="utf-8"))
    data[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, _, err = run_cli("models", "show", str(path))
    assert code == 2
    assert one_line(err) == f"primus: {path}: {key}: must be an integer from 0 to 1,000,000,000 (got {value})"


def test_an_hf_count_at_the_limit_is_read():
    from primus.catalog.hf.reader import Reader

    assert Reader({}, "config.json", "llama").as_int("vocab_size", 10**9) == 10**9


@pytest.mark.parametrize("command", ["fit", "memory", "project"])
def test_nodes_help_states_the_limit_the_job_applies(run_cli, command):
    out = " ".join(run_cli(command, "--help")[1].split())
    assert "--nodes INTEGER RANGE" in out and "[1<=x<=100000]" in out and "1000000]" in out  # --gpus keeps 10^6


def test_nodes_above_the_limit_are_refused_at_the_option_not_blamed_on_the_file(run_cli):
    code, _, err = run_cli("memory", "--from", "megatron", "no-such-file.sh", "--nodes", "100001")
    assert code == 2
    assert "'--nodes': 100001 is not in the range 1<=x<=100000" in err


def test_a_job_file_refuses_the_same_node_count(run_cli, write_job):
    code, _, err = run_cli("fit", write_job({"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 100_001,
                                             "seq_len": 4096, "global_batch_size": 64}))
    assert code == 2 and "nodes: Input should be less than or equal to 100000" in one_line(err)
