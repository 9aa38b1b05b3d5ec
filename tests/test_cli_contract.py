"""The CLI contract scripts rely on (issue 2): documents on stdout, one-line errors, exit statuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO

HF = REPO / "tests" / "data" / "hf"


def test_models_show_json_gives_llama31_70b_total_exactly(run_cli):
    # 70,553,706,496: Hugging Face safetensors index of meta-llama/Llama-3.1-70B (total_size / 2 bytes)
    code, out, _ = run_cli("models", "show", "llama3.1-70b", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["total_params"] == 70553706496
    assert isinstance(doc["active_params"], int)


def test_console_script_prints_total_params():
    # the script pip installed beside this interpreter (a venv need not be activated)
    script = Path(sys.executable).parent / "primus"
    exe = str(script) if script.exists() else shutil.which("primus") or "primus"
    out = subprocess.run([exe, "models", "show", "llama3.1-70b", "--format", "json"], capture_output=True,
                         text=True, check=True).stdout
    assert '"total_params": 70553706496' in out


def test_models_show_reads_an_hf_config_it_has_never_seen(run_cli):
    # Mixtral 8x7B: 46,702,792,704 (HF safetensors index of mistralai/Mixtral-8x7B-v0.1); active 12.9B
    code, out, _ = run_cli("models", "show", str(HF / "mixtral-Mixtral-8x7B-v0.1" / "config.json"), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["total_params"] == 46702792704
    assert round(doc["active_params"] / 1e9, 1) == 12.9


def test_models_list_csv_is_only_csv(run_cli):
    code, out, _ = run_cli("models", "list", "--format", "csv")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("name,total_params,active_params")
    assert any(line.startswith("llama3.1-70b,70553706496,") for line in lines)


def test_hardware_show_json_names_sources(run_cli):
    code, out, _ = run_cli("hardware", "show", "mi300x", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["accelerator"]["peak_tflops"]["bf16"] == pytest.approx(1307.4)
    assert doc["reserves"]["runtime_context_bytes"]["source"]


def test_job_show_resolves_model_hardware_and_gpu_count(run_cli):
    code, out, _ = run_cli("job", "show", str(EXAMPLES / "llama3.1-70b-mi300x.yaml"), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["model"], doc["hardware"], doc["num_gpus"], doc["precision"]) == ("llama3.1-70b", "mi300x", 16, "bf16")
    assert doc["pinned"]["tp"] == 8


def test_schema_job_is_a_json_schema_with_the_contract_keys(run_cli):
    code, out, _ = run_cli("schema", "job")
    assert code == 0
    props = json.loads(out)["properties"]
    for key in ("model", "hardware", "nodes", "gpus", "seq_len", "global_batch_size", "precision", "parallel"):
        assert key in props


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert code == 0 and "primus" in out


BASE = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64}

BAD_JOBS = {
    "typo key": ({**BASE, "seq_lenn": 1}, "did you mean 'seq_len'"),
    "typo in parallel": ({**BASE, "parallel": {"tpp": 2}}, "did you mean 'tp'"),
    "zero tp": ({**BASE, "parallel": {"tp": 0}}, "parallel.tp"),
    "string for int": ({**BASE, "seq_len": "4096"}, "seq_len"),
    "bool for int": ({**BASE, "global_batch_size": True}, "global_batch_size"),
    "float for int": ({**BASE, "nodes": 1.5}, "nodes"),
    "negative": ({**BASE, "seq_len": -5}, "seq_len"),
    "huge": ({**BASE, "seq_len": 10**12}, "seq_len"),
    "unknown model": ({**BASE, "model": "llama9-1t"}, "unknown model"),
    "unknown hardware": ({**BASE, "hardware": "h100-80"}, "did you mean 'h100-80gb'"),
    "nodes and gpus": ({**BASE, "gpus": 8}, "exactly one of nodes and gpus"),
    "bad precision": ({**BASE, "precision": "int4"}, "precision"),
    "bad recompute": ({**BASE, "parallel": {"recompute": "some"}}, "parallel.recompute"),
    "unknown hardware field": ({**BASE, "hardware": {"base": "h100-80gb", "hbm_byte": 1}}, "did you mean 'hbm_bytes'"),
}


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_bad_job_exits_2_with_one_line_naming_file_and_field(case, run_cli, write_job):
    job, expected = BAD_JOBS[case]
    path = write_job(job)
    code, out, err = run_cli("job", "show", path)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert path in lines[0] and expected in lines[0]


HOSTILE_TEXTS = {
    "billion laughs": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
    "duplicate key": "model: llama3.1-8b\nmodel: llama3.1-70b\n",
    "not a mapping": "- 1\n- 2\n",
    "broken yaml": "model: [llama\n",
    "python tag": "model: !!python/object/apply:os.system ['echo hi']\n",
    "deep nesting": "a: " + "[" * 500 + "]" * 500 + "\n",
    "binary junk": "\x00\x01\x02",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXTS))
def test_hostile_yaml_is_refused_quickly(case, run_cli, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(HOSTILE_TEXTS[case])
    code, _, err = run_cli("job", "show", str(path))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err


def test_oversized_file_is_refused(run_cli, tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("x: " + "y" * (3 * 1024 * 1024) + "\n")
    code, _, err = run_cli("job", "show", str(path))
    assert code == 2 and "bytes" in err


def test_missing_file_is_one_line(run_cli):
    code, _, err = run_cli("job", "show", "/nonexistent/job.yaml")
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_model_file_relative_to_the_job(run_cli, tmp_path):
    (tmp_path / "mine.yaml").write_text((REPO / "models" / "llama3.1-8b.yaml").read_text().replace(
        "name: llama3.1-8b", "name: mine"))
    job = tmp_path / "job.yaml"
    job.write_text("model: mine.yaml\nhardware: h100-80gb\nnodes: 1\nseq_len: 4096\nglobal_batch_size: 64\n")
    code, out, _ = run_cli("job", "show", str(job), "--format", "json")
    assert code == 0 and json.loads(out)["model"] == "mine"


@pytest.mark.parametrize("target", ["megatron", "primus", "torchtitan"])
def test_a_model_name_with_a_newline_is_refused_before_any_export_writes_it(run_cli, tmp_path, target):
    # A name lands in launch scripts as a comment: a newline in it would start a shell line of its own.
    job = tmp_path / "job.yaml"
    job.write_text('model: {base: llama3.1-8b, name: "evil\\ntouch ' + str(tmp_path / "PWNED") + '"}\n'
                   "hardware: h100-80gb\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n")
    code, out, err = run_cli("export", str(job), "--to", target)
    assert code == 2 and out == ""
    assert "model.name" in err and "one line of printable text" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, says", [
    (("fit", "--bogus"), "No such option '--bogus'"),
    (("export", "--out", "."), "is a directory"),
    (("nosuch",), "No such command 'nosuch'"),
    (("enumerate",), "Missing argument"),
])
def test_a_usage_error_is_one_line_naming_the_command_and_exits_2(run_cli, args, says):
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("primus") and says in lines[0] and "--help" in lines[0]


def test_a_missing_choice_option_lists_its_values_on_the_line(run_cli, tmp_path):
    # click writes the choices one per tab-indented line; escaped, they would read "Choose from:\x0a\x09megatron"
    launch = tmp_path / "run.sh"
    launch.write_text("torchrun pretrain_gpt.py --num-layers 2\n")
    code, out, err = run_cli("import", str(launch))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "primus import: Missing option '--from'. Choose from: megatron, primus, torchtitan "
        "(see 'primus import --help')"]


def test_help_and_version_still_exit_0(run_cli):
    assert run_cli("--version")[0] == 0 and run_cli("fit", "--help")[0] == 0


def test_export_out_dash_is_stdout_not_a_file_named_dash(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli("export", str(EXAMPLES / "llama3.1-70b-mi300x.yaml"), "--to", "megatron", "--out", "-")
    assert code == 0 and "--tensor-model-parallel-size 8" in out
    assert not (tmp_path / "-").exists()
