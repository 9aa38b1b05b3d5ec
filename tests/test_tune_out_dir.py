"""`primus tune` owns only what it writes (issue 20): `--out` may be a new directory, an empty one, or a
run directory `tune` wrote before (its marker, primus-run.json); any other directory is refused with
exit 2 and left byte for byte as it was. The same holds for the `DIR.partial` checkpoint, `--resume`,
`primus report`, and the files `export`, `import` and `calibrate` write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.fidelity_cmds import calibrate_cmd
from primus.cli.launch_cmds import export_cmd, import_cmd
from primus.cli.report_cmds import report_cmd
from primus.cli.tune_cmd import tune_cmd
from primus.fidelity import bundled_runs_path
from primus.report.manifest import update_manifest
from primus.report.owned import MARKER

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}
REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "launch"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under `root` (hidden ones included): file bytes, or None for a folder."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


def tune(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(tune_cmd, [*args, "--llm", "none", "--workers", "1", "--format", "json"],
                                catch_exceptions=False)
    return result.exit_code, result.stderr


def user_dir(root: Path) -> Path:
    """A directory as a user keeps it: a job, a thesis, a hidden file and a subfolder."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "small.yaml").write_text(yaml.safe_dump(SMALL, sort_keys=False))
    (root / "thesis.tex").write_text("\\section{precious}\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "plots").mkdir()
    (root / "plots" / "loss.png").write_bytes(bytes(range(256)))
    return root


def test_out_dot_in_a_directory_with_user_files_is_refused_and_nothing_is_touched(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch):
    work = user_dir(tmp_path / "work")
    before, around = snapshot(work), sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(work)
    code, err = tune("small.yaml", "--out", ".")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert str(work) in err and ".git/" in err and "plots/" in err and "and 1 more" in err
    assert snapshot(work) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == around  # no work.partial, no staging folder beside it


def test_a_non_empty_foreign_directory_is_refused_unchanged(tmp_path: Path):
    foreign = user_dir(tmp_path / "project")
    before = snapshot(foreign)
    code, err = tune(str(foreign / "small.yaml"), "--out", str(foreign))
    assert code == 2 and "not a run directory written by `primus tune`" in err and "small.yaml" in err
    assert snapshot(foreign) == before
    assert not (tmp_path / "project.partial").exists()


def test_an_old_run_directory_without_the_marker_is_refused(tmp_path: Path):
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    (out / MARKER).unlink()  # as written by a primus from before the marker
    before = snapshot(out)
    assert tune(str(job), "--out", str(out))[0] == 2
    assert snapshot(out) == before


def test_out_dot_in_an_empty_directory_writes_the_run_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    code, err = tune(str(job), "--out", ".")
    assert code == 0, err
    marker = json.loads((work / MARKER).read_text())
    assert marker["written_by"] == "primus tune" and "result.json" in marker["files"]
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == []  # no staging folder left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "jobs"]  # checkpoint discarded


def test_a_rerun_into_its_own_run_directory_keeps_the_files_a_user_added(tmp_path: Path):
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    (out / "notes.txt").write_text("the TP=2 runs looked odd\n")
    (out / "charts" / "mine.svg").write_text("<svg/>\n")
    (out / "llm").mkdir()
    (out / "llm" / "call-001.json").write_text("{}\n")  # as left by an earlier run that asked an LLM ...
    marker = json.loads((out / MARKER).read_text())
    marker["files"] += ["llm/call-001.json", "../jobs/thesis.tex", "/etc/hostname"]  # ... and a forged entry
    (out / MARKER).write_text(json.dumps(marker))
    update_manifest(out, ["llm/call-001.json"])  # that run recorded its file's sha256, as every run does
    thesis = (tmp_path / "jobs" / "thesis.tex").read_bytes()

    code, err = tune(str(job), "--out", str(out))
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "the TP=2 runs looked odd\n"
    assert (out / "charts" / "mine.svg").read_text() == "<svg/>\n"
    assert not (out / "llm").exists()  # its own stale file removed, and the folder it emptied
    assert (tmp_path / "jobs" / "thesis.tex").read_bytes() == thesis  # nothing outside is ever removed
    files = json.loads((out / MARKER).read_text())["files"]
    assert "notes.txt" not in files and "charts/mine.svg" not in files and "report.html" in files
    assert CliRunner().invoke(report_cmd, [str(out)]).exit_code == 0
    assert (out / "notes.txt").exists()


def test_a_rerun_refuses_to_replace_a_file_of_the_users_under_a_name_it_writes(tmp_path: Path):
    # review 49, M9: an LLM-enabled rerun replaced a user's llm/call-001.json that the marker did not list;
    # here the user's own report.md, which the marker does not list, stands for any such name
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    marker = json.loads((out / MARKER).read_text())
    marker["files"].remove("report.md")
    (out / MARKER).write_text(json.dumps(marker))
    (out / "report.md").write_text("my own notes on the run\n")
    before = snapshot(out)

    code, err = tune(str(job), "--out", str(out))
    assert code == 2 and "Traceback" not in err  # the progress lines, then one line of refusal
    assert err.strip().splitlines()[-1].startswith(
        f"primus: --out: {out / 'report.md'}: exists and was not written by primus tune")
    assert (out / "report.md").read_text() == "my own notes on the run\n"
    assert {k: v for k, v in snapshot(out).items() if k != MARKER} == \
        {k: v for k, v in before.items() if k != MARKER}


def test_a_charts_folder_linked_out_of_the_run_directory_is_never_written_through(tmp_path: Path):
    # a run directory from elsewhere (an artifact, a pull request) whose charts/ links to the user's files
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    victim = user_dir(tmp_path / "victim")
    (victim / "memory.svg").write_text("precious\n")
    shutil.rmtree(out / "charts")
    (out / "charts").symlink_to(victim, target_is_directory=True)
    before = snapshot(victim)
    result = CliRunner().invoke(report_cmd, [str(out)])
    assert result.exit_code == 2 and "leads out of the run directory" in result.stderr
    code, err = tune(str(job), "--out", str(out))
    assert code == 2 and "leads out of the run directory" in err
    assert snapshot(victim) == before


def test_a_foreign_partial_directory_is_refused_unchanged(tmp_path: Path):
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    partial = user_dir(tmp_path / "run.partial")
    before = snapshot(partial)
    code, err = tune(str(job), "--out", str(tmp_path / "run"))
    assert code == 2 and "run.partial" in err and "checkpoint" in err
    assert snapshot(partial) == before and not (tmp_path / "run").exists()


def test_resume_into_a_foreign_directory_is_refused(tmp_path: Path):
    target = user_dir(tmp_path / "run")
    (tmp_path / "run.partial").mkdir()
    (tmp_path / "run.partial" / "state.json").write_text(json.dumps({"version": 1, "options": {}}))
    before = snapshot(target)
    result = CliRunner().invoke(tune_cmd, ["--resume", str(target)], catch_exceptions=False)
    code, err = result.exit_code, result.stderr
    assert code == 2 and "not a run directory written by `primus tune`" in err
    assert snapshot(target) == before


def test_resume_refuses_a_partial_folder_tune_did_not_write_even_if_it_holds_a_state_json(tmp_path: Path):
    # resuming appends to DIR.partial/audit.jsonl and then removes its files: only tune's own checkpoint
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    partial = user_dir(tmp_path / "run.partial")
    options = {"job_file": str(job), "rule_texts": [], "rule_files": [], "without": [], "exhaustive_limit": 0,
               "llm_mode": "none", "llm_base_url": None, "llm_model": "m", "llm_calls": 0, "llm_timeout": 1.0,
               "allow": []}
    (partial / "state.json").write_text(json.dumps({"version": 1, "options": options, "inputs_sha256": {}}))
    (partial / "audit.jsonl").write_text("my own lines, no newline at the end")
    before = snapshot(partial)
    result = CliRunner().invoke(tune_cmd, ["--resume", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "not a checkpoint written by `primus tune`" in result.stderr
    assert snapshot(partial) == before


@pytest.mark.parametrize(("state", "named"), [
    ([1], "not a JSON object"),
    ({"version": 1}, "options: missing or not a mapping"),
    ({"version": 1, "options": [], "inputs_sha256": {}}, "options: missing or not a mapping"),
    ({"version": 1, "options": {"job_file": 5}, "inputs_sha256": {}}, "job_file: must be a string or null, got 5"),
    ({"version": 1, "options": {"job_file": None}, "inputs_sha256": []}, "inputs_sha256: missing or not a mapping"),
    ({"version": [1]}, "version: checkpoint format [1] is not 1"),
    ("[" * 100_000, "unreadable checkpoint state"),
])
def test_a_hand_edited_checkpoint_state_is_one_line_and_exit_2(tmp_path: Path, state: object, named: str):
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / MARKER).write_text(json.dumps({"written_by": "primus tune", "kind": "checkpoint", "files": []}))
    (partial / "state.json").write_text(state if isinstance(state, str) else json.dumps(state))
    result = CliRunner().invoke(tune_cmd, ["--resume", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert named in result.stderr


def test_resume_of_a_checkpoint_whose_options_are_out_of_range_is_refused(tmp_path: Path):
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / MARKER).write_text(json.dumps({"written_by": "primus tune", "kind": "checkpoint", "files": []}))
    options = {"job_file": None, "rule_texts": [], "rule_files": [], "without": [], "exhaustive_limit": -1,
               "llm_mode": "none", "llm_base_url": None, "llm_model": "m", "llm_calls": 0, "llm_timeout": 1.0,
               "allow": []}
    (partial / "state.json").write_text(json.dumps({"version": 1, "options": options, "inputs_sha256": {}}))
    result = CliRunner().invoke(tune_cmd, ["--resume", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "exhaustive_limit: must be an integer from 0 to 10,000,000, got -1" in result.stderr


def test_resume_with_changed_inputs_is_refused_in_one_line(tmp_path: Path):
    partial = tmp_path / "run.partial"
    partial.mkdir()
    (partial / MARKER).write_text(json.dumps({"written_by": "primus tune", "kind": "checkpoint", "files": []}))
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    options = {"job_file": str(job), "rule_texts": [], "rule_files": [], "without": [], "exhaustive_limit": 0,
               "llm_mode": "none", "llm_base_url": None, "llm_model": "m", "llm_calls": 0, "llm_timeout": 1.0,
               "allow": []}
    (partial / "state.json").write_text(json.dumps({"version": 1, "options": options, "inputs_sha256": {}}))
    result = CliRunner().invoke(tune_cmd, ["--resume", str(tmp_path / "run")], catch_exceptions=False)
    assert result.exit_code == 2 and "inputs changed since the interrupted run" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # not "LLM off: ..." before it


def test_report_refuses_a_directory_tune_did_not_write(tmp_path: Path):
    foreign = user_dir(tmp_path / "project")
    for name in ("result.json", "audit.jsonl"):
        (foreign / name).write_text("{}\n")
    before = snapshot(foreign)
    result = CliRunner().invoke(report_cmd, [str(foreign)])
    assert result.exit_code == 2 and "primus-run.json" in result.stderr
    assert snapshot(foreign) == before


def test_export_replaces_only_its_own_output_and_never_its_input(tmp_path: Path):
    job = REPO / "examples" / "llama3.1-70b-mi300x.yaml"
    out = tmp_path / "train.sh"
    out.write_text("#!/bin/sh\necho my own launcher\n")
    refused = CliRunner().invoke(export_cmd, [str(job), "--to", "megatron", "--out", str(out)])
    assert refused.exit_code == 2 and "not written by `primus export`" in refused.stderr
    assert out.read_text() == "#!/bin/sh\necho my own launcher\n"
    out.unlink()
    for _ in range(2):  # written, then replaced: it is its own output
        assert CliRunner().invoke(export_cmd, [str(job), "--to", "megatron", "--out", str(out)]).exit_code == 0
    copy = tmp_path / "job.yaml"
    copy.write_bytes(job.read_bytes())
    same = CliRunner().invoke(export_cmd, [str(copy), "--to", "megatron", "--out", str(copy)])
    assert same.exit_code == 2 and copy.read_bytes() == job.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "train.sh"]


def test_import_does_not_overwrite_its_input_or_a_foreign_file(tmp_path: Path):
    source = tmp_path / "llama.toml"
    source.write_bytes((DATA / "torchtitan_llama3_70b.toml").read_bytes())
    args = ["--from", "torchtitan", str(source), "--hardware", "a100-80gb", "--gpus", "64", "--out"]
    onto_input = CliRunner().invoke(import_cmd, [*args, str(source)])
    assert onto_input.exit_code == 2 and "input" in onto_input.stderr
    assert source.read_bytes() == (DATA / "torchtitan_llama3_70b.toml").read_bytes()
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine: true\n")
    assert CliRunner().invoke(import_cmd, [*args, str(notes)]).exit_code == 2
    assert notes.read_text() == "mine: true\n"


def test_a_refused_import_out_is_the_only_line_on_stderr(tmp_path: Path):
    # the launch file's notes and unmodelled options are not said when nothing will be written
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine: true\n")
    result = CliRunner().invoke(import_cmd, ["--from", "megatron", str(DATA / "llama3_8b_h200_bf16.sh"), "--hardware",
                                             "h100-80gb", "--out", str(notes)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "not written by `primus import`" in result.stderr and notes.read_text() == "mine: true\n"


def test_calibrate_refuses_to_overwrite_a_file_it_did_not_write(tmp_path: Path):
    out = tmp_path / "b200.yaml"
    out.write_text("name: my hand-written profile\n")
    result = CliRunner().invoke(calibrate_cmd, ["--runs", str(bundled_runs_path()), "--hardware", "b200",
                                                "--out", str(out)])
    assert result.exit_code == 2 and "not written by `primus calibrate`" in result.stderr
    assert out.read_text() == "name: my hand-written profile\n"


def test_calibrate_never_replaces_its_start_profile(tmp_path: Path):
    out = tmp_path / "b200.yaml"
    args = ["--runs", str(bundled_runs_path()), "--hardware", "b200"]
    assert CliRunner().invoke(calibrate_cmd, [*args, "--out", str(out)]).exit_code == 0
    before = out.read_bytes()  # a calibrated profile: calibrate's own output, used as the next --start
    result = CliRunner().invoke(calibrate_cmd, [*args, "--start", str(out), "--out", str(out)])
    assert result.exit_code == 2 and "is an input of `primus calibrate`" in result.stderr
    assert out.read_bytes() == before


def test_calibrate_refuses_a_bad_start_profile_in_one_line(tmp_path: Path):
    start = tmp_path / "start.yaml"
    start.write_text("[\n")
    result = CliRunner().invoke(calibrate_cmd, ["--runs", str(bundled_runs_path()), "--hardware", "b200", "--start",
                                                str(start), "--out", str(tmp_path / "out.yaml")])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "start.yaml: invalid YAML" in result.stderr


def test_a_measured_profile_is_saved_without_touching_a_file_named_like_its_temporary(tmp_path: Path):
    from primus.measure.measured_profile import DeviceInfo, MeasuredProfile, load_measured_profile

    out = tmp_path / "cpu.profile.json"
    neighbour = tmp_path / "cpu.profile.json.tmp"
    neighbour.write_text("a user's file\n")
    MeasuredProfile(DeviceInfo("cpu", "test CPU", "cpu", "2.x", "float32", 1, 1), "2026").save(out)
    assert load_measured_profile(out).device.name == "test CPU"
    assert neighbour.read_text() == "a user's file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.profile.json", "cpu.profile.json.tmp"]


def test_a_directory_it_cannot_write_is_one_line_and_exit_2_not_a_traceback(tmp_path: Path):
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way\n")
    code, err = tune(str(job), "--out", str(blocker / "run"))  # its folder cannot be made (a file is there)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("primus: ") and "a-file" in last and "Traceback" not in err
    assert blocker.read_text() == "in the way\n"


def test_measure_refuses_an_out_file_that_is_not_a_measured_profile(tmp_path: Path):
    pytest.importorskip("torch")
    from primus.cli.measure_cmd import measure_cmd

    job = user_dir(tmp_path / "jobs") / "small.yaml"
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    result = CliRunner().invoke(measure_cmd, [str(job), "--device", "cpu", "--out", str(notes), "--budget-s", "5"])
    assert result.exit_code == 2 and "not a measured profile" in result.stderr
    assert notes.read_text() == '{"mine": true}\n'


def test_a_marker_that_lists_a_file_tune_never_wrote_removes_nothing(tmp_path: Path):
    # a hostile review: primus-run.json naming the user's file made a rerun delete it; the run's SHA256SUMS,
    # which records every file tune wrote, does not vouch for it, so the rerun is refused and nothing is touched
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    (out / "precious.txt").write_text("keep\n")
    marker = json.loads((out / MARKER).read_text())
    marker["files"] += ["precious.txt"]
    (out / MARKER).write_text(json.dumps(marker))
    code, err = tune(str(job), "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "precious.txt, which primus-run.json lists" in err
    assert (out / "precious.txt").read_text() == "keep\n"


def test_a_report_edited_since_the_run_is_not_replaced(tmp_path: Path):
    # export, import and calibrate refuse to overwrite an output edited since they wrote it; so does tune
    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    edited = (out / "report.md").read_text() + "my notes\n"
    (out / "report.md").write_text(edited)
    code, err = tune(str(job), "--out", str(out))
    assert code == 2 and "report.md" in err and "edited since the run" in err
    assert (out / "report.md").read_text() == edited


def test_a_rewrite_killed_while_moving_its_files_in_is_recovered_by_the_next_run(tmp_path: Path, monkeypatch):
    # a hostile review: after a kill between two moves, old and new files sat under one SHA256SUMS and the
    # rerun called tune's own files "edited since the run"; the marker now holds the staged files' sha256
    # and SHA256SUMS moves in last, so every file is vouched for by one or the other
    import os

    import primus.tuning.output as output

    job = user_dir(tmp_path / "jobs") / "small.yaml"
    out = tmp_path / "run"
    assert tune(str(job), "--out", str(out))[0] == 0
    real, moves = os.replace, []

    def killed(src: object, dst: object) -> None:
        into = Path(str(dst)).resolve()
        if out.resolve() in into.parents and not any(p.startswith(output.STAGING_PREFIX) for p in into.parts):
            moves.append(dst)
            if len(moves) == 5:  # two marker writes, then three of the run's files
                raise KeyboardInterrupt
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(output.os, "replace", killed)
    assert tune(str(job), "--out", str(out), "--rule", "mbs <= 2")[0] == 130
    monkeypatch.setattr(output.os, "replace", real)
    code, err = tune(str(job), "--out", str(out))
    assert code == 0, err
    assert CliRunner().invoke(report_cmd, [str(out)]).exit_code == 0
