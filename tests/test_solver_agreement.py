"""The solver's view and the ledger's view of a layout agree to the byte (issue 4, property test).

Three engines must agree on every structurally possible layout: the scalar ledger plus the scalar rule
interpreter (`evaluate`), the vectorised enumerator, and the CP-SAT model the rules compile to.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel
from primus.rules.expr import evaluate
from primus.solver.api import Question
from primus.solver.cpsat import ModelBuilder, new_solver
from primus.solver.ruleset import DEFINITIONAL, RuleSet
from primus.solver.vector import Candidates, Enumerator, add_memory_columns

JOBS = {
    "dense": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192, "global_batch_size": 32},
    "moe": {"model": "mixtral-8x7b", "hardware": "mi300x", "nodes": 2, "seq_len": 4096, "global_batch_size": 64},
    "fp8-mla-mtp": {"model": {"base": "deepseek-v3", "num_layers": 8, "moe_layer_freq": "([0]*1+[1]*7)"},
                    "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096, "global_batch_size": 64,
                    "precision": "fp8", "fp8_param_gather": True},
    # the eager loss's backward transient (two fp32 logit tensors) competes with the layers' in the max
    "torchtitan-eager-loss": {"model": "llama3.1-8b", "hardware": "h100-96gb-500w", "nodes": 2, "seq_len": 8192,
                              "global_batch_size": 32, "framework": "torchtitan",
                              "kernels": {"eager_cross_entropy": True}},
    # Primus-LM's listed-layer recompute: the tables read the job's ids as the ledger does
    "listed-recompute": {"model": {"base": "deepseek-v3", "num_layers": 8, "moe_layer_freq": "([0]*1+[1]*7)",
                                   "mtp_num_layers": 0},
                         "hardware": "mi355x", "nodes": 2, "seq_len": 4096, "global_batch_size": 64,
                         "parallel": {"recompute_layer_ids": [0, 3, 5]}},
    # Megatron-Core's recompute modules: the tables read the job's list through its ActContext
    "recompute-modules": {"model": {"base": "deepseek-v3", "num_layers": 8, "moe_layer_freq": "([0]*1+[1]*7)",
                                    "mtp_num_layers": 0},
                          "hardware": "gb200", "nodes": 4, "seq_len": 4096, "global_batch_size": 64,
                          "precision": "fp8", "fp8_recipe": "mxfp8",
                          "parallel": {"recompute_modules": ["mla_up_proj", "layernorm", "moe_act", "mlp"]}},
    # CPU activation offloading: the stage shapes keep the layers the offload handler leaves on the device
    "cpu-offload": {"model": {"base": "llama3.1-8b", "num_layers": 8}, "hardware": "gb200", "nodes": 2,
                    "seq_len": 8192, "global_batch_size": 32, "cpu_offloading": {"num_layers": 3}},
    # MaxText's remat policy: its kept bytes per layer and the rebuilt layer in the backward working set
    "maxtext-remat": {"stack": "maxtext", "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2,
                      "seq_len": 8192, "global_batch_size": 32, "parallel": {"recompute": "selective"}},
    # context parallelism other than the ring: a2a's second copy of the attention output in the tables, and
    # its rule that heads per TP rank divide by CP (gpt-oss: sliding windows and sinks need a2a)
    "cp-a2a": {"model": {"base": "gpt-oss-20b", "num_layers": 4}, "hardware": "h100-80gb", "nodes": 2,
               "seq_len": 16384, "global_batch_size": 16, "context_parallel": {"comm_type": "a2a"}},
    # all_gather's backward transient (the re-gathered K and V and their gradients) in the working set
    "cp-all-gather": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 32768,
                      "global_batch_size": 16, "context_parallel": {"comm_type": "all_gather"}},
    # the optimizer step's moment: fp16 main gradients' fp32 copies against the backward's activations
    "fp16-step-copy": {"model": {"base": "llama3.1-8b", "num_layers": 4}, "hardware": "h100-80gb", "nodes": 1,
                       "seq_len": 2048, "global_batch_size": 16, "precision": "fp16"},
    # layers that differ along depth: the dense layers spill past rank 0 (a one-layer first stage), so a
    # middle rank other than rank 1 holds the most MoE layers and can be the peak (review of 2026-12-06)
    "dense-spill": {"model": {"base": "deepseek-v3", "num_layers": 16, "moe_layer_freq": "([0]*3+[1]*13)",
                              "mtp_num_layers": 0},
                    "hardware": "h100-80gb", "nodes": 8, "seq_len": 4096, "global_batch_size": 64,
                    "precision": "fp8", "pipeline": {"decoder_first_pipeline_num_layers": 1}},
    # a stack's recipe layouts per (PP, VP) (Megatron-Bridge's DeepSeek-V3 layout_map, `Job.pipeline_at`):
    # stage slots differ by pair, the last slot always the last stage
    "stack-recipe-layouts": {"model": "deepseek-v3", "hardware": "b200", "nodes": 4, "seq_len": 4096,
                             "global_batch_size": 64, "precision": "fp8", "fp8_recipe": "mxfp8",
                             "stack": "megatron-bridge@26.04"},
}


@cache
def setup(name: str):
    job = job_from_mapping(JOBS[name], name)
    q = Question(job, pins={})
    structural = Enumerator(q.tables, RuleSet(tuple(r for r in q.ruleset.rules if r.id in DEFINITIONAL)), {}).run()
    legal = q.candidates
    legal_keys = {tuple(p.items()) for p in legal.parallel_dicts()}
    built = ModelBuilder(q.tables, q.ruleset, {}).build()
    return job, q, structural, legal_keys, built


def fixed_solve(built, layout, enforce_rules: bool):
    m = built.model.clone()
    ax = built.axes
    for k in ("tp", "pp", "vp", "cp", "ep", "etp", "mbs"):
        m.add(ax[k] == getattr(layout, k))
    m.add(ax["sp"] == int(layout.sp))
    m.add(ax[f"recompute_{layout.recompute}"] == 1)
    m.add(ax[f"sharding_{layout.sharding}"] == 1)
    if not isinstance(ax["recompute_num_layers"], int):
        m.add(ax["recompute_num_layers"] == (layout.recompute_num_layers or 0))
    if enforce_rules:
        for lit in built.rule_lits.values():
            m.add(lit == 1)
    solver = new_solver(30.0)
    status = solver.solve(m)
    return solver, status


def scalar_legal(q: Question, cands: Candidates, i: int, report) -> bool:
    values = dict(q.space.facts)
    for k, col in cands.cols.items():
        v = col[i]
        values[k] = bool(v) if col.dtype == bool else int(v)
    values.update({"peak_bytes": report.peak_bytes, "schedule_ok": True})
    values["first_stage_bytes"] = report.stages[0].bytes
    values["last_stage_bytes"] = report.stages[-1].bytes
    for key in ("weights", "gradients", "optimizer", "activations", "other"):
        values[f"{key}_bytes"] = max(s.breakdown[key] for s in report.stages)
    return all(bool(evaluate(expr, values)) for _, expr in q.ruleset.hard())


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(JOBS)), pick=st.integers(min_value=0, max_value=10**9))
def test_cpsat_bytes_equal_the_ledger_and_it_accepts_iff_the_rules_do(name, pick):
    job, q, structural, legal_keys, built = setup(name)
    i = pick % structural.n
    layout = structural.layout(i)
    report = MemoryModel(job).evaluate(layout, strict=False)
    # the vectorised engine computed the same bytes for this row
    assert int(structural.cols["peak_bytes"][i]) == report.peak_bytes
    # CP-SAT without the rules: the ledger's bytes, to the byte
    solver, status = fixed_solve(built, layout, enforce_rules=False)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    assert solver.value(built.memory["peak_bytes"]) == report.peak_bytes
    assert solver.value(built.memory["first_stage_bytes"]) == report.stages[0].bytes
    # with every hard rule enforced: feasible iff the scalar rules and the enumerator say legal
    legal = scalar_legal(q, structural, i, report)
    assert legal == (tuple(structural.take(np.array([i])).parallel_dicts()[0].items()) in legal_keys)
    _, status = fixed_solve(built, layout, enforce_rules=True)
    assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == legal


def assert_rows_agree_to_the_byte(job, structural, built, rows) -> None:  # type: ignore[no-untyped-def]
    """For each row: the vectorised engine's, the ledger's and CP-SAT's peak bytes are the same."""
    for i in rows:
        layout = structural.layout(i)
        report = MemoryModel(job).evaluate(layout, strict=False)
        assert int(structural.cols["peak_bytes"][i]) == report.peak_bytes
        solver, status = fixed_solve(built, layout, enforce_rules=False)
        assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        assert solver.value(built.memory["peak_bytes"]) == report.peak_bytes


def test_cpsat_bytes_equal_the_ledger_at_the_optimizer_steps_moment():
    job, _, structural, _, built = setup("fp16-step-copy")
    rows = range(0, structural.n, max(1, structural.n // 40))
    binding = [i for i in rows if max(s.terms.get("optimizer.step_grad_copy", 0)
                                      for s in MemoryModel(job).evaluate(structural.layout(i), strict=False).stages)]
    assert binding  # the step's moment is the peak for some of them
    assert_rows_agree_to_the_byte(job, structural, built, rows)


def test_a_middle_rank_beyond_the_second_is_counted_when_layers_differ_along_depth():
    # DeepSeek-V3's first three layers dense, a one-layer first stage: at PP 4 rank 1 holds layers 1-5
    # (two dense), rank 2 layers 6-10 (all MoE), so rank 2 can hold the peak; the enumerator and CP-SAT
    # used to look at ranks 0, 1 and PP-1 only and listed layouts whose rank 2 was over capacity
    job, _, structural, _, built = setup("dense-spill")
    rows = range(0, structural.n, max(1, structural.n // 60))
    inner = [i for i in rows if 1 < MemoryModel(job).evaluate(structural.layout(i), strict=False).peak.stage
             < structural.layout(i).pp - 1]
    assert inner  # the peak is on such a rank for some of them
    assert_rows_agree_to_the_byte(job, structural, built, inner)


def test_cpsat_bytes_equal_the_ledger_under_a_maxtext_remat_policy():
    job, _, structural, _, built = setup("maxtext-remat")
    assert job.spec.selective_recompute == "save_dot_except_mlp"
    assert_rows_agree_to_the_byte(job, structural, built, range(0, structural.n, max(1, structural.n // 12)))


def test_enumerator_and_cpsat_agree_on_the_most_headroom():
    _, q, _, _, built = setup("dense")
    best = q.most_headroom()
    assert best is not None
    m = built.model.clone()
    for lit in built.rule_lits.values():
        m.add(lit == 1)
    m.minimize(built.memory["peak_bytes"])
    solver = new_solver(60.0)
    assert solver.solve(m) == cp_model.OPTIMAL
    assert solver.value(built.memory["peak_bytes"]) == best.peak_bytes


@pytest.mark.parametrize("name", ["moe", "fp8-mla-mtp", "listed-recompute"])
def test_memory_columns_do_not_depend_on_the_order_of_the_rows(name):
    """`add_memory_columns` evaluates the ledger once per run of rows that differ only in sharding; rows
    in any order (runs broken up) get the very bytes they get in the enumerator's order."""
    _, q, structural, _, _ = setup(name)
    axes = {k: v for k, v in structural.cols.items() if not k.endswith("_bytes") and k != "peak_stage"}
    shuffled = np.random.default_rng(0).permutation(structural.n)
    again = Candidates({k: v[shuffled] for k, v in axes.items()})
    add_memory_columns(q.tables, again)
    for key in ("peak_bytes", "first_stage_bytes", "last_stage_bytes", "peak_stage", "weights_bytes",
                "gradients_bytes", "optimizer_bytes", "activations_bytes", "other_bytes"):
        assert np.array_equal(again.cols[key], structural.cols[key][shuffled]), key


def test_stack_recipe_layouts_agree_to_the_byte_at_every_pp_with_and_without_a_layout():
    """Megatron-Bridge's DeepSeek-V3 recipe names a layout at PP 16 (every stage a slot) but none at PP 32,
    where Megatron's even split (illegal for 61 layers, still sized) puts its last stage past the slots the
    layouts need: the last slot is always the last stage, so first, last and peak stage agree everywhere."""
    job, _, structural, _, built = setup("stack-recipe-layouts")
    pp = structural.cols["pp"]
    assert job.pipeline_at(16, 1).layout == "Et*4|(t*4|)*14tmL" and job.pipeline_at(32, 1).layout is None
    for want in (1, 4, 16, 32):
        rows = np.flatnonzero(pp == want)
        assert rows.size, want
        for i in rows[:: max(1, len(rows) // 3)]:
            report = MemoryModel(job).evaluate(structural.layout(i), strict=False)
            assert int(structural.cols["last_stage_bytes"][i]) == report.stages[-1].bytes
            assert int(structural.cols["peak_stage"][i]) == report.peak.stage
            solver, status = fixed_solve(built, structural.layout(i), enforce_rules=False)
            assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
            assert solver.value(built.memory["peak_bytes"]) == report.peak_bytes
            assert solver.value(built.memory["last_stage_bytes"]) == report.stages[-1].bytes
