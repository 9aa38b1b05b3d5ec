"""The report directory of `primus tune --out DIR` (issue 9): report.html (self-contained), report.md
with the same sections, charts, audit log, inputs and versions; `primus report DIR` re-renders it
byte for byte."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.report_cmds import report_cmd
from primus.cli.tune_cmd import tune_cmd

# A small job whose best layout is pipelined (the user rule), so the timeline has several ranks.
JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 4, "seq_len": 4096, "global_batch_size": 8}
CHARTS = ("memory", "timeline", "scatter", "progress")


def tune(out: Path, *extra: str, job: dict | None = None) -> tuple[int, str, str]:
    path = out.parent / f"{out.name}-job.yaml"
    path.write_text(yaml.safe_dump(job or JOB, sort_keys=False))
    result = CliRunner().invoke(tune_cmd, [str(path), "--llm", "none", "--out", str(out), "--format", "json",
                                           "--rule", "pp >= 2", *extra], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "run"
    code, _, err = tune(out)
    assert code == 0, err
    return out


def test_tune_writes_the_report_directory(run_dir: Path):
    for name in ("report.html", "report.md", "result.json", "audit.jsonl", "versions.json", "inputs/SHA256SUMS",
                 *(f"inputs/{n}" for n in ("job.yaml", "model.yaml", "hardware.yaml", "rules.yaml", "profile.yaml")),
                 *(f"charts/{c}.svg" for c in CHARTS)):
        assert (run_dir / name).is_file(), name
    # atomic: no temporary directory, old copy or checkpoint is left beside it
    beside = sorted(p.name for p in run_dir.parent.iterdir() if p.name.startswith((".run", "run")))
    assert beside == ["run", "run-job.yaml"]
    versions = json.loads((run_dir / "versions.json").read_text())
    assert {"primus", "ortools", "numpy", "jinja2"} <= set(versions)


def test_the_audit_log_has_one_line_per_candidate(run_dir: Path):
    lines = [json.loads(line) for line in (run_dir / "audit.jsonl").read_text().splitlines()]
    doc = json.loads((run_dir / "result.json").read_text())
    assert [e["seq"] for e in lines] == list(range(len(lines)))
    legal = [e for e in lines if e["legal"]]
    assert len(legal) == doc["scored_count"]
    for e in legal:
        assert {"parallel", "proposer", "tokens_per_s_per_gpu", "step_time_s", "peak_bytes", "breakdown"} <= set(e)
    for e in lines:
        if not e["legal"]:
            assert e["violated_rules"]
    # the user's rule is recorded with who added it
    rules = yaml.safe_load((run_dir / "inputs" / "rules.yaml").read_text())["rules"]
    assert {"id": "inline-1", "origin": "inline", "require": "pp >= 2"}.items() <= next(
        r for r in rules if r["id"] == "inline-1").items()


def test_report_html_is_self_contained(run_dir: Path):
    text = (run_dir / "report.html").read_text()
    assert "<script" not in text.lower() and "<link" not in text.lower() and "<img" not in text.lower()
    assert not re.search(r"\b(src|href)\s*=", text) and "url(" not in text and "@import" not in text
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}
    assert text.count("<svg") == len(CHARTS)
    assert "@media print" in text


def _html_headings(text: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", m.group(2))).strip()
            for m in re.finditer(r"<h([1-3])[^>]*>(.*?)</h\1>", text, re.S)]


def _md_headings(text: str) -> list[str]:
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,3} ", line):
            out.append(html.unescape(line.split(" ", 1)[1].replace("\\", "")).strip())
    return out


def test_markdown_has_the_same_sections_and_numbers_as_the_html(run_dir: Path):
    page = (run_dir / "report.html").read_text()
    md = (run_dir / "report.md").read_text()
    heads = _html_headings(page)
    assert heads == _md_headings(md)
    for section in ("The question", "The answer", "Proof of fit", "Pipeline timeline", "Runner-ups", "Why this layout",
                    "Rules that shaped the space", "Hypotheses tried", "The search", "Audit trail"):
        assert section in heads
    doc = json.loads((run_dir / "result.json").read_text())
    best = f"{doc['best']['tokens_per_s_per_gpu']:,.0f}"
    assert best in page and best in md
    for c in CHARTS:
        assert f"](charts/{c}.svg)" in md
    assert f"{doc['legal_count']:,} legal layouts" in md and f"{doc['legal_count']:,} legal layouts" in page


def test_primus_report_re_renders_identically(run_dir: Path, tmp_path: Path):
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    before = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    for c in CHARTS:
        (copy / "charts" / f"{c}.svg").unlink()
    (copy / "report.html").write_text("stale")
    result = CliRunner().invoke(report_cmd, [str(copy)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    after = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert after == before


def test_primus_report_refuses_a_directory_that_is_not_a_run(tmp_path: Path):
    result = CliRunner().invoke(report_cmd, [str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 2
    assert "not a run directory" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_rules_and_their_origins_are_in_the_report(run_dir: Path):
    md = (run_dir / "report.md").read_text()
    assert "| inline-1 | `pp >= 2` | hard | user (--rule) |" in md
    assert "| tp-in-scaleup |" in md and "built-in" in md
