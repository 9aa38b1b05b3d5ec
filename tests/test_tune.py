"""`primus tune` (issue 7): exhaustive certificate, guided search, and the LLM loop against a local
OpenAI-compatible server with scripted replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus.job import job_from_mapping
from primus.projection import project
from primus.solver.api import Question
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.llm import LlmSettings
from tests.helpers.fake_llm import fake_llm

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


def small_job(**extra):
    return job_from_mapping({**SMALL, **extra}, "small")


def guided_settings(url: str | None = None, **llm) -> TuneSettings:
    return TuneSettings(exhaustive_limit=0, per_round=6, stall_rounds=1, max_rounds=4,
                        llm=LlmSettings(base_url=url, timeout_s=0.5, retries=1, backoff_s=0.01, max_calls=2, **llm))


def events(doc, kind):
    return [e for e in doc["events"] if e["kind"] == kind]


def test_exhaustive_mode_matches_a_loop_over_enumerate_and_project():
    job = small_job()
    doc = Tuner(job, TuneSettings()).run()
    legal = Question(job, pins={}).legal()
    loop = max((project(job, ll.layout, method="simulate") for ll in legal),
               key=lambda p: (p.tokens_per_s_per_gpu, [-x if isinstance(x, int) else 0 for x in p.layout.key()]))
    assert doc["mode"] == "exhaustive"
    assert doc["best"]["parallel"] == loop.layout.as_parallel()
    assert doc["best"]["tokens_per_s_per_gpu"] == pytest.approx(loop.tokens_per_s_per_gpu)
    cert = doc["certificate"]
    assert cert["legal_layouts"] == len(legal) == doc["scored_count"]
    assert cert["every_legal_layout_scored"] is True


def test_the_best_is_at_least_as_fast_as_the_reference():
    job = small_job(parallel={"tp": 2, "pp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "full",
                              "sharding": "dist_opt"})
    doc = Tuner(job, TuneSettings()).run()
    assert doc["reference"]["fits"] is True and doc["reference"]["origin"] == "job"
    assert doc["best"]["tokens_per_s_per_gpu"] >= doc["reference"]["tokens_per_s_per_gpu"]
    assert doc["why"]  # the breakdown diff explains the gain


def test_an_illegal_reference_gets_its_core_and_nearest_legal_variant():
    # MBS 2 x DP 8 = GBS 16: structurally legal, so memory alone refuses it (136.67 GiB on an 80 GB H100)
    job = small_job(seq_len=8192, parallel={"tp": 1, "pp": 1, "cp": 1, "mbs": 2, "sp": False, "recompute": "none",
                                            "sharding": "dist_opt"})
    doc = Tuner(job, TuneSettings()).run()
    ref = doc["reference"]
    assert ref["fits"] is False and "memory" in ref["violated_rules"]
    assert ref["tokens_per_s_per_gpu"] is None
    near = ref["nearest_legal"]
    assert near["fits"] is True and near["changed"]
    assert doc["best"]["tokens_per_s_per_gpu"] >= near["tokens_per_s_per_gpu"]


def test_same_inputs_give_the_same_result_and_log():
    job = small_job()
    a = Tuner(job, guided_settings()).run()
    b = Tuner(job, guided_settings()).run()
    assert a == b


def test_guided_mode_without_an_endpoint_logs_that_the_llm_is_off_and_uses_hypotheses():
    doc = Tuner(small_job(), guided_settings()).run()
    assert doc["mode"] == "guided"
    llm = events(doc, "llm")
    assert llm and llm[0]["status"] == "off" and "no LLM endpoint" in llm[0]["reason"]
    assert events(doc, "hypothesis") or events(doc, "stop")


def _exhaustive_best(job):
    return Tuner(job, TuneSettings()).run()["best"]["parallel"]


def test_a_useful_llm_rule_is_adopted():
    job = small_job()
    best = _exhaustive_best(job)
    reply = {"hypotheses": [{"text": "this region is faster", "predicted_effect": "higher throughput"}],
             "rules": [{"id": "region", "why": "keep the fast region",
                        "require": f"tp == {best['tp']} and pp == {best['pp']}"}],
             "candidates": [{k: best[k] for k in ("tp", "pp", "vp", "cp", "mbs", "sp", "recompute", "sharding")}]}
    with fake_llm([("json", reply)]) as (url, script):
        doc = Tuner(job, guided_settings(url)).run()
    rules = events(doc, "rule")
    assert any(r["status"] == "adopted" and r["id"] == "llm-region" for r in rules)
    assert doc["best"]["parallel"] == best
    assert doc["adopted_rules"][0]["origin"] == "llm"
    assert script.requests and "rule_names" in script.requests[0]["messages"][1]["content"]


def test_a_rule_that_empties_the_space_is_refused_and_the_search_finishes():
    reply = {"rules": [{"id": "impossible", "require": "tp * pp > world_size"}]}
    with fake_llm([("json", reply)]) as (url, _):
        doc = Tuner(small_job(), guided_settings(url)).run()
    refused = [r for r in events(doc, "rule") if r["status"] == "refused"]
    assert refused and "empties the legal set" in refused[0]["reason"]
    assert doc["best"]["parallel"] is not None


def test_a_reply_that_is_not_json_is_rejected():
    with fake_llm([("text", "I think you should use more GPUs!")]) as (url, _):
        doc = Tuner(small_job(), guided_settings(url)).run()
    assert any(e["status"] == "rejected" and "not JSON" in e["reason"] for e in events(doc, "llm"))
    assert doc["best"]["parallel"] is not None


def test_a_rule_with_import_is_refused_by_the_parser_and_nothing_runs(tmp_path: Path):
    sentinel = tmp_path / "pwned"
    reply = {"rules": [{"id": "evil", "require": f"__import__('os').system('touch {sentinel}') == 0"}]}
    with fake_llm([("json", reply)]) as (url, _):
        doc = Tuner(small_job(), guided_settings(url)).run()
    refused = [r for r in events(doc, "rule") if r["status"] == "refused"]
    assert refused and "rule parser" in refused[0]["reason"]
    assert not sentinel.exists()


def test_a_timeout_is_retried_then_falls_back_to_the_hypothesis_generator():
    with fake_llm([("sleep", 1.5), ("sleep", 1.5)]) as (url, _):
        doc = Tuner(small_job(), guided_settings(url)).run()
    failed = [e for e in events(doc, "llm") if e["status"] == "failed"]
    assert failed and "timeout" in failed[0]["reason"] and "hypothesis" in failed[0]["fallback"]
    assert doc["best"]["parallel"] is not None


def test_a_server_error_is_retried_then_falls_back():
    with fake_llm([("status", 500), ("status", 500)]) as (url, script):
        doc = Tuner(small_job(), guided_settings(url)).run()
    failed = [e for e in events(doc, "llm") if e["status"] == "failed"]
    assert failed and "HTTP 500" in failed[0]["reason"]
    assert len(script.requests) >= 2  # retried
    assert doc["best"]["parallel"] is not None


def test_cli_writes_the_run_directory_and_prints_json(run_cli, write_job, tmp_path):
    out = tmp_path / "run"
    code, stdout, _ = run_cli("tune", write_job(SMALL), "--llm", "none", "--out", str(out), "--format", "json")
    assert code == 0
    doc = json.loads(stdout)
    for key in ("legal_count", "scored_count", "best", "reference", "top", "log"):
        assert key in doc
    assert doc["best"]["fits"] is True and doc["best"]["violated_rules"] == []
    assert (out / "result.json").exists() and (out / "audit.jsonl").exists()
    lines = (out / "audit.jsonl").read_text().splitlines()
    assert len(lines) >= doc["scored_count"]
    assert (out / "inputs" / "SHA256SUMS").exists()


def test_precision_changes_only_when_allowed(run_cli, write_job, tmp_path):
    path = write_job({**SMALL, "hardware": "h100-80gb"})
    _, out, _ = run_cli("tune", path, "--llm", "none", "--out", str(tmp_path / "a"), "--format", "json")
    assert json.loads(out)["job"]["precision"] == "bf16" and "allowed_changes" not in json.loads(out)
    code, out, _ = run_cli("tune", path, "--llm", "none", "--allow", "precision", "--out", str(tmp_path / "b"),
                           "--format", "json")
    assert code == 0
    doc = json.loads(out)
    tried = {p["precision"]: p["tokens_per_s_per_gpu"] for p in doc["allowed_changes"]["precision"]["per_precision"]}
    assert set(tried) == {"bf16", "fp8"}
    assert doc["job"]["precision"] == doc["allowed_changes"]["precision"]["chosen"] == max(tried, key=tried.get)
    assert run_cli("audit", "verify", str(tmp_path / "b"))[0] == 0


def test_an_allowed_precision_is_tried_with_the_stacks_settings_for_it(run_cli, write_job, tmp_path):
    # Megatron-Bridge's FP8 recipes keep GEMM weights only in FP8 (fp8_param_gather, stacks/megatron-bridge.yaml):
    # the fp8 trial of a bf16 job file is the job file written at fp8, the same legal set (3,345 layouts for
    # Llama 3.1 70B on 32 H100; on 16 none fits: the stack's bf16 main gradients reach the optimizer as an fp32
    # copy at the step, the distributed optimizer's and Megatron-FSDP's alike)
    job = {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096, "global_batch_size": 16,
           "stack": "megatron-bridge@26.06"}
    _, out, _ = run_cli("tune", write_job(job), "--llm", "none", "--allow", "precision", "--out",
                        str(tmp_path / "a"), "--format", "json")
    tried = {p["precision"]: p for p in json.loads(out)["allowed_changes"]["precision"]["per_precision"]}
    _, out, _ = run_cli("tune", write_job({**job, "precision": "fp8"}), "--llm", "none", "--out",
                        str(tmp_path / "b"), "--format", "json")
    as_written = json.loads(out)
    assert tried["fp8"]["legal_count"] == as_written["legal_count"] == 3_345
    assert tried["fp8"]["tokens_per_s_per_gpu"] == as_written["best"]["tokens_per_s_per_gpu"]


def test_stack_option_replaces_the_files_stack_and_the_run_records_it(run_cli, write_job, tmp_path):
    # --stack NAME[@RELEASE] means what it means on every command that reads a job: the file's `stack:`
    # is replaced; torchtitan shards with FSDP only, so every layout tune ranks is FSDP
    path = write_job({**SMALL, "stack": "megatron-lm"})
    out = tmp_path / "tt"
    code, stdout, _ = run_cli("tune", path, "--stack", "torchtitan@2024.12", "--llm", "none", "--out", str(out),
                              "--format", "json")
    assert code == 0
    doc = json.loads(stdout)
    assert doc["job"]["stack"] == "torchtitan@2024.12"
    assert doc["assumptions"][0].startswith("stack torchtitan@2024.12")
    assert {t["parallel"]["sharding"] for t in doc["top"]} == {"fsdp"}
    assert "stack: torchtitan@2024.12" in (out / "inputs" / "job.yaml").read_text()
    assert "stack torchtitan@2024.12" in (out / "report.md").read_text()
    assert run_cli("audit", "verify", str(out))[0] == 0


def test_an_unknown_stack_option_is_one_line_and_exit_2(run_cli, write_job, tmp_path):
    code, stdout, stderr = run_cli("tune", write_job(SMALL), "--stack", "maxtxt", "--llm", "none",
                                   "--out", str(tmp_path / "x"))
    assert code == 2 and stdout == "" and len(stderr.strip().splitlines()) == 1 and "maxtext" in stderr
