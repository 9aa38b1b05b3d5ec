"""Bad input on the command line, found by a hostile review of 2026-12-06: each is one line on stderr
naming the option or file, exit 2, and nothing else printed before it."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from primus.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "llama3.1-70b-mi300x.yaml")
LINE = ROOT / "tests" / "data" / "launch" / "llama3_8b_h100_fp8.sh"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_nodes_and_gpus_together_are_refused_by_export() -> None:
    # --gpus used to win and --nodes was dropped without a word
    code, out, err = _run("export", EXAMPLE, "--to", "megatron", "--nodes", "3", "--gpus", "8")
    assert (code, out) == (2, "") and err == "primus: command line: --nodes: give --nodes or --gpus, not both\n"


def test_primus_root_without_a_primus_experiment_is_refused() -> None:
    code, _, err = _run("fit", EXAMPLE, "--primus-root", "/nonexistent")
    assert code == 2 and err == "primus: command line: --primus-root: goes with --from primus only\n"


def test_config_without_a_config_registry_is_refused() -> None:
    code, _, err = _run("import", "--from", "megatron", str(LINE), "--hardware", "h100-80gb", "--config", "x")
    assert code == 2 and err == "primus: command line: --config: goes with --config-registry only\n"


def test_a_toml_nested_too_deeply_names_the_file(tmp_path: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("[job]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = _run("import", "--from", "torchtitan", str(deep), "--hardware", "h100-80gb", "--nodes", "1")
    assert code == 2 and err == f"primus: {deep}: invalid TOML: nested too deeply\n"


def test_a_launch_file_name_with_a_line_break_is_shown_escaped(tmp_path: Path) -> None:
    odd = tmp_path / "a\nb.sh"
    shutil.copy(LINE, odd)
    code, _, err = _run("import", "--from", "megatron", str(odd), "--hardware", "h100-80gb")
    assert code == 0
    header = next(line for line in err.splitlines() if "are not modelled" in line)
    assert "a\\x0ab.sh" in header


def test_tune_out_under_a_file_is_refused_before_any_progress_line(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("mine\n")
    code, _, err = _run("tune", EXAMPLE, "--llm", "none", "--out", str(tmp_path / "file.txt" / "sub"))
    assert code == 2 and err.count("\n") == 1 and "--out:" in err and "is a file, not a directory" in err
    assert (tmp_path / "file.txt").read_text() == "mine\n"


def test_calibrate_with_no_rows_for_the_hardware_says_only_that(tmp_path: Path) -> None:
    runs = ROOT / "primus" / "fidelity" / "data" / "runs_dev.csv"
    code, _, err = _run("calibrate", "--runs", str(runs), "--hardware", "cpu", "--out", str(tmp_path / "x.yaml"))
    assert code == 2 and err == "primus: runs_dev.csv: no complete, projectable runs on 'cpu' to fit\n"


def test_a_runs_file_with_a_column_twice_or_a_bad_complete_cell_is_refused(tmp_path: Path) -> None:
    lines = (ROOT / "primus" / "fidelity" / "data" / "runs_dev.csv").read_text().splitlines()[:3]
    header = lines[0].split(",")
    twice = tmp_path / "twice.csv"
    twice.write_text("\n".join([",".join([*header, "tp"]), *(line + ",1" for line in lines[1:])]) + "\n")
    code, _, err = _run("validate", str(twice), "--no-loso", "--no-fit-check")
    assert code == 2 and err == f"primus: {twice}: column 'tp': appears twice in the header\n"
    col = header.index("complete")
    cells = lines[1].split(",")
    assert cells[col] in ("true", "false")  # the row has no quoted commas before the column
    cells[col] = "maybe"
    maybe = tmp_path / "maybe.csv"
    maybe.write_text("\n".join([lines[0], ",".join(cells)]) + "\n")
    code, _, err = _run("validate", str(maybe), "--no-loso", "--no-fit-check")
    assert code == 2 and err == f"primus: {maybe}: line 2: column 'complete' must be true or false, got 'maybe'\n"
