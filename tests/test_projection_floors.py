"""Fixed per-step costs (issue 16): a tiny model does not project microseconds.

Sources: PyTorch eager dispatch plus cudaLaunchKernel costs about 5-25 us of host time per op (He 2022,
"Making Deep Learning Go Brrrr From First Principles"; `host.kernel_launch_us`, 10 us); Megatron-Core's
step issues a gradient cast and a parameter copy per parameter tensor, reads the gradient norm with
`.item()` (draining the stream) and launches its multi-tensor kernels: 38 host-issued ops for a 2-layer
model, 0.19-0.95 ms at 5-25 us each (`host.step_us`, 0.5 ms; derivation in `primus.projection.profile`).
"""

from __future__ import annotations

import pytest

from primus.job import job_from_mapping
from primus.parallel import Layout
from primus.projection import project
from primus.projection.profile import KERNEL_LAUNCH_US, STEP_US, load_profile

# A 2-layer toy a user might write to try the tool: 64 wide, 128 tokens, one sequence per step, 1 GPU.
TOY = {"model": {"base": "llama3.1-8b", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256,
                 "num_attention_heads": 2, "num_query_groups": 2, "kv_channels": 32, "vocab_size": 1024},
       "hardware": "h100-80gb", "gpus": 1, "seq_len": 128, "global_batch_size": 1}
ONE_GPU = Layout(tp=1, pp=1, vp=1, cp=1, ep=1, etp=1, dp=1, mbs=1, sp=False, recompute="none",
                 sharding="none", recompute_num_layers=None, schedule="1f1b")


def _toy() -> tuple[object, object]:
    job = job_from_mapping(TOY, "toy.yaml")
    return job, load_profile(job.cluster)


def test_a_two_layer_toy_step_takes_at_least_the_per_step_host_work():
    job, profile = _toy()
    p = project(job, ONE_GPU, profile)
    assert p.step_time_s >= STEP_US * 1e-6


def test_every_kernel_costs_at_least_its_host_dispatch():
    job, profile = _toy()
    floored = project(job, ONE_GPU, profile)
    bare = project(job, ONE_GPU, profile.with_parameters({"host.kernel_launch_us": 0.0}))
    assert floored.step_time_s > bare.step_time_s
    assert floored.breakdown["host"] > 0 and bare.breakdown.get("host", 0.0) == 0


def test_the_step_floor_adds_exactly_step_us_to_the_optimizer():
    job, profile = _toy()
    a = project(job, ONE_GPU, profile.with_parameters({"host.step_us": 0.0}))
    b = project(job, ONE_GPU, profile.with_parameters({"host.step_us": 1000.0}))
    assert b.step_time_s - a.step_time_s == pytest.approx(1e-3, rel=1e-9)


def test_the_floors_are_named_profile_parameters_with_sources():
    _, profile = _toy()
    params = profile.parameters()
    assert params["host.kernel_launch_us"] == KERNEL_LAUNCH_US == 10.0
    assert params["host.step_us"] == STEP_US == 500.0
    assert "He 2022" in profile.host.kernel_launch_us.source
    assert "gradient-norm" in profile.host.step_us.source
