"""`primus audit verify` re-runs a guided search and compares its candidates with the log (review of the tune
path, item 4): a log cut short, or a search steered past a layout, used to verify cleanly, because every
remaining line and claim was consistent with itself. The case: Llama 3.1 8B on 1 node of H100, sequence 4096,
global batch 16, guided (--exhaustive-limit 0), LLM off; each forgery is resealed (result.json's counts fixed,
the report re-rendered, both lists of sums rewritten), as someone hiding the edit would make it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.report.manifest import write_manifest
from primus.report.render import write_report

JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


@pytest.fixture(scope="module")
def guided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("guided")
    job = root / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    out = root / "run"
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--exhaustive-limit", "0", "--out", str(out),
                                      "--format", "json", "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["mode"] == "guided"
    return out


def verify(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["audit", "verify", str(path), "--workers", "1"], catch_exceptions=False)
    return result.exit_code, result.stdout


def resealed(run: Path, tmp_path: Path, keep: int) -> Path:
    """A copy of `run` whose log keeps its first `keep` candidates, with result.json made to agree."""
    copy = tmp_path / "forged"
    shutil.copytree(run, copy)
    lines = (copy / "audit.jsonl").read_text().splitlines()[:keep]
    (copy / "audit.jsonl").write_text("".join(line + "\n" for line in lines))
    doc = json.loads((copy / "result.json").read_text())
    doc["scored_count"] = sum(1 for line in lines if json.loads(line)["legal"])
    for event in doc["events"]:
        event["seq"] = min(event["seq"], keep)
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_report(copy)
    write_manifest(copy)
    return copy


def test_an_untouched_guided_run_verifies(guided: Path) -> None:
    code, out = verify(guided)
    assert code == 0, out
    assert "re-running the guided search" not in out  # progress goes to stderr
    assert "no difference" in out


def test_a_guided_log_cut_short_fails(guided: Path, tmp_path: Path) -> None:
    total = len((guided / "audit.jsonl").read_text().splitlines())
    code, out = verify(resealed(guided, tmp_path, total - 5))
    assert code == 1
    assert f"audit.jsonl: {total - 5:,} candidates logged, but the guided search re-run considers {total:,}" in out


def test_a_guided_log_with_a_candidate_swapped_fails_at_its_seq(guided: Path, tmp_path: Path) -> None:
    copy = resealed(guided, tmp_path, len((guided / "audit.jsonl").read_text().splitlines()))
    lines = [json.loads(x) for x in (copy / "audit.jsonl").read_text().splitlines()]
    a, b = [i for i, e in enumerate(lines) if e["legal"]][-2:]
    lines[a], lines[b] = {**lines[b], "seq": a}, {**lines[a], "seq": b}  # the search's order changed
    (copy / "audit.jsonl").write_text("".join(json.dumps(e, separators=(",", ":"), sort_keys=True) + "\n"
                                              for e in lines))
    write_report(copy)
    write_manifest(copy)
    code, out = verify(copy)
    assert code == 1 and f"candidate seq {a} (" in out and "): the guided search re-run proposes TP" in out


def test_a_guided_run_without_its_search_settings_cannot_be_re_run(guided: Path, tmp_path: Path) -> None:
    copy = resealed(guided, tmp_path, len((guided / "audit.jsonl").read_text().splitlines()))
    doc = json.loads((copy / "result.json").read_text())
    assert doc["search"] == {"per_round": 200, "stall_rounds": 2, "max_rounds": 12}  # TuneSettings' defaults
    del doc["search"]
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_report(copy)
    write_manifest(copy)
    code, out = verify(copy)
    assert code == 1 and "result.json: search recorded None, not the guided search's settings" in out


def test_a_guided_run_with_more_llm_calls_than_the_default_budget_verifies(tmp_path: Path) -> None:
    # a second review: the replay stopped at LlmSettings' default of 4 calls while the run, tuned with
    # --llm-calls 6, made 5, so verify called the untouched log forged from the fifth call on; the record is the
    # replay's only budget now
    from tests.helpers.fake_llm import fake_llm

    replies = [("json", {"candidates": [{"tp": t, "pp": 1}]}) for t in (3, 5, 7, 9)]
    replies += [("json", {"candidates": [{"tp": 8, "pp": 1, "mbs": 1, "recompute": "full", "sharding": "none"},
                                         {"tp": 4, "pp": 2, "mbs": 2, "recompute": "full", "sharding": "none"}]}),
                ("json", {"candidates": [{"tp": 2, "pp": 4, "mbs": 1, "recompute": "full", "sharding": "none"}]})]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    out = tmp_path / "run"
    with fake_llm(replies) as (url, _):
        result = CliRunner().invoke(cli, ["tune", str(job), "--llm-base-url", url, "--llm-calls", "6",
                                          "--exhaustive-limit", "0", "--out", str(out), "--format", "json",
                                          "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["llm"]["calls"] > 4
    code, text = verify(out)
    assert code == 0, text


def _reseal(copy: Path, doc: dict) -> None:  # type: ignore[type-arg]
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_report(copy)
    write_manifest(copy)


#: a rule that keeps a slower layout and drops the true best (review of the audit: a forged adoption)
FORGED = {"round": 0, "kind": "rule", "proposer": "hypothesis", "id": "hypothesis-x",
          "require": "cp > 1 or mbs != 2 or tp > 1 or pp > 1", "status": "adopted", "detail": "x"}


def test_a_rule_written_into_a_guided_runs_events_as_adopted_fails(guided: Path, tmp_path: Path) -> None:
    copy = tmp_path / "forged"
    shutil.copytree(guided, copy)
    doc = json.loads((copy / "result.json").read_text())
    seq = len((copy / "audit.jsonl").read_text().splitlines())
    doc["events"].append({**FORGED, "seq": seq})
    doc["adopted_rules"] = [{"id": FORGED["id"], "require": FORGED["require"], "origin": "llm"}]
    _reseal(copy, doc)
    code, out = verify(copy)
    assert code == 1
    assert (f"result.json: events record the adopted rules 'hypothesis-x' ({FORGED['require']}) from seq {seq}, "
            "but the guided search re-run adopts none") in out


def test_an_exhaustive_run_with_an_adopted_rule_in_its_events_fails(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    run = tmp_path / "run"
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--out", str(run), "--workers", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    doc = json.loads((run / "result.json").read_text())
    assert doc["mode"] == "exhaustive"
    doc["events"].append({**FORGED, "seq": doc["scored_count"]})
    _reseal(run, doc)
    code, out = verify(run)
    assert code == 1
    assert ("result.json: events record 1 adopted rule(s) ('hypothesis-x'), but a run in mode 'exhaustive' "
            "scores every legal layout and adopts none") in out
    assert "result.json: adopted_rules recorded [], but its events adopt" in out


@pytest.mark.parametrize("events, says", [
    ("x", "events: is 'x', not a list"),
    ([5], "events[0]: is 5, not an event"),
    ([{**FORGED, "seq": "abc"}], "events[0].seq: is 'abc', not a candidate's seq"),
    ([{k: v for k, v in {**FORGED, "seq": 3}.items() if k != "require"}],
     "events[0]: an adopted rule without its id and require text"),
    ([{**FORGED, "seq": 3, "require": "tp ** 2"}], "events[0].require: '**' (power) is not allowed"),
    ([{**FORGED, "seq": 3, "require": "nosuch > 1"}], "result.json (events: adopted rule 'hypothesis-x')"),
])
def test_a_malformed_event_is_a_difference_not_a_traceback(guided: Path, tmp_path: Path, events: object,
                                                          says: str) -> None:
    copy = tmp_path / "bad"
    shutil.copytree(guided, copy)
    doc = json.loads((copy / "result.json").read_text())
    doc["events"] = events
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_manifest(copy)
    code, out = verify(copy)
    assert code == 1 and says in out, out


def test_a_run_that_refused_an_oversized_reply_verifies(tmp_path: Path) -> None:
    # the transcript keeps the first 2,000 characters and reply_chars; the replay refuses it for its size
    # again, so the next prompt (which tells the LLM why) is the run's
    from tests.helpers.fake_llm import fake_llm

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    out = tmp_path / "run"
    replies = [("big", 600_000), ("json", {"rules": [{"id": "a", "require": "tp <= 4"}]}), ("json", {})]
    with fake_llm(replies) as (url, _):
        result = CliRunner().invoke(cli, ["tune", str(job), "--llm-base-url", url, "--llm-calls", "20",
                                          "--exhaustive-limit", "0", "--out", str(out), "--format", "json",
                                          "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads((out / "llm" / "call-001.json").read_text())["reply_chars"] > 64_000
    code, text = verify(out)
    assert code == 0, text
