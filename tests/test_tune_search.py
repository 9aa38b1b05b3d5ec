"""Guided search when the space changes under it (issue 17, item 3): a rule adopted during the search
(the hypothesis generator's or the LLM's) shrinks the legal set; the search order follows the new set."""

from __future__ import annotations

import json
from pathlib import Path

from primus.job import job_from_mapping
from primus.rules.model import Rule
from primus.tuning.agent import Tuner, TuneSettings

REPO = Path(__file__).resolve().parent.parent
SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


class AdoptOnce:
    """An investigation that adopts one hard rule on its first call (as `Investigation.test_rule` does
    when a rule keeps a layout at least as fast as the incumbent) and asks to go on every time."""

    def __init__(self, require: str) -> None:
        self.rule = Rule(id="shrink", why="test", severity="hard", require=require, origin="llm")
        self.calls = 0

    def run(self, tuner: Tuner) -> bool:
        self.calls += 1
        if self.calls == 1:
            tuner.space = tuner.space.with_rules([self.rule])
            tuner.adopted_rules.append(self.rule)
            tuner.log.event("rule", id=self.rule.id, status="adopted")
        return True


def test_a_rule_adopted_mid_search_leaves_the_search_order_valid_in_the_smaller_space():
    """`tp == 1` keeps 911 of the 3,065 legal layouts of Llama 3.1 8B on 8 H100s (default allocator reserve,
    stacks/allocators.yaml); the search goes on
    over what is left of its order, in the smaller space, until every layout in it has been scored; the stop
    says it scored the layouts legal under the adopted rule, not every legal layout."""
    job = job_from_mapping(SMALL, "small")
    tuner = Tuner(job, TuneSettings(exhaustive_limit=0, per_round=50, stall_rounds=1, max_rounds=40))
    assert tuner.space.count == 3_065
    tuner.guided(AdoptOnce("tp == 1"))  # type: ignore[arg-type]
    assert tuner.space.count == 911
    adopted_at = next(e["seq"] for e in tuner.log.events if e["kind"] == "rule")
    after = [e for e in tuner.log.entries[adopted_at:] if e["proposer"] == "guided"]
    assert after and all(e["parallel"]["tp"] == 1 for e in after)
    assert tuner.log.events[-1] == {**tuner.log.events[-1], "kind": "stop",
                                    "reason": "every layout legal under the 1 adopted rule(s) has been scored "
                                              "(911 of 3,065 legal layouts)"}
    assert all(lay in tuner.scores for lay in tuner.space.layouts)


def test_the_deepseek_v3_guided_tune_tests_a_hypothesis_and_finishes_with_a_report(run_cli, tmp_path):
    """The case from the issue: 1,024 H100s, guided search (limit 0), no LLM; a rule of the hypothesis
    generator tried mid-search once crashed the search (`ep * etp <= 8`, which shrank 11,608 legal layouts).
    Which hypothesis is tried, and whether it is adopted, follows the incumbent's breakdown under the shipped
    H100 profile (since the issue-19 refit: `dp < 512`, whose candidates do not beat the incumbent); a rule
    adopted mid-search is `test_a_rule_adopted_mid_search_leaves_the_search_order_valid_in_the_smaller_space`."""
    out = tmp_path / "ds"
    code, stdout, _ = run_cli("tune", str(REPO / "examples" / "deepseek-v3-h100-1024.yaml"), "--exhaustive-limit",
                              "0", "--llm", "none", "--workers", "1", "--out", str(out), "--format", "json")
    assert code == 0
    doc = json.loads(stdout)
    assert doc["mode"] == "guided" and doc["best"]["fits"] is True
    assert doc["legal_count_after_adopted_rules"] <= doc["legal_count"] == 12_283
    tried = [json.loads(line) for line in (out / "audit.jsonl").read_text().splitlines()]
    assert any(str(e.get("proposer", "")).startswith("hypothesis:") for e in tried)
    assert (out / "report.html").exists() and (out / "result.json").exists()
    assert not (tmp_path / "ds.partial").exists()


def test_a_job_with_no_reference_layout_claims_no_speedup(run_cli, write_job, tmp_path):
    """Issue 17 item 7: with every axis free and no published recipe there is nothing to compare the best
    with (fit's most-headroom completion is a search seed, not a reference): no ratio in the terminal,
    result.json or the report."""
    out = tmp_path / "run"
    job = write_job(SMALL)
    code, stdout, _ = run_cli("tune", job, "--llm", "none", "--workers", "1", "--out", str(out))
    assert code == 0
    assert "reference: none (the job pins no complete layout and no published recipe matches it" in stdout
    assert "x the reference" not in stdout and "why it wins" not in stdout
    doc = json.loads((out / "result.json").read_text())
    assert doc["reference"]["origin"] == "none" and doc["reference"]["parallel"] is None
    assert "speedup_vs_reference" not in doc and "why" not in doc
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for report in (md, html):
        assert "No reference: the job pins no complete layout and no published recipe matches it" in report
    assert "| – |" in md.split("vs reference |", 1)[1].split("\n")[2]  # the headline's ratio cell is empty
