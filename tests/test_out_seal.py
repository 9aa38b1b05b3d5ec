"""A file primus writes with --out carries a seal (the SHA-256 of the rest), so that writing it again
never destroys what the user added since (the export header invites "add your own"): an edited file is
refused (exit 2, one line, the file untouched) unless --force asks to replace it (hostile review 50, M8)."""

from __future__ import annotations

import json
from pathlib import Path

from primus.report.owned import edited, seal

JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64,
       "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 4, "mbs": 1, "sp": True,
                    "recompute": "none", "sharding": "dist_opt"}}


def test_a_sealed_text_is_unedited_and_any_change_shows() -> None:
    text = seal("--tensor-model-parallel-size 2\n")
    assert not edited(text)
    assert edited(text.replace("2", "4", 1))
    assert edited(text + "--data-path /my/data\n")  # a line after the seal
    assert edited("--tensor-model-parallel-size 2\n")  # no seal: an edit cannot be ruled out


def test_a_sealed_json_document_is_still_json_and_unedited() -> None:
    text = seal(json.dumps({"kind": "megatron", "release": "r"}, indent=2) + "\n")
    assert json.loads(text)["kind"] == "megatron" and not edited(text)
    assert edited(text.replace('"r"', '"s"'))


def test_an_export_over_its_own_unedited_file_replaces_it(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "train.sh"
    path = write_job(JOB)
    assert run_cli("export", path, "--to", "megatron", "--out", str(out))[0] == 0
    assert run_cli("export", path, "--to", "megatron", "--out", str(out))[0] == 0


def test_an_export_over_an_edited_file_is_refused_and_keeps_the_edit(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "train.sh"
    path = write_job(JOB)
    run_cli("export", path, "--to", "megatron", "--out", str(out))
    out.write_text(out.read_text() + "    --data-path /my/precious/data\n")
    before = out.read_text()
    code, stdout, err = run_cli("export", path, "--to", "megatron", "--out", str(out))
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert "train.sh: --out: was edited since `primus export` wrote it" in err and "--force" in err
    assert out.read_text() == before


def test_force_replaces_an_edited_export(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "train.sh"
    path = write_job(JOB)
    run_cli("export", path, "--to", "megatron", "--out", str(out))
    out.write_text(out.read_text() + "    --data-path /my/precious/data\n")
    assert run_cli("export", path, "--to", "megatron", "--out", str(out), "--force")[0] == 0
    assert "precious" not in out.read_text() and not edited(out.read_text())


def test_an_import_over_an_edited_job_file_is_refused(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    line, job = tmp_path / "train.sh", tmp_path / "imported.yaml"
    run_cli("export", write_job(JOB), "--to", "megatron", "--out", str(line))
    for fmt in ("yaml", "json"):
        first = run_cli("import", "--from", "megatron", str(line), "--format", fmt, "--out", str(job))
        assert first[0] == 0, first[2]
        job.write_text(job.read_text().replace("h100-80gb", "h200"))
        code, _, err = run_cli("import", "--from", "megatron", str(line), "--format", fmt, "--out", str(job))
        assert code == 2 and "was edited since `primus import` wrote it" in err
        assert run_cli("import", "--from", "megatron", str(line), "--format", fmt, "--out", str(job),
                       "--force")[0] == 0


def test_force_is_documented_in_help(run_cli) -> None:  # type: ignore[no-untyped-def]
    for command in ("export", "import", "calibrate"):
        assert "--force" in run_cli(command, "--help")[1]


def test_an_edited_calibration_profile_is_refused_and_force_allows_it(tmp_path: Path) -> None:
    import pytest

    from primus.cli.fidelity_cmds import CALIBRATED_HEADER, _calibrated
    from primus.errors import InputError
    from primus.report.owned import check_replaceable, replace_file

    target = tmp_path / "a100-80gb.yaml"
    replace_file(target, CALIBRATED_HEADER + "a100-80gb\nname: a100-80gb\n", written_by=_calibrated,
                 command="calibrate")
    check_replaceable(target, written_by=_calibrated, command="calibrate")  # unedited: replaceable
    target.write_text(target.read_text() + "# my note\n")
    with pytest.raises(InputError) as exc:
        check_replaceable(target, written_by=_calibrated, command="calibrate")
    assert "was edited since `primus calibrate` wrote it" in exc.value.reason
    check_replaceable(target, written_by=_calibrated, command="calibrate", force=True)
