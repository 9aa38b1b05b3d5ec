"""Checkpointing and `primus tune --resume DIR` (issue 9): a run interrupted after N candidates leaves no
report (only its checkpoint), and resuming it scores only what the checkpoint lacks, asks the LLM
nothing it already asked, and writes the same result, audit log and report as an uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.tune_cmd import tune_cmd
from primus.errors import InputError
from primus.job import job_from_mapping
from primus.report.audit import Checkpoint, partial_dir
from primus.tuning import agent
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.llm import LlmSettings
from primus.tuning.space import TuneSpace
from tests.helpers.fake_llm import fake_llm
from tests.test_report_files import JOB

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}
REPORT_FILES = ("result.json", "audit.jsonl", "report.html", "report.md", "charts/scatter.svg",
                "charts/progress.svg", "inputs/SHA256SUMS")


class Interrupted(KeyboardInterrupt):
    """What a Ctrl-C (or a kill) after N candidates looks like to the tuner."""


def interrupt_after(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Test hook: the checkpoint raises once it has written n candidates."""
    original = Checkpoint.append

    def append(self: Checkpoint, entry: dict, line: str | None = None) -> None:
        original(self, entry, line)
        if entry["seq"] + 1 >= n:
            raise Interrupted()

    monkeypatch.setattr(Checkpoint, "append", append)


def count_scoring(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = TuneSpace.score

    def score(self: TuneSpace, i: int):  # type: ignore[no-untyped-def]
        calls.append(i)
        return original(self, i)

    monkeypatch.setattr(TuneSpace, "score", score)
    return calls


def tune(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.chdir(cwd)  # the same relative --out in both runs: result.json's "log" path is equal
    llm = [] if "--resume" in args else ["--llm", "none"]  # a resumed run takes its options from the checkpoint
    result = CliRunner().invoke(tune_cmd, [*args, *llm, "--workers", "1"], catch_exceptions=False)
    return result.exit_code


@pytest.fixture(scope="module")
def job_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("job") / "job.yaml"
    path.write_text(yaml.safe_dump(JOB, sort_keys=False))
    return path


def test_an_interrupted_run_resumes_to_the_same_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       job_file: Path):
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    clean.mkdir()
    broken.mkdir()
    assert tune(clean, monkeypatch, str(job_file), "--out", "run") == 0
    total = len((clean / "run" / "audit.jsonl").read_text().splitlines())

    with monkeypatch.context() as m:
        interrupt_after(m, 300)
        assert tune(broken, monkeypatch, str(job_file), "--out", "run") == 130
    assert not (broken / "run").exists()  # a killed run never leaves half a report
    partial = broken / "run.partial"
    recorded = len((partial / "audit.jsonl").read_text().splitlines())
    assert 300 <= recorded < total

    with monkeypatch.context() as m:
        scored = count_scoring(m)
        assert tune(broken, monkeypatch, "--resume", "run") == 0
    legal_recorded = sum(1 for line in (partial.with_name("run") / "audit.jsonl").read_text().splitlines()[:recorded]
                         if json.loads(line)["legal"])
    doc = json.loads((broken / "run" / "result.json").read_text())
    assert len(scored) == doc["scored_count"] - legal_recorded  # nothing scored twice
    assert not partial.exists()
    for name in REPORT_FILES:
        assert (broken / "run" / name).read_bytes() == (clean / "run" / name).read_bytes(), name


def test_a_torn_last_line_is_dropped_and_rescored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job_file: Path):
    with monkeypatch.context() as m:
        interrupt_after(m, 120)
        assert tune(tmp_path, monkeypatch, str(job_file), "--out", "run") == 130
    audit = tmp_path / "run.partial" / "audit.jsonl"
    audit.write_bytes(audit.read_bytes() + b'{"seq":120,"legal":tr')  # a write cut short by a kill
    assert tune(tmp_path, monkeypatch, "--resume", "run") == 0
    lines = (tmp_path / "run" / "audit.jsonl").read_text().splitlines()
    assert [json.loads(x)["seq"] for x in lines] == list(range(len(lines)))


def test_resume_refuses_changed_inputs_options_or_nothing_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(tune_cmd, ["--resume", "run"], catch_exceptions=False)
    assert result.exit_code == 2 and "no interrupted run to resume" in result.stderr
    with monkeypatch.context() as m:
        interrupt_after(m, 50)
        assert tune(tmp_path, monkeypatch, str(job), "--out", "run") == 130
    result = runner.invoke(tune_cmd, ["--resume", "run", "--rule", "tp == 1"], catch_exceptions=False)
    assert result.exit_code == 2 and "drop --rule" in result.stderr
    job.write_text(yaml.safe_dump({**JOB, "global_batch_size": 16}, sort_keys=False))
    result = runner.invoke(tune_cmd, ["--resume", "run"], catch_exceptions=False)
    assert result.exit_code == 2 and "inputs changed since the interrupted run (job.yaml)" in result.stderr
    assert partial_dir(tmp_path / "run").exists()  # refused, not discarded


def test_parallel_block_scoring_is_checkpointed_and_matches_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    job = job_from_mapping(JOB, "tiny")
    serial = Tuner(job, TuneSettings(workers=1))
    doc_serial = serial.run()
    monkeypatch.setattr(agent, "PARALLEL_MIN", 10)
    monkeypatch.setattr(agent, "CHECKPOINT_BLOCK", 64)
    par = Tuner(job, TuneSettings(workers=2))
    ckpt = Checkpoint.start(tmp_path / "run", {})
    par.attach(ckpt)
    flushed: list[int] = []
    monkeypatch.setattr(Checkpoint, "flush", lambda self: flushed.append(len(par.log.entries)))
    doc_par = par.run()
    ckpt.close()
    assert doc_par == doc_serial and par.log.entries == serial.log.entries
    assert len(flushed) >= doc_serial["scored_count"] // 64  # one flush per block at least
    on_disk = [json.loads(x) for x in (tmp_path / "run.partial" / "audit.jsonl").read_text().splitlines()]
    assert on_disk == json.loads(json.dumps(serial.log.entries))


def _guided(url: str | None) -> TuneSettings:
    return TuneSettings(exhaustive_limit=0, per_round=6, stall_rounds=1, max_rounds=4,
                        llm=LlmSettings(base_url=url, timeout_s=2, retries=0, max_calls=2))


def test_a_guided_run_with_an_llm_resumes_without_asking_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    job = job_from_mapping(SMALL, "small")
    reply = {"hypotheses": [{"text": "deeper pipelines free memory", "predicted_effect": "larger mbs fits"}],
             "rules": [{"id": "pp2", "why": "try", "require": "pp == 2"}],
             "candidates": [{"tp": 1, "pp": 2, "mbs": 2, "recompute": "none", "sharding": "dist_opt"}]}
    script = [("json", reply), ("json", {"hypotheses": []})]
    with fake_llm(list(script)) as (url, _):
        clean = Tuner(job, _guided(url))
        ckpt = Checkpoint.start(tmp_path / "clean", {})
        clean.attach(ckpt)
        doc_clean = clean.run()
    assert doc_clean["llm"]["calls"] >= 1
    n_calls = doc_clean["llm"]["calls"]
    total = len(clean.log.entries)
    with fake_llm(list(script)) as (url, server):
        first = Tuner(job, _guided(url))
        ckpt = Checkpoint.start(tmp_path / "broken", {})
        with monkeypatch.context() as m:
            interrupt_after(m, total - 5)  # after the LLM was asked
            first.attach(ckpt)
            with pytest.raises(Interrupted):
                first.run()
        ckpt.close()
        asked = len(server.requests)
        assert asked == n_calls
        resumed = Tuner(job, _guided(url))
        again = Checkpoint.reopen(tmp_path / "broken")
        assert len(again.llm_calls) == n_calls
        resumed.attach(again)
        doc = resumed.run()
        again.close()
        assert len(server.requests) == asked  # every reply came from the checkpoint
    assert doc == doc_clean
    assert resumed.log.entries == clean.log.entries
    assert resumed.transcripts == clean.transcripts
    on_disk = [json.loads(x) for x in (tmp_path / "broken.partial" / "audit.jsonl").read_text().splitlines()]
    assert on_disk == json.loads(json.dumps(clean.log.entries))


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("tokens_per_s_per_gpu", "fast", "tokens_per_s_per_gpu 'fast' is not a positive number"),
    ("tokens_per_s_per_gpu", -1e308, "tokens_per_s_per_gpu -1e+308 is not a positive number"),
    ("peak_bytes", None, "peak_bytes None is not a byte count"),
    ("breakdown", {"gemm": "x"}, "breakdown 'gemm' 'x' is not a number of seconds"),
])
def test_a_checkpoint_score_tune_cannot_have_written_is_refused_before_the_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job_file: Path, field: str, value: object, reason: str):
    # a resumed run reuses the checkpoint's scores unscored: a string there was a TypeError traceback in the
    # ranking, a null one after the whole search, and -1e308 a sealed report that failed its own audit verify
    with monkeypatch.context() as m:
        interrupt_after(m, 60)
        assert tune(tmp_path, monkeypatch, str(job_file), "--out", "run") == 130
    audit = tmp_path / "run.partial" / "audit.jsonl"
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    first = next(e for e in lines if e["legal"])
    first[field] = value
    audit.write_text("".join(json.dumps(e) + "\n" for e in lines))
    result = CliRunner().invoke(tune_cmd, ["--resume", "run", "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 2 and not (tmp_path / "run").exists()
    assert result.stderr.strip().splitlines()[-1] == (f"primus: {audit.resolve()}: seq {first['seq']}: {reason}: not a "
                                                      "score primus tune writes; start the run afresh")


GOOD_CALL = {"messages": [{"role": "user", "content": "x"}], "text": "{}", "error": None, "tokens": 150,
             "attempts": 1, "fault": None, "chars": 2}


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("tokens", "abc", "tokens is 'abc', not what tune writes"),
    ("tokens", [1], "tokens is [1], not what tune writes"),
    ("text", 12345, "text is 12345, not what tune writes"),
    ("text", {"a": 1}, "text is {'a': 1}, not what tune writes"),
    ("chars", -3, "chars is -3, not what tune writes"),
    ("messages", [["user", "x"]], "messages is not a list of role/content pairs"),
    ("fault", "HTTP 500", "fault is 'HTTP 500', not what tune writes"),
])
def test_a_hand_edited_llm_call_in_a_checkpoint_is_refused_on_resume(tmp_path: Path, field: str, value: object,
                                                                      reason: str):
    # a resumed run answers its LLM calls from llm.jsonl: a string for tokens was a ValueError traceback
    ckpt = Checkpoint.start(tmp_path / "run", {})
    ckpt.close()
    llm = tmp_path / "run.partial" / "llm.jsonl"
    llm.write_text(json.dumps(GOOD_CALL) + "\n" + json.dumps({**GOOD_CALL, field: value}) + "\n")
    with pytest.raises(InputError) as err:
        Checkpoint.reopen(tmp_path / "run")
    assert err.value.where == str(llm) and err.value.field == "line 2" and err.value.reason == reason


def test_a_checkpointed_failed_call_with_its_fault_is_resumed(tmp_path: Path):
    # review of the checkpoint check: a failed call's fault is the dict CallFault.to_json writes (kind, detail,
    # body excerpt); refusing it made every run that met one HTTP 500 impossible to resume
    ckpt = Checkpoint.start(tmp_path / "run", {})
    ckpt.close()
    fault = {"kind": "HTTP 500", "detail": "server error", "body_excerpt": "{}"}
    failed = {**GOOD_CALL, "text": None, "error": "HTTP 500: server error", "fault": fault}
    (tmp_path / "run.partial" / "llm.jsonl").write_text(json.dumps(failed) + "\n")
    assert Checkpoint.reopen(tmp_path / "run").llm_calls == [failed]
