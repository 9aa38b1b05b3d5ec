"""`primus fit` and `primus enumerate` (issue 4)."""

from __future__ import annotations

import json

import pytest

from primus.job import job_from_mapping
from primus.projection.complete import rank_layouts, speed_of
from primus.solver.api import Question
from primus.solver.core import certify, minimal_core, violations
from primus.solver.fit import fit
from tests.conftest import EXAMPLES

H100_TP1 = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 8192, "global_batch_size": 128,
            "parallel": {"tp": 1, "pp": 1, "sp": False, "mbs": 1, "recompute": "selective", "sharding": "dist_opt"}}
SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64}


def test_fit_proves_llama31_70b_on_two_mi300x_nodes_at_tp8(run_cli):
    code, out, _ = run_cli("fit", str(EXAMPLES / "llama3.1-70b-mi300x.yaml"), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["fits"] is True
    assert doc["parallel"]["tp"] == 8 and doc["parallel"]["dp"] == 2
    assert doc["peak_bytes"] <= doc["capacity_bytes"]
    assert "memory" in doc["satisfied_rules"]
    assert doc["assumptions"]


def test_fit_refuses_70b_at_tp1_pp1_on_four_h100_nodes_with_memory_and_pins(run_cli, write_job):
    code, out, _ = run_cli("fit", write_job(H100_TP1), "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["fits"] is False
    assert "memory" in doc["violated_rules"]
    assert "pin:tp" in doc["violated_rules"]
    assert any(s["over_capacity_bytes"] > 0 for s in doc["stages"])
    assert doc["alternatives"]


def test_every_alternative_is_accepted_back_by_fit_verbatim(run_cli, write_job):
    _, out, _ = run_cli("fit", write_job(H100_TP1), "--format", "json")
    for alt in json.loads(out)["alternatives"]:
        assert None not in alt["parallel"].values()
        assert alt["tokens_per_s_per_gpu"] > 0  # the CLI completes suggestions by projected throughput
        code, out2, _ = run_cli("fit", write_job({**H100_TP1, "parallel": alt["parallel"]}, "alt.yaml"),
                                "--format", "json")
        assert code == 0 and json.loads(out2)["fits"] is True


def test_each_suggestion_is_the_fastest_completion_of_its_pins():
    # the job pins TP1 PP1 MBS1, no SP, selective recompute, dist_opt and leaves CP (so DP) and VP free:
    # a suggestion changes some pins and completes the free axes with the projected-fastest legal choice
    job = job_from_mapping(H100_TP1, "h100")
    result = fit(Question(job), speed=speed_of(job))
    assert not result.fits and result.alternatives
    pinned = ("tp", "pp", "mbs", "sp", "recompute", "sharding")
    for alt in result.alternatives:
        p = alt.layout.as_parallel()
        legal = Question(job, pins={k: p[k] for k in pinned}).legal()
        fastest = rank_layouts(job, legal)[0]
        assert alt.tokens_per_s_per_gpu == pytest.approx(fastest.tokens_per_s_per_gpu)
    changed = [len(a.changed) for a in result.alternatives]
    assert changed == sorted(changed)  # nearest first
    # least memory would have completed the first suggestion with CP 32 (one DP rank); the fastest does not
    assert result.alternatives[0].layout.cp < 32


def test_without_a_projection_suggestions_complete_by_least_memory():
    result = fit(Question(job_from_mapping(H100_TP1, "h100")))
    assert all(a.tokens_per_s_per_gpu is None for a in result.alternatives)
    assert result.alternatives[0].layout.cp == 32


def test_the_core_is_minimal_and_certified_by_cpsat():
    q = Question(job_from_mapping(H100_TP1, "h100"))
    v = violations(q)
    core = minimal_core(v)
    idx = [v.names.index(n) for n in core]
    assert not v.feasible(idx)
    for drop in idx:
        assert v.feasible([i for i in idx if i != drop])
    assert certify(q, core)


def test_inline_rule_on_a_tp1_job_is_named_inline_1(run_cli, write_job):
    job = {**SMALL, "nodes": 2, "seq_len": 4096,
           "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "recompute": "full", "sharding": "dist_opt"}}
    path = write_job(job)
    assert run_cli("fit", path)[0] == 0
    code, out, _ = run_cli("fit", path, "--rule", "tp >= 2", "--format", "json")
    assert code == 1
    assert "inline-1" in json.loads(out)["violated_rules"]


def test_a_pin_no_layout_can_hold_names_the_definition_it_breaks(run_cli, write_job):
    doc = json.loads(run_cli("fit", write_job({**SMALL, "parallel": {"tp": 16}}), "--format", "json")[1])
    assert doc["violated_rules"] == ["world-size", "pin:tp"]


def test_without_drops_a_rule_and_refuses_definitions(run_cli, write_job):
    path = write_job({**SMALL, "nodes": 2, "parallel": {"tp": 16}})
    assert "tp-in-scaleup" in json.loads(run_cli("fit", path, "--format", "json")[1])["violated_rules"]
    assert run_cli("fit", path, "--without", "tp-in-scaleup", "--without", "query-groups-divisible")[0] == 0
    code, _, err = run_cli("fit", path, "--without", "world-size")
    assert code == 2 and "cannot be removed" in err
    code, _, err = run_cli("fit", path, "--without", "tp-in-scalup")
    assert code == 2 and "did you mean 'tp-in-scaleup'" in err


def test_enumerate_count_matches_the_listing(run_cli, write_job):
    path = write_job(SMALL)
    code, out, _ = run_cli("enumerate", path, "--count")
    assert code == 0
    listed = run_cli("enumerate", path, "--format", "jsonl")[1].strip().splitlines()
    assert int(out) == len(listed) > 0


def test_every_enumerated_layout_passes_fit(run_cli, write_job):
    path = write_job(SMALL)
    rows = [json.loads(x) for x in run_cli("enumerate", path, "--format", "jsonl")[1].splitlines()]
    for row in rows[:: max(1, len(rows) // 12)]:
        code, out, _ = run_cli("fit", write_job({**SMALL, "parallel": row["parallel"]}, "one.yaml"), "--format",
                               "json")
        assert code == 0, row
        assert json.loads(out)["peak_bytes"] == row["peak_bytes"]


def test_sampled_excluded_layouts_fail_fit_with_a_reason(run_cli, write_job):
    q = Question(job_from_mapping(SMALL, "small"))
    legal = {tuple(p.items()) for p in q.candidates.parallel_dicts()}
    structural = violations(q).cands.parallel_dicts()
    excluded = [p for p in structural if tuple(p.items()) not in legal]
    assert excluded
    for parallel in excluded[:: max(1, len(excluded) // 6)]:
        code, out, _ = run_cli("fit", write_job({**SMALL, "parallel": parallel}, "x.yaml"), "--format", "json")
        assert code == 1, parallel
        assert json.loads(out)["violated_rules"]


def test_enumerate_is_sorted_canonically_and_deterministic(run_cli, write_job):
    path = write_job(SMALL)
    first = run_cli("enumerate", path, "--format", "csv")[1]
    assert first == run_cli("enumerate", path, "--format", "csv")[1]
    rows = [line.split(",") for line in first.strip().splitlines()[1:]]
    keys = [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]
    assert keys == sorted(keys)


def test_enumerate_top_orders_by_headroom(run_cli, write_job):
    rows = [json.loads(x) for x in run_cli("enumerate", write_job(SMALL), "--top", "5", "--format", "jsonl")[1]
            .splitlines()]
    heads = [r["headroom_bytes"] for r in rows]
    assert len(rows) == 5 and heads == sorted(heads, reverse=True)


def test_enumerate_count_exits_1_when_nothing_is_legal(run_cli, write_job):
    code, out, _ = run_cli("enumerate", write_job({**SMALL, "model": "llama3.1-405b"}), "--count")
    assert code == 1 and out.strip() == "0"


def test_fit_reports_the_smallest_node_count_when_nothing_fits(run_cli, write_job):
    code, out, _ = run_cli("fit", write_job({**SMALL, "model": "llama3.1-405b", "seq_len": 4096}), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and not doc["alternatives"]
    assert doc["min_nodes"] and doc["min_nodes"] > 1
    code, _, _ = run_cli("enumerate", write_job({**SMALL, "model": "llama3.1-405b", "seq_len": 4096,
                                                 "nodes": doc["min_nodes"]}), "--count")
    assert code == 0


HOSTILE_RULES = [
    "__import__('os').system('touch /tmp/primus-pwned')",
    "open('/etc/passwd')",
    "tp.__class__",
    "().__class__.__bases__[0]",
    "lambda: 1",
    "[x for x in range(10**9)]",
    "9**9**9",
    "10**100 > tp",
    "tp > " + "9" * 30,
    "1 // 0 == tp",
    "tp // (cp - cp) > 1",
    "tp % 0 == 1",
    "'a' == 'a'",
    "1.5 < tp",
    "(" * 200 + "tp" + ")" * 200 + " > 1",
    "tp >= 1 and " * 120 + "tp >= 1",
    "tp if sp else pp",
    "exec('1') or tp > 1",
    "globals()",
    "tpp >= 2",
    "tp and sp",
    "tp * 4611686018427387904 > 1",
]


@pytest.mark.parametrize("text", HOSTILE_RULES)
def test_hostile_rule_text_is_refused_with_exit_2_and_nothing_runs(text, run_cli, write_job, tmp_path):
    code, _, err = run_cli("fit", write_job(SMALL), "--rule", text)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--rule" in err
    assert not (tmp_path / "primus-pwned").exists()


def test_hostile_rule_file_names_file_and_rule(run_cli, write_job, tmp_path):
    rules = tmp_path / "bad.yaml"
    rules.write_text("rules:\n  - id: sneaky\n    why: test\n    source: test\n    require: \"__import__('os')\"\n")
    code, _, err = run_cli("fit", write_job(SMALL), "--rules", str(rules))
    assert code == 2 and str(rules) in err and "sneaky" in err


def test_job_rules_are_enforced(run_cli, write_job):
    job = {**SMALL, "rules": [{"id": "small-tp", "why": "keep TP small", "source": "test", "require": "tp <= 2"}]}
    rows = [json.loads(x) for x in run_cli("enumerate", write_job(job), "--format", "jsonl")[1].splitlines()]
    assert rows and all(r["parallel"]["tp"] <= 2 for r in rows)


def test_schema_rule_lists_axes_facts_and_memory(run_cli):
    doc = json.loads(run_cli("schema", "rule", "--format", "json")[1])
    for name in ("tp", "num_microbatches", "scaleup_domain_size", "peak_bytes", "hbm_bytes", "sharding_fsdp"):
        assert name in doc["names"]
