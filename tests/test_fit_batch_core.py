"""`fit`'s minimal core names the definition the pins break (review 47, H2).

Megatron-LM's num_microbatches_calculator needs global_batch_size % (micro_batch_size × DP) == 0
(NVIDIA/Megatron-LM d98e8a6 megatron/core/num_microbatches_calculator.py:381-385,
ConstantNumMicroBatchesCalculator: "global batch size ({}) is not divisible by micro batch size ({}) times
data parallel size ({})"). Pins whose
sizes fold into the world but leave no whole microbatches break `batch-divisible`, not `world-size`.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from primus.api import load_job
from primus.solver.api import Question
from primus.solver.core import broken_definitions
from primus.solver.explain import Asker, pins_core

# Llama 3.1 8B on one node of 8 H100, GBS 63: TP2 × CP1 × PP1 leaves DP4, and 63 is odd.
ODD: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096,
                       "global_batch_size": 63, "precision": "bf16",
                       "parallel": {"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "selective",
                                    "sharding": "dist_opt"}}


def test_an_odd_global_batch_on_dp4_names_batch_divisible_with_its_numbers(run_cli, write_job):
    code, out, _ = run_cli("fit", write_job(ODD), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["violated_rules"] == ["batch-divisible", "pin:tp", "pin:pp", "pin:cp"]
    assert doc["core_details"] == {"batch-divisible": "global batch = whole microbatches on every DP rank: 63 is "
                                                      "not a multiple of DP4 (= 8 GPUs / (TP2 × CP1 × PP1))"}


def test_the_odd_batch_core_is_minimal_and_the_world_size_alone_holds_its_pins():
    q = Question(load_job(ODD))
    asker = Asker(q)
    core = pins_core(asker)
    assert core == ("pin:tp", "pin:pp", "pin:cp")
    assert all(asker.feasible([p for p in core if p != dropped]) for dropped in core)
    even = Question(load_job({**ODD, "global_batch_size": 64}))  # TP2 × DP4 × PP1 × CP1 = 8: world-size holds
    assert Asker(even).feasible(list(core))


def test_memory_and_project_answer_the_same_batch_as_fit_does(run_cli, write_job):
    # one answer for one question (a hostile review found memory and project exiting 2 where fit exits 1):
    # pins Megatron-LM cannot build are a negative answer naming the rule, with no ledger to show
    path = write_job(ODD)
    for command in ("memory", "project"):
        code, out, err = run_cli(command, path)
        assert code == 1 and err == ""
        assert "batch-divisible" in out and "63 is not a multiple of DP4" in out


def test_a_pinned_micro_batch_too_large_for_the_batch_names_both_sizes(run_cli, write_job):
    job = {**ODD, "global_batch_size": 64, "parallel": {**ODD["parallel"], "mbs": 32}}
    doc = json.loads(run_cli("fit", write_job(job), "--format", "json")[1])
    assert doc["violated_rules"][0] == "batch-divisible"
    assert doc["core_details"]["batch-divisible"].endswith("64 is not a multiple of MBS32 × DP4 (= 8 GPUs / "
                                                           "(TP2 × CP1 × PP1))")


def _named(gbs: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """The pins core and its definitions for TP8 × PP4 × DP4 pinned on 16 GPUs of Llama 3.1 70B."""
    q = Question(load_job({"model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 16, "seq_len": 8192,
                           "global_batch_size": gbs, "parallel": {"tp": 8, "pp": 4, "dp": 4}}))
    core = pins_core(Asker(q))
    return core, broken_definitions(q, core)


def test_pins_that_do_not_fold_into_the_world_still_name_world_size():
    core, named = _named(64)  # TP8 × PP4 × DP4 = 128 ranks on 16 GPUs, and 64 = 16 × DP4
    assert list(named) == ["world-size"] and "pin:dp" in core


def test_a_pinned_dp_that_no_micro_batch_fits_is_a_core_of_its_own():
    core, named = _named(63)  # 63 sequences are no whole number of microbatches on DP4, whatever else holds
    assert core == ("pin:dp",)
    assert named == {"batch-divisible": "global batch = whole microbatches on every DP rank: 63 is not a multiple "
                                        "of the pinned DP4"}


def _dense_dps(world: int, pins: dict[str, int], pp_limit: int) -> set[int]:
    """Every DP that TP × CP × PP × DP = world leaves with these pins (brute force, no solver)."""
    out = set()
    for tp in range(1, world + 1):
        for cp in range(1, world + 1):
            for pp in range(1, min(world, pp_limit) + 1):
                if world % (tp * cp * pp) or any(pins.get(a, v) != v for a, v in (("tp", tp), ("cp", cp),
                                                                                     ("pp", pp))):
                    continue
                dp = world // (tp * cp * pp)
                if pins.get("dp", dp) == dp:
                    out.add(dp)
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=st.sampled_from([4, 8, 16]), gbs=st.integers(1, 96),
       pins=st.fixed_dictionaries({}, optional={"tp": st.sampled_from([1, 2, 4, 8]), "cp": st.sampled_from([1, 2, 4]),
                                                "pp": st.sampled_from([1, 2, 4]), "mbs": st.sampled_from([1, 2, 3, 4]),
                                                "dp": st.sampled_from([1, 2, 4, 8])}))
def test_the_definition_a_core_names_is_the_one_its_pins_break(world, gbs, pins):
    """Whatever the sizes: a core naming `world-size` has pins no DP folds into the world with; one
    naming `batch-divisible` has pins some DP folds into the world with, but none whole microbatches."""
    job = load_job({"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": world, "seq_len": 4096,
                    "global_batch_size": gbs, "parallel": pins})
    q = Question(job)
    asker = Asker(q)
    core = pins_core(asker)
    if not core:
        return
    assert all(asker.feasible([p for p in core if p != dropped]) for dropped in core)  # minimal
    named = broken_definitions(q, core)
    held = {p[4:]: int(q.pins[p[4:]]) for p in core}
    dps = _dense_dps(world, held, job.model.num_layers + 2)
    mbs_values = [held["mbs"]] if "mbs" in held else range(1, gbs + 1)
    whole = any(gbs % (m * dp) == 0 for dp in dps for m in mbs_values)
    assert ("world-size" in named) == (not dps)
    assert ("batch-divisible" in named) == (bool(dps) and not whole)
