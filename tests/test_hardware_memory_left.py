"""A device whose memory the reserves use up is refused on load (review 47, M4).

Capacity = HBM − runtime context − allocator fraction × (HBM − context) (`Reserves.of`). H100 80 GB:
85,029,158,912 B of HBM (torch total_memory) and a 1,073,741,824 B runtime context, hardware/h100-80gb.yaml.
HBM at or below the context, or a fraction of 1 or more, left a negative reserve and a negative capacity
printed by fit, memory and project; now one line names the file and the field, exit 2.
"""

from __future__ import annotations

from typing import Any

import pytest

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.memory.ledger import Reserves
from tests.test_bad_input import one_line

JOB: dict[str, Any] = {"model": "llama3.1-8b", "nodes": 1, "seq_len": 4096, "global_batch_size": 64,
                       "parallel": {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                                    "sharding": "dist_opt"}}
CONTEXT = "reserves.runtime_context_bytes (1,073,741,824 B): the device would have no memory left for the model"


@pytest.mark.parametrize("hbm", [0, 1, 1_073_741_824])
@pytest.mark.parametrize("command", ["fit", "memory", "project"])
def test_hbm_at_or_below_the_runtime_context_is_refused(run_cli, write_job, command, hbm):
    path = write_job({**JOB, "hardware": {"base": "h100-80gb", "hbm_bytes": hbm}})
    code, out, err = run_cli(command, path)
    assert code == 2 and out == ""
    assert one_line(err) == (f"primus: {path}: hardware: accelerator.hbm_bytes ({hbm:,}) must be above {CONTEXT}")


def test_one_byte_above_the_context_is_a_device_with_positive_capacity(run_cli, write_job):
    cluster = resolve_hardware({"base": "h100-80gb", "hbm_bytes": 1_073_741_825}, "test")
    assert Reserves.of(cluster).capacity_bytes == 1  # 1 B above the context, 10% of it reserved (rounded down)


def test_a_runtime_context_larger_than_the_device_is_refused(run_cli, write_job):
    hw = {"base": "h100-80gb", "reserves": {"runtime_context_bytes": {"value": 100_000_000_000, "unit": "bytes",
                                                                      "source": "x"}}}
    code, _, err = run_cli("memory", write_job({**JOB, "hardware": hw}))
    assert code == 2
    assert "accelerator.hbm_bytes (85,029,158,912) must be above reserves.runtime_context_bytes (100,000,000,000 B)" \
        in one_line(err)


def test_an_allocator_fraction_of_one_or_more_is_refused(run_cli, write_job):
    hw = {"base": "h100-80gb", "reserves": {"allocator_fragmentation": {"value": 1.5, "unit": "fraction",
                                                                        "source": "x"}}}
    code, _, err = run_cli("fit", write_job({**JOB, "hardware": hw}))
    assert code == 2
    assert one_line(err).endswith("hardware: reserves.allocator_fragmentation (1.5) must be a fraction below 1 of "
                                  "the memory above the runtime context: the allocator would reserve all of it")


@pytest.mark.parametrize("name", sorted(catalog_hardware()))
def test_every_catalog_device_leaves_positive_capacity(name):
    reserves = Reserves.of(resolve_hardware(name, "test"))
    assert 0 <= reserves.fragmentation_bytes < reserves.capacity_bytes < reserves.hbm_bytes  # cpu: no allocator reserve
