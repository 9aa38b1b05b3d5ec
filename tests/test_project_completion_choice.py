"""`primus project` completes a job's free axes with the fastest legal layout, and "fastest" means what it
means for `primus enumerate --rank` and `primus tune`: one order (`fastest_first`), no tolerance band.

The case is the review's: examples/llama3.1-70b-mi300x-free.yaml (Llama 3.1 70B on 16 MI300X, every axis
free). A 1% tie band once made project answer TP1 PP2 VP8 CP2 (1,312 tokens/s/GPU) while calling it "the
fastest", though TP1 PP1 CP2 is projected at 1,323 and is what enumerate --rank and tune put first."""

from __future__ import annotations

from tests.conftest import EXAMPLES, as_json

FREE = str(EXAMPLES / "llama3.1-70b-mi300x-free.yaml")


def test_project_completes_with_the_layout_enumerate_rank_puts_first(run_cli) -> None:
    code, out, _ = run_cli("project", FREE, "--format", "json")
    assert code == 0
    project = as_json(out)
    code, out, _ = run_cli("enumerate", FREE, "--rank", "--top", "3", "--format", "json")
    assert code == 0
    ranked = as_json(out)["layouts"]
    assert {k: project["parallel"][k] for k in ranked[0]["parallel"]} == ranked[0]["parallel"]
    assert project["tokens_per_s_per_gpu"] == ranked[0]["tokens_per_s_per_gpu"]
    assert all(project["tokens_per_s_per_gpu"] >= r["tokens_per_s_per_gpu"] for r in ranked)


def test_project_completes_with_the_layout_tune_recommends(run_cli, tmp_path) -> None:
    code, out, _ = run_cli("project", FREE, "--format", "json")
    assert code == 0
    project = as_json(out)
    code, out, _ = run_cli("tune", FREE, "--llm", "none", "--out", str(tmp_path / "t"), "--format", "json")
    assert code == 0
    best = as_json(out)["best"]
    assert {k: project["parallel"][k] for k in best["parallel"]} == best["parallel"]


def test_the_completion_line_calls_fastest_only_what_is_fastest(run_cli) -> None:
    code, out, _ = run_cli("project", FREE, "--format", "json")
    assert code == 0
    doc = as_json(out)
    assert "the fastest of 4,512 legal layout(s) that fit, by projected tokens/s/GPU" in doc["completion"]
    assert (doc["parallel"]["tp"], doc["parallel"]["pp"], doc["parallel"]["cp"]) == (1, 1, 2)
    assert round(doc["tokens_per_s_per_gpu"]) == 1323


def test_every_ranked_row_says_how_it_was_timed_and_project_re_times_a_bottleneck_row(run_cli, write_job) -> None:
    # rank times most rows by the fast path; a row with uneven stages is the busiest-stage estimate, which
    # project of the same layout replaces by the simulation (within 2%: tests/test_projection_timing.py)
    from pathlib import Path

    import yaml

    code, out, _ = run_cli("enumerate", FREE, "--rank", "--format", "json")
    rows = as_json(out)["layouts"]
    assert code == 0 and {r["timing"] for r in rows} <= {"closed_form", "bottleneck", "simulation"}
    row = next(r for r in rows[8:] if r["timing"] == "bottleneck")
    pins = {k: v for k, v in row["parallel"].items() if k != "dp"}
    pinned = {**yaml.safe_load(Path(FREE).read_text()), "parallel": pins}
    project = as_json(run_cli("project", write_job(pinned), "--format", "json")[1])
    assert project["timing"] == "simulation"
    assert abs(project["tokens_per_s_per_gpu"] / row["tokens_per_s_per_gpu"] - 1) < 0.02
