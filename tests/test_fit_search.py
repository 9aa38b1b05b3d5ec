"""`fit`'s shortcuts answer exactly what the long way would: the per-group bounded search ranks groups
as scoring every item does, the early-stopping existence test agrees with a full enumeration, and the
model-state floor that lets the min-size search skip sizes is below every layout's peak."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus.job import job_from_mapping
from primus.solver import minsize
from primus.solver.api import Question
from primus.solver.explain import Asker
from primus.solver.minsize import smallest_size, state_floor_bytes
from primus.solver.suggest import best_per_group
from primus.solver.vector import Enumerator


def _exhaustive(scores: list[float], owner: list[int], need: int) -> list[tuple[float, int, int]]:
    best: dict[int, tuple[float, int]] = {}
    for i, (s, g) in enumerate(zip(scores, owner, strict=True)):
        if g not in best or s > best[g][0]:
            best[g] = (s, i)
    ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return [(s, g, i) for g, (s, i) in ranked[:need]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6), st.integers(0, 4), st.integers(0, 4)),
                min_size=1, max_size=40), st.integers(1, 7))
def test_the_bounded_per_group_search_ranks_groups_as_exhaustive_scoring(items, need):
    # scores from a small range so ties are common; bounds are the score plus any slack (admissible)
    items = sorted(items, key=lambda t: t[0])  # groups hold contiguous items, as fit builds them
    owner = [g for g, _, _, _ in items]
    scores = [float(s) for _, s, _, _ in items]
    fine = [s + f for s, (_, _, f, _) in zip(scores, items, strict=True)]
    coarse = [b + c for b, (_, _, _, c) in zip(fine, items, strict=True)]
    found = best_per_group(coarse, owner, [lambda i: fine[i], lambda i: scores[i]], need)
    assert found == _exhaustive(scores, owner, need)


JOBS = [
    {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 8192, "global_batch_size": 128,
     "parallel": {"tp": 1, "pp": 1, "sp": False, "mbs": 1, "recompute": "selective", "sharding": "dist_opt"}},
    {"model": "llama3.1-405b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64},
    {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 4096, "global_batch_size": 64,
     "parallel": {"tp": 1, "pp": 4, "ep": 8, "recompute": "none", "mbs": 2}},
]


@pytest.mark.parametrize("data", JOBS, ids=lambda d: d["model"])
def test_the_early_stopping_existence_test_agrees_with_a_full_enumeration(data):
    q = Question(job_from_mapping(data, "job.yaml"))
    asker = Asker(q)
    names = asker.names
    # every single deletion from the full set, and each rule or pin alone
    trials = [names, *([n for n in names if n != drop] for drop in names), *([n] for n in names)]
    for active in trials:
        rules = [n for n in active if not n.startswith("pin:")]
        pins = {n[4:]: asker.pins[n[4:]] for n in active if n.startswith("pin:")}
        memory = bool(asker.memory_ids & set(rules))
        full = Enumerator(q.tables, asker._ruleset(rules), pins).run(with_memory=memory).n > 0
        early = Enumerator(q.tables, asker._ruleset(rules), pins).first(memory).n > 0
        assert early == full, active


FLOOR_JOBS = [
    {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64},
    {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 4096, "global_batch_size": 64,
     "precision": "fp8", "fp8_param_gather": True},
    {"model": "llama3.1-8b", "hardware": "mi300x", "gpus": 4, "seq_len": 8192, "global_batch_size": 32,
     "optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}},
]


@pytest.mark.parametrize("data", FLOOR_JOBS, ids=lambda d: f"{d['model']}-{d['hardware']}")
def test_no_layout_holds_less_than_the_model_states_floor(data):
    # every structurally possible layout (only the definitions in force), every sharding and recompute
    q = Question(job_from_mapping(data, "job.yaml"))
    asker = Asker(q)
    c = Enumerator(q.tables, asker._ruleset([]), {}).run(with_memory=True)
    assert c.n > 1000
    assert int(c.cols["peak_bytes"].min()) >= state_floor_bytes(q.job, q.job.num_gpus)


@pytest.mark.parametrize(("data", "smallest"), [
    ({"model": "llama3.1-405b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64}, 96),
    ({"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 1, "seq_len": 4096, "global_batch_size": 64}, 2),
])
def test_the_min_size_search_answers_the_same_with_and_without_the_floor(data, smallest, monkeypatch):
    q = Question(job_from_mapping(data, "job.yaml"))
    assert smallest_size(q) == (smallest, None)
    monkeypatch.setattr(minsize, "MEMORY_RULE", ("no-such-rule", ""))  # every size enumerated
    assert smallest_size(q) == (smallest, None)
