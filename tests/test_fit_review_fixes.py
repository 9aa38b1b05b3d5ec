"""fit's answers where the pins break rules beyond the first core, found by a hostile review of the solver path.

- The rules by which a pin Megatron-LM refuses is refused (VP > 1 at PP 1: `interleaving-needs-pipeline`;
  EP > 1 for a dense model: `ep-needs-experts`, Megatron-LM arguments.py "num_experts must be non None to use
  expert model parallelism") describe no layout with or without them; removing one with --without used to end
  the text answer in a KeyError traceback and the JSON one with a core naming the removed rule.
- DeepSeek-V3 (61 layers, 256 routed experts) on 288 GB200 with PP 4, VP 2 and EP 72: the core is the pipeline
  split with the VP pin, but EP 72 also breaks `experts-divisible` (256 % 72 != 0). The closest evaluation used to
  drop every rule and show CP 18 at sequence 4,096 (breaking cp-sequence, cp-chunk-tile and sp-sequence, which no
  pin forces); it now keeps every rule the pins allow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DENSE_EP: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192,
                            "global_batch_size": 16, "parallel": {"ep": 2}}
DENSE_VP: dict[str, Any] = {**DENSE_EP, "parallel": {"pp": 1, "vp": 2}}
DSV3_EP72: dict[str, Any] = {"model": "deepseek-v3", "hardware": "gb200", "gpus": 288, "seq_len": 4096,
                             "global_batch_size": 1152, "parallel": {"pp": 4, "vp": 2, "ep": 72}}


@pytest.mark.parametrize(("job", "rule"), [(DENSE_EP, "ep-needs-experts"), (DENSE_VP, "interleaving-needs-pipeline")])
def test_the_rules_that_refuse_a_pin_cannot_be_removed(run_cli, write_job, job: dict[str, Any],  # type: ignore[no-untyped-def]
                                                       rule: str) -> None:
    for fmt in ("table", "json"):
        code, out, err = run_cli("fit", write_job(job), "--without", rule, "--format", fmt)
        assert (code, out) == (2, "")
        assert err == (f"primus: --without: {rule}: this rule is how a pin Megatron-LM refuses is refused (no layout "
                       "describes it) and cannot be removed\n")


def test_the_closest_evaluation_keeps_every_rule_the_pins_allow(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", write_job(DSV3_EP72), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["violated_rules"] == ["pipeline-split", "pin:vp"]
    assert doc["closest_breaks"] == ["experts-divisible", "pipeline-split"]


def test_the_conflicts_left_after_the_first_are_named(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # with VP released, 61 layers still split over no PP 4 without a pipeline option; with PP released too,
    # EP 72 still divides none of the 256 experts: a user who mends the first core meets these next
    code, out, _ = run_cli("fit", write_job(DSV3_EP72), "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert doc["further_conflicts"] == [["pipeline-split", "pin:pp"], ["experts-divisible", "pin:ep"]]
    code, text, _ = run_cli("fit", write_job(DSV3_EP72))
    assert "and once those pins change, still conflicting: experts-divisible, pin:ep" in text


def test_a_single_conflict_names_no_further_one(run_cli) -> None:  # type: ignore[no-untyped-def]
    # AMD's GBS 128 / MBS 2 / no-recompute mix of Mixtral 8x22B on 32 MI355X: over memory at its pins, and
    # once they change some layout fits
    code, out, _ = run_cli("fit", str(ROOT / "examples" / "mixtral-8x22b-mi355x-gbs128-no-recompute.yaml"),
                           "--format", "json")
    doc = json.loads(out)
    assert code == 1 and "memory" in doc["violated_rules"] and doc["further_conflicts"] == []
