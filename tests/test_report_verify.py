"""`primus audit verify DIR` (issue 9): a fresh report passes; an edited number, verdict, input or report
fails with exit 1, naming the candidate; adopted rules are replayed at the seq they were adopted. Every
file of the run is on its list (`SHA256SUMS`), and the report is compared with this primus's render
whatever version wrote it (issue 17)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.report_cmds import audit_group, report_cmd
from primus.job import job_from_mapping
from primus.parallel import parallel_text as layout_text
from primus.report.audit import Checkpoint
from primus.report.manifest import write_manifest
from primus.report.rundir import RunDir, layout_of
from primus.report.verify import verify_run
from primus.solver.check import violated_rules
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.llm import LlmSettings
from primus.tuning.output import input_texts, write_run_dir
from tests.helpers.fake_llm import fake_llm
from tests.test_report_files import tune

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


def verify(path: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(audit_group, ["verify", str(path), *extra], catch_exceptions=False)
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verify") / "run"
    code, _, err = tune(out)
    assert code == 0, err
    return out


@pytest.fixture()
def copy(fresh: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(fresh, dst)
    return dst


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "audit.jsonl").read_text().splitlines()]


def _write(path: Path, lines: list[dict]) -> None:
    (path / "audit.jsonl").write_text("".join(json.dumps(e, separators=(",", ":"), sort_keys=True) + "\n"
                                              for e in lines))


def test_a_fresh_report_verifies(fresh: Path):
    code, out = verify(fresh)
    assert code == 0, out
    assert "verified" in out and "no difference" in out


def test_json_output_lists_every_difference(copy: Path):
    lines = _lines(copy)
    edited = [e for e in lines if e["legal"]][3:6]
    for e in edited:
        e["step_time_s"] *= 2
    _write(copy, lines)
    code, out = verify(copy, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False
    assert {d["seq"] for d in doc["differences"] if d["seq"] is not None} == {e["seq"] for e in edited}


@pytest.mark.parametrize("field", ["tokens_per_s_per_gpu", "breakdown.gemm", "peak_bytes"])
def test_an_edited_number_fails_naming_the_candidate(copy: Path, field: str):
    lines = _lines(copy)
    e = next(e for e in lines[20:] if e["legal"])
    if field == "breakdown.gemm":
        e["breakdown"]["gemm"] *= 1.0001
    elif field == "peak_bytes":
        e["peak_bytes"] += 1
    else:
        e[field] = e[field] * (1 + 1e-6)
    _write(copy, lines)
    code, out = verify(copy)
    assert code == 1
    assert f"candidate seq {e['seq']} ({layout_text(e['parallel'])})" in out
    assert field.split(".")[-1] in out


def test_an_edited_verdict_fails(copy: Path):
    lines = _lines(copy)
    bad = next(e for e in lines if not e["legal"])
    bad["violated_rules"] = ["memory"]
    flipped = next(e for e in lines[10:] if e["legal"])
    for k in ("tokens_per_s_per_gpu", "step_time_s", "peak_bytes", "breakdown"):
        flipped.pop(k)
    flipped.update(legal=False, violated_rules=["memory"])
    _write(copy, lines)
    code, out = verify(copy)
    assert code == 1
    assert f"candidate seq {bad['seq']}" in out and "violated_rules recorded ['memory']" in out
    assert f"candidate seq {flipped['seq']}" in out and "recomputed legal" in out


def test_an_edited_input_fails_on_its_sha256(copy: Path):
    model = copy / "inputs" / "model.yaml"
    data = yaml.safe_load(model.read_text())
    data["num_layers"] += 1
    model.write_text(yaml.safe_dump(data, sort_keys=False))
    code, out = verify(copy)
    assert code == 1
    assert "inputs/model.yaml: sha256" in out and "nothing recomputed" in out
    assert out.count("inputs/model.yaml: sha256") == 1  # named once, though two lists hold its sha256


def test_a_corrupted_result_is_a_negative_answer_not_bad_input(copy: Path):
    # the directory is there and is a run: that its result.json no longer parses is the answer "does not verify"
    (copy / "result.json").write_text('{"job": ')
    code, out = verify(copy)
    assert code == 1
    assert "result.json: cannot be read: invalid JSON at line 1" in out


def test_an_edited_report_fails(copy: Path):
    md = copy / "report.md"
    md.write_text(md.read_text().replace("tokens/s/GPU", "tokens/s/GPU!", 1))
    code, out = verify(copy)
    assert code == 1 and "report.md differs from a fresh render" in out


def test_an_edited_best_fails(copy: Path):
    doc = json.loads((copy / "result.json").read_text())
    doc["best"]["tokens_per_s_per_gpu"] *= 1.5
    (copy / "result.json").write_text(json.dumps(doc, indent=1))
    code, out = verify(copy)
    assert code == 1 and "result.json: best tokens_per_s_per_gpu" in out


def test_a_malformed_line_is_a_difference_not_a_crash(copy: Path):
    lines = _lines(copy)
    lines[7]["parallel"]["tp"] = "eight"
    lines[9]["seq"] = 90
    next(e for e in lines[20:] if e["legal"])["tokens_per_s_per_gpu"] = "fast"
    _write(copy, lines)
    code, out = verify(copy)
    assert code == 1 and "candidate seq 7" in out and "parallel is not a layout" in out
    assert "candidate seq 9" in out and "seq recorded 90 on line 10" in out
    assert "tokens_per_s_per_gpu recorded 'fast'" in out


def test_rules_adopted_during_a_guided_search_are_replayed_at_their_seq(tmp_path: Path):
    job = job_from_mapping(SMALL, "small")
    best = Tuner(job, TuneSettings()).run()["best"]["parallel"]
    # an LLM rule that keeps the fastest region is adopted (tests/test_tune.py does the same)
    reply = {"rules": [{"id": "region", "why": "keep the fast region",
                        "require": f"tp == {best['tp']} and pp == {best['pp']}"}]}
    with fake_llm([("json", reply)]) as (url, _):
        settings = TuneSettings(exhaustive_limit=0, per_round=6, stall_rounds=1, max_rounds=4,
                                llm=LlmSettings(base_url=url, timeout_s=2, retries=0, max_calls=1))
        tuner = Tuner(job, settings)
        out = tmp_path / "guided"
        ckpt = Checkpoint.start(out, {})
        tuner.attach(ckpt)
        doc = tuner.run()
        ckpt.discard()
    adopted = [e for e in doc["events"] if e["kind"] == "rule" and e["status"] == "adopted"]
    assert adopted and all("seq" in e for e in adopted)
    write_run_dir(out, doc, tuner.log.entries, tuner.transcripts, input_texts(yaml.safe_dump(SMALL), tuner))
    assert (out / "llm" / "call-001.json").is_file()
    outcome = verify_run(out)
    assert outcome.ok, [d.line() for d in outcome.differences]
    # a candidate logged after the adoption must obey the adopted rule: pretend an earlier one came later
    lines = _lines(out)
    run = RunDir.open(out)
    final = run.question([r for _, r in run.adoptions()])
    early = next(e for e in lines[:adopted[0]["seq"]]
                 if e["legal"] and violated_rules(final, layout_of(e["parallel"])))
    _write(out, [*lines, {**early, "seq": len(lines)}])
    outcome = verify_run(out)
    assert any(d.seq == len(lines) and "recomputed illegal" in d.what and adopted[0]["id"] in d.what
               for d in outcome.differences)


# ---- every file of the run is covered, and the report is compared whatever the version (issue 17, item 2) ----

def _headline(run: Path) -> str:
    return f"{json.loads((run / 'result.json').read_text())['best']['tokens_per_s_per_gpu']:,.0f} ± "


def test_a_forged_headline_with_versions_json_deleted_fails_naming_each_file(copy: Path):
    """The review's forgery: another tokens/s/GPU in both report bodies, and versions.json deleted."""
    real = _headline(copy)
    for name in ("report.html", "report.md"):
        body = (copy / name).read_text()
        assert body.count(real) == 1, name
        (copy / name).write_text(body.replace(real, "99,999 ± "))
    (copy / "versions.json").unlink()
    code, out = verify(copy)
    assert code == 1 and "no difference" not in out
    assert "versions.json: missing" in out
    for name in ("report.html", "report.md"):
        assert f"{name}: sha256" in out
        line = next(x for x in out.splitlines() if x.strip().startswith(f"{name} differs from a fresh render"))
        assert "99,999 ± " in line and real in line  # the forged number, and the one a fresh render gives


def test_the_run_lists_every_file_it_wrote_with_its_sha256(fresh: Path):
    listed = {}
    for line in (fresh / "SHA256SUMS").read_text().splitlines():
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    present = {p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file()} - {"SHA256SUMS"}
    assert set(listed) == present
    assert {"versions.json", "result.json", "audit.jsonl", "report.html", "report.md", "inputs/SHA256SUMS"} <= present
    for rel, digest in listed.items():
        assert hashlib.sha256((fresh / rel).read_bytes()).hexdigest() == digest, rel


def test_an_edited_file_the_audit_does_not_recompute_is_named(copy: Path):
    versions = json.loads((copy / "versions.json").read_text())
    (copy / "versions.json").write_text(json.dumps({**versions, "numpy": "0.0"}))
    code, out = verify(copy)
    assert code == 1 and "versions.json: sha256" in out and "edited since the run" in out


def test_a_deleted_list_of_files_fails(copy: Path):
    (copy / "SHA256SUMS").unlink()
    code, out = verify(copy)
    assert code == 1 and "SHA256SUMS: missing" in out


def test_a_users_file_beside_the_report_is_a_note_not_a_difference(copy: Path):
    (copy / "NOTES.txt").write_text("reviewed by me\n")
    code, out = verify(copy)
    assert code == 0, out
    assert "note: NOTES.txt: not part of the run" in out


def test_an_unlisted_file_in_a_folder_the_report_reads_is_a_difference(copy: Path):
    (copy / "llm").mkdir()
    (copy / "llm" / "call-001.json").write_text("{}\n")
    code, out = verify(copy)
    assert code == 1 and "llm/call-001.json: not part of the run" in out
    assert "report.md differs" in out  # the report lists the transcripts it finds


def _as_written_by(run: Path, version: str) -> None:
    """What a run directory from another primus version looks like (its list of files consistent)."""
    versions = json.loads((run / "versions.json").read_text())
    (run / "versions.json").write_text(json.dumps({**versions, "primus": version}, indent=1, sort_keys=True) + "\n")
    write_manifest(run)


def test_a_run_from_another_version_is_rendered_with_this_one_and_compared(copy: Path):
    _as_written_by(copy, "0.0.1")
    code, out = verify(copy)
    assert code == 1
    assert "report.md differs from what primus" in out and "written by primus 0.0.1" in out
    assert "`primus report DIR` re-renders it" in out
    rendered = CliRunner().invoke(report_cmd, [str(copy)], catch_exceptions=False)
    assert rendered.exit_code == 0
    code, out = verify(copy)
    assert code == 0, out
    assert "written by primus 0.0.1" in out


def test_a_list_naming_a_file_outside_the_directory_is_a_difference(copy: Path):
    outside = copy.parent / "outside.txt"
    outside.write_text("not the run's\n")
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    with (copy / "SHA256SUMS").open("a") as fh:
        fh.write(f"{digest}  ../outside.txt\n")
    code, out = verify(copy)
    n = len((copy / "SHA256SUMS").read_text().splitlines())
    assert code == 1 and f"SHA256SUMS line {n}: not '<sha256>  <relative path>'" in out
