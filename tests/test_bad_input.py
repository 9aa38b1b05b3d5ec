"""Bad input a hostile review got through (issue 17, item 6): each case, through the CLI, is one line on
stderr naming the file, the field and the reason, with exit status 2 and no traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.report.manifest import write_manifest
from primus.tuning.llm import ReplyRejected, parse_reply
from tests.conftest import REPO
from tests.helpers.fake_llm import fake_llm

HF = REPO / "tests" / "data" / "hf"
LAUNCH = REPO / "tests" / "data" / "launch"
BASE = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}
# CPython refuses to convert a string of more than 4,300 digits to an int (sys.int_info.default_max_str_digits)
HUGE = "9" * 5_000


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[:2000]
    assert "Traceback" not in err
    return lines[0]


def test_a_job_yaml_with_an_integer_of_5000_digits_is_refused_at_its_line(run_cli, tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(BASE, sort_keys=False).replace("seq_len: 4096", f"seq_len: {HUGE}"))
    code, _, err = run_cli("fit", str(job))
    assert code == 2
    assert one_line(err) == f"primus: {job}: invalid YAML at line 4: an integer of 5,000 digits (at most 100 are read)"


def test_a_config_json_with_an_integer_of_5000_digits_is_refused(run_cli, write_job, tmp_path: Path):
    text = (HF / "llama-Llama-3.1-8B" / "config.json").read_text()
    config = tmp_path / "config.json"
    config.write_text(text.replace('"num_hidden_layers": 32', f'"num_hidden_layers": {HUGE}'))
    assert HUGE in config.read_text()
    code, _, err = run_cli("fit", write_job({**BASE, "model": str(config)}))
    assert code == 2
    assert one_line(err) == f"primus: {config}: invalid JSON: an integer of 5,000 digits (at most 100 are read)"


def test_a_torchtitan_toml_with_an_integer_of_5000_digits_is_refused(run_cli, tmp_path: Path):
    toml = tmp_path / "train.toml"
    toml.write_text((LAUNCH / "torchtitan_llama3_70b.toml").read_text().replace("seq_len = 8192", f"seq_len = {HUGE}"))
    assert HUGE in toml.read_text()
    code, _, err = run_cli("fit", "--from", "torchtitan", str(toml), "--hardware", "h100-80gb", "--nodes", "8")
    assert code == 2
    assert one_line(err) == f"primus: {toml}: invalid TOML: an integer too long to convert"


@pytest.mark.parametrize(("old", "new", "reason"), [
    ("--nnodes 1", f"--nnodes {HUGE}", "torchrun --nnodes: must be a positive integer (elastic ranges are not "
                                       "modelled), got '" + "9" * 56 + "..."),
    ("--num-layers 32", f"--num-layers 32 --moe-layer-freq {HUGE}",
     "--moe-layer-freq: an integer of 5,000 digits (at most 100 are read)"),
    ("--num-layers 32", f"--num-layers {HUGE}", "--num-layers: must be an integer, got '" + "9" * 56 + "..."),
])
def test_a_megatron_line_with_an_integer_of_5000_digits_is_refused_in_one_short_line(run_cli, tmp_path: Path, old,
                                                                                      new, reason):
    script = tmp_path / "train.sh"
    text = (LAUNCH / "llama3_8b_h100_fp8.sh").read_text()
    assert old in text
    script.write_text(text.replace(old, new, 1))
    code, _, err = run_cli("fit", "--from", "megatron", str(script), "--hardware", "h100-80gb", "--nodes", "1")
    assert code == 2
    assert one_line(err) == f"primus: {script}: {reason}"


def test_a_misspelt_top_level_key_is_named_with_a_did_you_mean(run_cli, write_job):
    job = {("hardwar" if k == "hardware" else k): v for k, v in BASE.items()}
    path = write_job(job)
    code, _, err = run_cli("fit", path)
    assert code == 2
    assert one_line(err) == f"primus: {path}: hardwar: unknown key (did you mean 'hardware'?)"


def test_a_short_hardware_name_suggests_the_entries_it_begins(run_cli):
    code, _, err = run_cli("fit", "--from", "megatron", str(LAUNCH / "llama3_8b_h100_fp8.sh"), "--hardware", "h100",
                           "--nodes", "1")
    assert code == 2
    line = one_line(err)
    assert line.endswith("unknown hardware 'h100' (did you mean 'h100-80gb' or 'h100-96gb-500w'?); "
                         "see `primus hardware list`")
    assert "h800" not in line


@pytest.mark.parametrize(("command", "argument", "line"), [
    ("hardware", "h100", "command line: HARDWARE: unknown hardware 'h100' (did you mean 'h100-80gb' or "
                         "'h100-96gb-500w'?); see `primus hardware list`"),
    ("models", "llama3-8bx", "command line: MODEL: unknown model 'llama3-8bx' (did you mean 'llama3-8b'?); "
                             "see `primus models list`"),
])
def test_show_of_an_unknown_name_says_where_once(run_cli, command, argument, line):
    code, _, err = run_cli(command, "show", argument)
    assert code == 2
    assert one_line(err) == f"primus: {line}"


@pytest.mark.parametrize(("job", "field_and_reason"), [
    ({**BASE, "gpus": 8}, "give exactly one of nodes and gpus"),
    ({**BASE, "fp8_recipe": "delayed"}, "fp8_recipe is only meaningful with precision: fp8"),
    ({**BASE, "kernels": {"cross_entropy_fusion": True, "eager_cross_entropy": True}},
     "kernels: cross_entropy_fusion and eager_cross_entropy exclude each other"),
    ({**BASE, "model": {"base": "llama3.1-8b", "num_experts": 8}},
     "model: an MoE model (num_experts set) needs moe_router_topk"),
    ({**BASE, "hardware": {"base": "h100-80gb", "peak_tflops": {"fp8": 1979}}},
     "hardware.accelerator: peak_tflops needs at least bf16"),
])
def test_a_check_across_fields_reads_as_its_own_sentence(run_cli, write_job, job, field_and_reason):
    """Not pydantic's "Value error, ... (got {the whole mapping})"."""
    path = write_job(job)
    code, _, err = run_cli("fit", path)
    assert code == 2
    assert one_line(err) == f"primus: {path}: {field_and_reason}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished `primus tune --llm none` run of the small job."""
    root = tmp_path_factory.mktemp("tuned")
    job = root / "job.yaml"
    job.write_text(yaml.safe_dump(BASE, sort_keys=False))
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--workers", "1", "--out", str(root / "run"),
                                      "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return root / "run"


def test_a_bad_rule_in_a_run_directory_reads_as_its_own_sentence(run_cli, run_dir: Path, tmp_path: Path):
    """The same translation where a run directory's recorded rules are read back (`primus report`)."""
    out = Path(shutil.copytree(run_dir, tmp_path / "run"))
    rules = out / "inputs" / "rules.yaml"
    doc = yaml.safe_load(rules.read_text())
    doc["rules"][0]["why"] = "two\nlines"
    rules.write_text(yaml.safe_dump(doc))
    write_manifest(out)  # the list re-recorded after the edit: `report` refuses a file it does not vouch for
    code, _, err = run_cli("report", str(out))
    assert code == 2
    assert one_line(err) == f"primus: {rules}: rules[0]: why: must be one line"


def test_an_audit_line_with_an_integer_of_5000_digits_is_refused(run_cli, run_dir: Path, tmp_path: Path):
    out = Path(shutil.copytree(run_dir, tmp_path / "run"))
    audit = out / "audit.jsonl"
    lines = audit.read_text().splitlines(keepends=True)
    lines[0] = lines[0].replace('"seq":0', f'"seq":{HUGE}')
    assert HUGE in lines[0]
    audit.write_text("".join(lines))
    code, _, err = run_cli("audit", "verify", str(out))
    assert code == 2
    assert one_line(err) == f"primus: {audit}: line 1: not a JSON object"


def test_an_llm_reply_with_an_integer_of_5000_digits_is_rejected_not_raised():
    with pytest.raises(ReplyRejected, match="reply is not JSON"):
        parse_reply(f'{{"rules": [{{"id": "x", "require": "tp >= 1", "weight": {HUGE}}}]}}')


@pytest.mark.parametrize(("hardware", "precision", "recipe", "cannot", "runs"), [
    ("a100-80gb", "fp8", None, "a100-80gb cannot run fp8 GEMMs (no fp8 peak in the hardware entry)", "bf16, fp16"),
    ("h100-80gb", "nvfp4", None, "h100-80gb cannot run nvfp4 GEMMs (no fp4 peak in the hardware entry)",
     "bf16, fp16, fp8 (recipes tensorwise, delayed, blockwise)"),
    ("h100-80gb", "fp8", "mxfp8", "h100-80gb cannot run mxfp8 GEMMs (no gemm.mxfp8 in its calibration profile)",
     "bf16, fp16, fp8 (recipes tensorwise, delayed, blockwise)"),
])
@pytest.mark.parametrize("command", ["fit", "enumerate", "memory", "project", "tune"])
def test_every_command_refuses_a_precision_the_hardware_cannot_run(run_cli, write_job, tmp_path: Path, command,
                                                                    hardware, precision, recipe, cannot, runs):
    job = {**BASE, "hardware": hardware, "precision": precision, **({"fp8_recipe": recipe} if recipe else {})}
    if command == "memory":
        job["parallel"] = {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "full", "sharding": "fsdp"}
    path = write_job(job)
    extra = ["--llm", "none", "--out", str(tmp_path / "run")] if command == "tune" else []
    code, out, err = run_cli(command, path, *extra, "--format", "json")
    assert code == 2 and out == ""
    if command == "tune":  # tune says first that the LLM is off
        assert err.startswith("LLM off: --llm none\n")
        err = err.split("\n", 1)[1]
    assert one_line(err).endswith(f"precision: {cannot}; it runs {runs}")


def test_the_precisions_a_hardware_runs_are_the_ones_it_projects(run_cli, write_job):
    """The refusal's list is what `project` accepts: each precision named for H100 projects."""
    for precision, recipe in (("bf16", None), ("fp16", None), ("fp8", "tensorwise"), ("fp8", "delayed"),
                              ("fp8", "blockwise")):
        job = {**BASE, "precision": precision, **({"fp8_recipe": recipe} if recipe else {}),
               "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "full",
                            "sharding": "fsdp"}}
        code, out, err = run_cli("project", write_job(job), "--format", "json")
        assert code == 0, err
        assert json.loads(out)["tokens_per_s_per_gpu"] > 0


def test_an_llm_rule_the_rule_model_refuses_is_refused_in_plain_words(run_cli, write_job, tmp_path: Path):
    """A proposed rule whose `why` has two lines and one whose id has a space: the refusal in the log is
    `field: reason`, not pydantic's multi-line "1 validation error for Rule ... Value error, ..."."""
    reply = {"rules": [{"id": "two-lines", "why": "first\nsecond", "require": "tp >= 1"},
                       {"id": "has space", "require": "tp >= 1"}]}
    out = tmp_path / "run"
    with fake_llm([("json", reply)]) as (url, _):
        code, stdout, err = run_cli("tune", write_job(BASE), "--exhaustive-limit", "0", "--llm-base-url", url,
                                    "--llm-calls", "1", "--workers", "1", "--out", str(out), "--format", "json")
    assert code == 0, err
    refused = [e["reason"] for e in json.loads(stdout)["events"] if e["kind"] == "rule" and e["status"] == "refused"]
    assert refused[:2] == [
        "refused by the rule parser: why: must be one line",
        "refused by the rule parser: id: String should match pattern '^[a-z][a-z0-9_.:-]{0,63}$' (got 'llm-has space')"]


@pytest.mark.parametrize("command", [["validate"], ["calibrate", "--hardware", "b200", "--runs"]])
def test_a_runs_csv_with_a_field_over_the_csv_limit_is_refused_at_its_line(run_cli, tmp_path: Path, command):
    runs = tmp_path / "runs.csv"
    bundled = (REPO / "primus" / "fidelity" / "data" / "runs_dev.csv").read_text().splitlines()
    runs.write_text("\n".join([*bundled[:2], "x" * 200_000]) + "\n")  # Python's csv stops at 128 KiB a field
    code, _, err = run_cli(*command, str(runs))
    assert code == 2
    assert one_line(err) == f"primus: {runs}: line 3: not CSV (field larger than field limit (131072))"
