"""The vectorised enumerator lists exactly what a plain-Python brute force over the same rules lists."""

from __future__ import annotations

import pytest

from primus.job import job_from_mapping
from primus.solver.api import Question
from primus.solver.brute import brute_force

CASES = {
    "dense, free": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                    "global_batch_size": 16},
    "dense, pinned sp and vp": {"model": "llama2-7b", "hardware": "mi300x", "nodes": 1, "seq_len": 4096,
                                "global_batch_size": 32, "parallel": {"sp": True, "vp": 2, "sharding": "zero1"}},
    "moe": {"model": "mixtral-8x7b", "hardware": "mi300x", "nodes": 1, "seq_len": 4096, "global_batch_size": 16},
    "searched recompute layers": {"model": {"base": "llama3.1-8b", "num_layers": 8}, "hardware": "h100-80gb",
                                  "nodes": 1, "seq_len": 4096, "global_batch_size": 8,
                                  "parallel": {"recompute": "full"}, "free": ["recompute_num_layers"]},
    "moe, recompute modules": {"model": "mixtral-8x7b", "hardware": "mi300x", "nodes": 1, "seq_len": 4096,
                               "global_batch_size": 16,
                               "parallel": {"recompute": "selective", "recompute_modules": ["layernorm", "moe_act"]}},
    "cpu offloading": {"model": {"base": "llama3.1-8b", "num_layers": 8}, "hardware": "h100-80gb", "nodes": 1,
                       "seq_len": 4096, "global_batch_size": 16, "cpu_offloading": {"num_layers": 3}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vectorised_enumeration_equals_brute_force(case):
    q = Question(job_from_mapping(CASES[case], case))
    fast = [(tuple(p.items()), int(b)) for p, b in zip(q.candidates.parallel_dicts(),
                                                       q.candidates.cols["peak_bytes"].tolist(), strict=True)]
    slow = [(tuple(layout.as_parallel().items()), b) for layout, b in brute_force(Question(q.job))]
    assert fast == slow
    assert fast
