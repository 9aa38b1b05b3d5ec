"""The user's path, fixed after a hostile review of the CLI (each one line and exit 2, or read as the user meant):

- a float option given NaN passed click's FloatRange (every comparison with NaN is false): `tune --llm-timeout nan`
  reached the HTTP client and ended in a traceback; `measure --budget-s nan` wrote NaN into its JSON profile;
- `validate --format csv` wrote a runs file's text cells as they were, so a spreadsheet ran `=HYPERLINK(...)` as a
  formula (OWASP "CSV Injection");
- `--hardware FILE` beside `--from` was looked for next to the launch file, not where the user stands;
- `job show` printed jobs that every other command refuses;
- `--help` or `--version` into a closed pipe exited 1 (click's answer to EPIPE), which a script reads as a
  negative answer, where every other command exits 141;
- command groups had no example in their help;
- an empty Primus experiment was said to have "top-level keys: NoneType"; a config.json with a UTF-8 byte-order
  mark was refused though YAML files with one are read; a launch file whose name holds an escape code was refused
  for a `model.name` the user never wrote; a layer listed twice in `recompute_layer_ids` was accepted.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "llama3.1-70b-mi300x.yaml")
LAUNCH = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
          "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --vocab-size 128256 "
          "--position-embedding-type rope --max-position-embeddings 131072 --untie-embeddings-and-output-weights "
          "--normalization RMSNorm --swiglu --disable-bias-linear --bf16 --use-distributed-optimizer "
          "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 --global-batch-size 64 "
          "--seq-length 8192\n")


@pytest.mark.parametrize("args", [
    ("tune", EXAMPLE, "--llm-timeout", "nan"), ("tune", EXAMPLE, "--llm-timeout", "inf"),
    ("measure", EXAMPLE, "--budget-s", "nan"), ("measure", EXAMPLE, "--budget-s", "-inf"),
])
def test_nan_and_infinity_are_refused_by_the_float_options(run_cli, tmp_path: Path, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli(*args, "--out", str(tmp_path / "out"))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert f"Invalid value for '{args[2]}'" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_csv_text_cells_are_never_formulas(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = ROOT / "primus" / "fidelity" / "data" / "amd_runs_dev.csv"
    rows = list(csv.DictReader(io.StringIO(source.read_text())))
    row = {**next(r for r in rows if r["run_id"] == "amdperf_mi325x_llama31_8b_fp8_8n"),
           "run_id": "=1+2", "source": "@SUM(A1)"}
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerow(row)
    code, out, _ = run_cli("validate", str(path), "--no-loso", "--no-fit-check", "--format", "csv")
    assert code == 0
    got = next(csv.DictReader(io.StringIO(out)))
    assert (got["run_id"], got["source"]) == ("'=1+2", "'@SUM(A1)")
    assert float(got["error_pct"]) < 0  # numbers stay numbers: -9.3%, published by AMD, not guarded


def test_a_hardware_file_on_the_command_line_is_found_where_the_user_stands(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "train.sh").write_text(LAUNCH)
    (tmp_path / "hw.yaml").write_text((ROOT / "hardware" / "h100-80gb.yaml").read_text())
    (tmp_path / "jobs" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("memory", "--from", "megatron", "launch/train.sh", "--hardware", "hw.yaml")
    assert code == 0, err
    code, _, err = run_cli("import", "--from", "megatron", "launch/train.sh", "--hardware", "hw.yaml",
                           "--out", "jobs/deep/job.yaml")
    assert code == 0, err
    job = yaml.safe_load((tmp_path / "jobs" / "deep" / "job.yaml").read_text())
    assert job["hardware"] == os.path.join("..", "..", "hw.yaml")  # named from where the job file is read
    code, _, err = run_cli("memory", "jobs/deep/job.yaml")
    assert code == 0, err


@pytest.mark.parametrize(("extra", "why"), [
    ({"parallel": {"recompute": "full", "recompute_layer_ids": [1000]}},
     "parallel.recompute_layer_ids: layer id 1000 is not below the model's 80 decoder layers"),
    ({"rules": [{"id": "x", "require": "tp <= 8"}]}, "rule x: why: missing required key"),
    ({"parallel": {"recompute": "full", "recompute_layer_ids": [1, 1]}},
     "parallel.recompute_layer_ids: lists layer 1 more than once"),
])
def test_job_show_refuses_what_fit_refuses(run_cli, write_job, extra: dict[str, Any], why: str) -> None:  # type: ignore[no-untyped-def]
    job = {**yaml.safe_load(Path(EXAMPLE).read_text()), **extra}
    path = write_job(job)
    for command in (("job", "show", path), ("fit", path)):
        code, out, err = run_cli(*command)
        assert (code, out) == (2, "") and why in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [("fit", "--help"), ("--help",), ("models", "--help"), ("--version",)])
def test_help_into_a_closed_pipe_exits_141(args: tuple[str, ...]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before primus writes: every write is EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "primus.cli.main", *args], stdout=write,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=300, check=False)
    finally:
        os.close(write)
    assert proc.returncode == 141 and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("group", ["models", "hardware", "job", "schema", "stacks", "audit"])
def test_every_command_group_shows_an_example(run_cli, group: str) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli(group, "--help")
    assert code == 0 and "Example: primus " in out


def test_small_input_errors_say_what_the_user_gave(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, _, err = run_cli("import", "--from", "primus", str(empty))
    assert code == 2 and err.endswith("this file has none (the file is empty)\n")
    config = tmp_path / "config.json"
    published = ROOT / "tests" / "data" / "hf" / "qwen3-Qwen3-8B" / "config.json"
    config.write_bytes(b"\xef\xbb\xbf" + published.read_bytes())
    code, out, err = run_cli("models", "show", str(config), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["total_params"] == 8_190_735_360  # Qwen/Qwen3-8B, as without the mark
    named = tmp_path / "x\x1b[31m.sh"
    named.write_text(LAUNCH)
    code, out, err = run_cli("import", "--from", "megatron", str(named), "--hardware", "h100-80gb")
    assert code == 0, err
    assert "\x1b" not in out and yaml.safe_load(out)["model"]["name"] == "x\\x1b[31m"


def test_fp16_with_the_precision_aware_optimizer_round_trips(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    optimizer = {"main_grads_dtype": "fp16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}
    job = {**yaml.safe_load(Path(EXAMPLE).read_text()), "precision": "fp16", "optimizer": optimizer}
    code, out, err = run_cli("export", write_job(job), "--to", "megatron")
    assert code == 0, err
    script = tmp_path / "fp16.sh"
    script.write_text(out)
    code, out, err = run_cli("import", "--from", "megatron", str(script), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert {k: v for k, v in doc["job"]["optimizer"].items() if k in optimizer} == optimizer
    assert not [u for u in doc["unmodelled"] if "precision_aware" in u or "precision-aware" in u]


def test_a_hardware_mapping_and_a_registry_are_rebased_and_a_catalog_name_is_not(run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("hw", "jobs", "out/a/b"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "hw" / "h.yaml").write_text((ROOT / "hardware" / "mi300x.yaml").read_text())
    job = {**yaml.safe_load(Path(EXAMPLE).read_text()), "hardware": {"base": "../hw/h.yaml"}}
    (tmp_path / "jobs" / "j.yaml").write_text(yaml.safe_dump(job))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("export", "jobs/j.yaml", "--to", "megatron", "--out", "jobs/t.sh")
    assert code == 0, err
    # the export's header names the file absolutely; a header written by hand names it from the launch file
    script = Path("jobs/t.sh")
    script.write_text(script.read_text().replace(os.path.abspath("hw/h.yaml"), "../hw/h.yaml"))
    code, _, err = run_cli("import", "--from", "megatron", "jobs/t.sh", "--out", "out/a/b/t.yaml")
    assert code == 0, err
    assert yaml.safe_load(Path("out/a/b/t.yaml").read_text())["hardware"]["base"] == "../../../hw/h.yaml"
    code, _, err = run_cli("job", "show", "out/a/b/t.yaml")
    assert code == 0, err
    # exported elsewhere: the header names the hardware file by its absolute path, which reads from anywhere
    Path("elsewhere").mkdir()
    code, _, err = run_cli("export", "jobs/j.yaml", "--to", "megatron", "--out", "elsewhere/t.sh")
    assert code == 0, err
    code, _, err = run_cli("memory", "--from", "megatron", "elsewhere/t.sh")
    assert code == 0, err
    registry = ROOT / "tests" / "data" / "launch" / "torchtitan_registry" / "torchtitan" / "models" / "llama3"
    code, out, err = run_cli("import", "--from", "torchtitan", "--config-registry",
                             str(registry / "config_registry.py"), "--config", "llama3_70b", "--hardware", "hw/h.yaml",
                             "--nodes", "8")
    assert code == 0, err
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "train.sh").write_text(LAUNCH)
    Path("h100-80gb").write_text("junk: 1\n")  # a file named like a catalog entry: the catalog entry is meant
    code, out, err = run_cli("import", "--from", "megatron", "launch/train.sh", "--hardware", "h100-80gb")
    assert code == 0, err
    assert yaml.safe_load(out)["hardware"] == "h100-80gb"


def test_a_primus_experiment_whose_name_holds_an_escape_is_imported_with_it_shown(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # an experiment that names no model file: the model is named after the experiment file
    overrides = {"num_layers": 6, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
                 "seq_length": 2048, "max_position_embeddings": 2048, "micro_batch_size": 1, "global_batch_size": 8,
                 "padded_vocab_size": 32000}
    path = tmp_path / "exp\x1b[31mred.yaml"
    path.write_text(yaml.safe_dump({"modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml",
                                                                "overrides": overrides}}}))
    code, out, err = run_cli("import", "--from", "primus", str(path), "--hardware", "mi300x", "--nodes", "1",
                             "--format", "json")
    assert code == 0, err
    name = json.loads(out)["job"]["model"]["name"]
    assert name == "exp\\x1b[31mred" and "\x1b" not in name
