"""An LLM endpoint can fail in any way, and the search goes on (issue 20): every fault below is recorded
in that call's transcript under llm/ and as a row of the report's LLM section, counts against the call
budget, and the run ends with exit 0 and a report that `primus audit verify` accepts. Faults in a row
stop the LLM part early, and the report says so. The endpoint is a local stub (tests/helpers/fake_llm.py)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli import tune_cmd as tune_module
from primus.cli.report_cmds import audit_group
from primus.cli.tune_cmd import tune_cmd
from primus.tuning.investigate import FAULTS_TO_STOP
from primus.tuning.llm import LlmSettings
from primus.tuning.llm_http import MAX_BODY_BYTES
from tests.helpers.fake_llm import fake_llm, refused_url

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}
TIMEOUT_S = "1"  # --llm-timeout: each scripted wait outlasts it (a drip of 3 s, a hang or sleep of 5 s)


@pytest.fixture()
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """One retry after 10 ms instead of two after 1 s and 2 s: the same code path, quickly."""
    monkeypatch.setattr(tune_module, "LlmSettings", functools.partial(LlmSettings, retries=1, backoff_s=0.01))


def run_tune(tmp_path: Path, url: str, *extra: str) -> tuple[int, dict[str, Any], Path, str]:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL, sort_keys=False))
    out = tmp_path / "run"
    result = CliRunner().invoke(tune_cmd, [str(job), "--exhaustive-limit", "0", "--llm-base-url", url,
                                           "--llm-timeout", TIMEOUT_S, "--workers", "1", "--out", str(out),
                                           "--format", "json", *extra], catch_exceptions=False)
    doc = json.loads(result.stdout) if result.exit_code == 0 else {}
    return result.exit_code, doc, out, result.stderr


def failed_events(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["events"] if e["kind"] == "llm" and e["status"] == "failed"]


def audit_verify(out: Path) -> int:
    return CliRunner().invoke(audit_group, ["verify", str(out), "--workers", "1"], catch_exceptions=False).exit_code


NESTED = '{"choices": ' + "[" * 5_000 + "]" * 5_000 + "}"
FAULTS = {
    "HTTP 503": [("status", 503), ("status", 503)],
    "HTTP 401": [("status", 401)],
    "HTTP 429": [("status", 429), ("status", 429)],
    "timeout": [("sleep", 5), ("sleep", 5)],
    "stalled after headers": [("hang", 5), ("hang", 5)],
    # headers trickled one line per 50 ms for 3 s: every read is within --llm-timeout 1 s, the attempt is not
    "timeout (headers trickled)": [("drip", 3), ("drip", 3)],
    "connection reset mid-reply": [("reset", 100), ("reset", 100)],
    "body is not JSON": [("body", "<html><body><h1>502 Bad Gateway</h1></body></html>")],
    "no choices": [("body", '{"id": "x", "object": "chat.completion", "usage": {"total_tokens": 3}}')],
    "empty message": [("message", {"role": "assistant", "content": ""})],
    "reply too large": [("big", MAX_BODY_BYTES + 1)],
    "reply nested too deeply": [("body", NESTED)],
}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_each_fault_is_recorded_and_the_search_goes_on(kind: str, tmp_path: Path, fast_retries: None):
    with fake_llm(FAULTS[kind] * FAULTS_TO_STOP) as (url, script):
        code, doc, out, err = run_tune(tmp_path, url)
    assert code == 0, err
    failed = failed_events(doc)
    kind = kind.split(" (")[0]
    assert failed and failed[0]["reason"].startswith(kind)
    assert doc["llm"]["calls"] >= 1 and doc["llm"]["faults"] >= 1  # counted against the call budget
    assert len(script.requests) >= 1
    transcript = json.loads((out / "llm" / "call-001.json").read_text())
    assert transcript["reply"] is None and transcript["fault"]["kind"] == kind
    assert transcript["error"] == failed[0]["reason"]
    report = (out / "report.md").read_text()
    assert f"| LLM | LLM call 1 | failed: {kind}" in report
    assert doc["best"]["parallel"] is not None
    assert audit_verify(out) == 0


def test_a_refused_connection_is_a_fault_too(tmp_path: Path, fast_retries: None):
    code, doc, out, err = run_tune(tmp_path, refused_url())
    assert code == 0, err
    assert failed_events(doc)[0]["reason"].startswith("connection refused")
    assert json.loads((out / "llm" / "call-001.json").read_text())["fault"]["kind"] == "connection refused"
    assert "failed: connection refused" in (out / "report.md").read_text()
    assert audit_verify(out) == 0


def test_a_huge_reply_is_not_read_past_the_cap_and_its_size_is_recorded(tmp_path: Path, fast_retries: None):
    with fake_llm([("big", 3 * MAX_BODY_BYTES)] * FAULTS_TO_STOP) as (url, _):
        code, _, out, err = run_tune(tmp_path, url)
    assert code == 0, err
    fault = json.loads((out / "llm" / "call-001.json").read_text())["fault"]
    assert fault["kind"] == "reply too large" and fault["body_bytes"] > MAX_BODY_BYTES
    assert (out / "llm" / "call-001.json").stat().st_size < 200_000  # the body was not stored


def test_faults_in_a_row_stop_the_llm_part_early_and_the_report_says_so(tmp_path: Path, fast_retries: None):
    with fake_llm([("status", 500)] * 20) as (url, script):
        code, doc, out, err = run_tune(tmp_path, url, "--llm-calls", "10")
    assert code == 0, err
    assert doc["llm"]["calls"] == FAULTS_TO_STOP < 10  # stopped before the call budget was spent
    assert len(script.requests) == 2 * FAULTS_TO_STOP  # each call tried twice (one retry), no more
    stopped = [e for e in doc["events"] if e["kind"] == "llm" and e["status"] == "stopped"]
    assert len(stopped) == 1 and doc["llm"]["stopped_early"] == stopped[0]["reason"]
    report = (out / "report.md").read_text()
    assert "Stopped: the LLM part early: 2 calls in a row failed" in report
    assert audit_verify(out) == 0


def test_no_attempt_of_a_call_waits_past_the_wall_time_budget(monkeypatch: pytest.MonkeyPatch):
    # review 49, M6: a call against a stalling endpoint took 305 s of a 180 s budget, each of its three
    # attempts waiting the full --llm-timeout; an attempt now waits at most what is left of the budget
    import primus.tuning.llm as llm_module
    from primus.tuning.llm import LlmClient
    from primus.tuning.llm_http import Fault, FaultError

    clock = [1000.0]
    waits: list[float] = []

    def stalled(url: str, key: str | None, payload: dict[str, Any], timeout_s: float, max_bytes: int) -> Any:
        waits.append(timeout_s)
        clock[0] += timeout_s  # the endpoint never answers: the attempt takes its whole timeout
        raise FaultError(Fault("timeout", f"no reply within {timeout_s:g} s", retry=True))

    monkeypatch.setattr(llm_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(llm_module.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(llm_module, "chat_completion", stalled)
    client = LlmClient(LlmSettings(base_url="http://127.0.0.1:9/v1", wall_s=180.0, timeout_s=100.0, retries=2,
                                   backoff_s=1.0), started=clock[0])
    clock[0] += 50.0  # the search spent 50 s before the call
    out = client.complete([{"role": "user", "content": "x"}])
    assert out.text is None and waits == [100.0, 29.0]  # 130 s left, then 130 - 100 - 1 s of backoff
    assert clock[0] - client.started <= 180.0


@pytest.mark.parametrize("url", ["not a url", "ftp://host/v1", "http:///v1", "http://exa mple.com/v1",
                                 "http://host:port/v1", "http://a-b!.com/v1", "http://host/v1\t"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_the_search(url: str, tmp_path: Path):
    # review 49, L1: 'not a url' was retried three times per call as a connection fault
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096,
                                   "global_batch_size": 64}))
    out = tmp_path / "run"
    result = CliRunner().invoke(tune_cmd, [str(job), "--llm-base-url", url, "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.strip() == f"primus: --llm-base-url: {url!r} is not an http(s) URL with a host " \
                                    "(e.g. http://127.0.0.1:8000/v1)"


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "https://api.example-host.com/v1", "http://[::1]:8000/v1",
                                 "http://localhost/v1", "http://llm_server:8000/v1"])
def test_an_http_url_with_a_host_is_taken(url: str) -> None:
    from primus.cli.tune_cmd import _check_base_url

    _check_base_url(url, "--llm-base-url")
