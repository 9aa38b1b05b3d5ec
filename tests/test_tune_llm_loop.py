"""The LLM loop keeps asking (issue 17, item 5): while the call, token and time budgets last and the last
round changed something — a rule adopted, a better layout found, or a proposal refused for a reason the
model can act on — the LLM is asked again, and each request after the first carries what was refused
and why. Rule ids get one prefix, verdicts one status, and a huge reply is kept as a capped excerpt with
its size noted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from primus.cli.tune_cmd import tune_cmd
from primus.job import job_from_mapping
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.llm import MAX_REPLY_CHARS, LlmSettings
from tests.helpers.fake_llm import fake_llm

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}
EMPTIES = {"rules": [{"id": "tp-huge", "why": "try", "require": "tp * pp > world_size"}]}
CONVERGENCE = {"rules": [{"id": "short-seq", "why": "try", "require": "seq_len <= 2048"}]}
NOTHING: dict[str, Any] = {"hypotheses": [{"text": "no more ideas", "predicted_effect": "none"}]}


def settings(url: str, calls: int = 12) -> TuneSettings:
    return TuneSettings(exhaustive_limit=0, per_round=6, stall_rounds=1, max_rounds=4,
                        llm=LlmSettings(base_url=url, timeout_s=2, retries=0, max_calls=calls))


def user_content(request: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = json.loads(request["messages"][1]["content"])
    return content


def llm_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["events"] if e["kind"] == "llm"]


def test_a_refused_first_rule_sends_a_second_request_that_carries_the_refusal():
    with fake_llm([("json", EMPTIES), ("json", NOTHING)]) as (url, script):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    assert len(script.requests) >= 2
    assert user_content(script.requests[0])["refused"] == []
    refused = user_content(script.requests[1])["refused"]
    assert refused == [{"proposal": "rule llm-tp-huge", "require": "tp * pp > world_size",
                        "reason": "empties the legal set"}]
    assert doc["llm"]["calls"] == len(script.requests)


def test_the_llm_is_asked_while_each_round_changes_something_and_stops_after_one_that_does_not():
    script_replies = [("json", EMPTIES), ("json", CONVERGENCE), ("json", NOTHING), ("json", EMPTIES)]
    with fake_llm(script_replies) as (url, script):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    assert len(script.requests) == 3  # the third reply changed nothing: no fourth request
    reasons = [r["reason"] for r in user_content(script.requests[2])["refused"]]
    assert reasons == ["empties the legal set", "touches convergence settings (seq_len, global batch)"]
    done = [e for e in llm_events(doc) if e["status"] == "done"]
    assert len(done) == 1 and "changed nothing" in done[0]["reason"]


def test_the_same_refusal_again_is_no_progress_and_the_call_budget_is_kept():
    with fake_llm([("json", EMPTIES)] * 10) as (url, script):
        Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    assert len(script.requests) == 2  # the repeat taught nothing new
    with fake_llm([("json", {"rules": [{"id": f"r{i}", "require": f"tp * pp > world_size + {i}"}]})
                   for i in range(10)]) as (url, script):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url, calls=3)).run()
    assert len(script.requests) == 3 == doc["llm"]["calls"]
    assert any(e["status"] == "budget" for e in llm_events(doc))


def test_a_rule_id_carries_the_proposer_prefix_once():
    reply = {"rules": [{"id": "llm-tp-le-4", "why": "keep TP in the node", "require": "tp <= 4"}]}
    with fake_llm([("json", reply), ("json", NOTHING)]) as (url, _):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    ids = [e["id"] for e in doc["events"] if e["kind"] == "rule" and e["proposer"] == "llm"]
    assert ids == ["llm-tp-le-4"]


def test_a_verdict_says_its_status_once(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    reply = {"rules": [{"id": "tp-le-4", "why": "keep TP small", "require": "tp <= 4"}]}
    with fake_llm([("json", reply), ("json", NOTHING)]) as (url, _):
        result = CliRunner().invoke(tune_cmd, [str(job), "--exhaustive-limit", "0", "--llm-base-url", url,
                                               "--llm-timeout", "2", "--workers", "1", "--out", str(tmp_path / "run"),
                                               "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    rule = next(e for e in json.loads(result.stdout)["events"] if e["kind"] == "rule" and e["proposer"] == "llm")
    assert rule["status"] in ("adopted", "not adopted")
    assert not rule["detail"].startswith(("adopted", "not adopted"))
    report = (tmp_path / "run" / "report.md").read_text()
    assert "adopted: adopted:" not in report and "not adopted: not adopted:" not in report


def test_a_huge_reply_is_kept_as_a_capped_excerpt_with_its_size(tmp_path: Path):
    size = 600_000  # under the HTTP body cap, far over what a reply may hold
    with fake_llm([("big", size), ("json", NOTHING)]) as (url, _):
        tuner = Tuner(job_from_mapping(SMALL, "small"), settings(url))
        tuner.run()
    first = json.loads(tuner.transcripts[0])
    assert first["reply_chars"] == size
    assert len(first["reply"]) < MAX_REPLY_CHARS // 10 and "more characters" in first["reply"]
    assert len(tuner.transcripts[0]) < 100_000


def test_from_the_command_line_a_refused_rule_gets_a_second_request_carrying_it(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    with fake_llm([("json", EMPTIES), ("json", NOTHING)]) as (url, script):
        result = CliRunner().invoke(tune_cmd, [str(job), "--exhaustive-limit", "0", "--llm-base-url", url,
                                               "--llm-calls", "12", "--llm-timeout", "2", "--workers", "1",
                                               "--out", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert len(script.requests) >= 2
    assert "empties the legal set" in json.dumps(user_content(script.requests[1])["refused"])
    assert (tmp_path / "run" / "llm" / "call-002.json").is_file()


def test_two_long_rule_ids_that_differ_only_at_the_end_stay_two_rules():
    # review 49, L2: cut at 64 characters after the llm- prefix, "a"*64 and "a"*63 + "b" became one id and
    # the second rule was refused as "already in force"
    reply = {"rules": [{"id": "a" * 64, "why": "one", "require": "tp <= 4"},
                       {"id": "a" * 63 + "b", "why": "two", "require": "tp <= 2"}]}
    with fake_llm([("json", reply), ("json", NOTHING)]) as (url, _):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    rules = [e for e in doc["events"] if e["kind"] == "rule" and e["proposer"] == "llm"]
    assert len({e["id"] for e in rules}) == 2 and all(len(e["id"]) <= 64 for e in rules)
    assert not any("already in force" in e.get("reason", "") for e in rules)


def test_a_rule_that_removes_no_legal_layout_is_not_adopted():
    # review 49, L2: `tp >= 1` holds for every layout, so it changes no answer
    reply = {"rules": [{"id": "tp-ge-1", "why": "vacuous", "require": "tp >= 1"}]}
    with fake_llm([("json", reply), ("json", NOTHING)]) as (url, _):
        doc = Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    (event,) = [e for e in doc["events"] if e["kind"] == "rule" and e["proposer"] == "llm"]
    assert event["status"] == "refused" and event["reason"].startswith("removes no legal layout")
    assert doc["adopted_rules"] == [] or all(r["id"] != "llm-tp-ge-1" for r in doc["adopted_rules"])


def test_an_exhaustive_search_with_an_endpoint_says_the_llm_is_not_consulted(tmp_path: Path):
    # review 49, L4: the README's LLM example scored all 6,919 layouts and never called the endpoint, silently
    job = tmp_path / "small.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    with fake_llm([("json", NOTHING)]) as (url, script):
        result = CliRunner().invoke(tune_cmd, [str(job), "--llm-base-url", url, "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "the LLM is not consulted" in result.stderr and script.requests == []


def test_an_llm_candidate_with_a_vp_of_a_million_is_refused_by_the_split_without_building_its_schedule(
        monkeypatch):
    # review 49, H1: the reply schema allows VP up to 2^20; `{"tp":1,"pp":8,"vp":1048576}` made
    # `Space.why_not` build a 1F1B table of PP x VP x M operations (7.8 GB, MemoryError). Megatron-LM needs
    # at least one layer per virtual stage (core_v0.18.0 arguments.py), so the candidate is refused as
    # `pipeline-split` and no schedule of more chunks than layers is ever built.
    import primus.schedule.pipeline as pipeline

    built = pipeline._cached_schedule

    def guarded(pp: int, vp: int, m: int, kind: str):  # type: ignore[no-untyped-def]
        assert pp * vp <= 32, (pp, vp)  # llama3.1-8b has 32 layers
        return built(pp, vp, m, kind)

    monkeypatch.setattr(pipeline, "_cached_schedule", guarded)
    reply = {"candidates": [{"tp": 1, "pp": 8, "vp": 1 << 20}]}
    with fake_llm([("json", reply), ("json", NOTHING)]) as (url, script):
        Tuner(job_from_mapping(SMALL, "small"), settings(url)).run()
    refused = user_content(script.requests[1])["refused"]
    assert [r["reason"] for r in refused] == ["illegal: breaks pipeline-split"]
