"""The stacks on the command line: malformed releases refused, notes said on one line, tables and docs
rendered as written, and the stack and the verdict fields wherever a job's answer is printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.stacks.doc import _cell, render
from tests.conftest import as_json

BASE = {"model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192, "global_batch_size": 128}
# Llama 3 8B on 8 H100 80GB at 3,072 tokens, TP1 without recompute: 71.63 GiB, 1.87 GiB headroom, under the
# allocator reserve (6% of 78.19 GiB, 4.69 GiB): `tight`
TIGHT = {**BASE, "seq_len": 3072, "parallel": {"tp": 1, "pp": 1, "cp": 1, "vp": 1, "mbs": 1, "sp": False,
                                               "recompute": "none", "sharding": "dist_opt"}}


@pytest.mark.parametrize(("release", "why"), [("2024.13", "month 13 is not 01 to 12"),
                                              ("2024", "it is not YYYY.MM"),
                                              ("2024.00", "month 00 is not 01 to 12")])
def test_a_month_labelled_stack_refuses_a_release_that_is_not_a_month(run_cli, write_job, release: str,
                                                                      why: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("fit", write_job(BASE), "--stack", f"torchtitan@{release}", "--format", "json")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(f"primus: --stack: release '{release}' of torchtitan: {why}")


def test_stacks_show_refuses_a_month_that_does_not_exist(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("stacks", "show", "torchtitan@2024.13")
    assert (code, out, err.count("\n")) == (2, "", 1) and "'2024.13'" in err and "month 13" in err


def test_a_malformed_release_in_the_job_file_names_the_file_and_its_stack_key(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**BASE, "stack": "torchtitan@2024.13"})
    code, _, err = run_cli("job", "show", path)
    assert code == 2 and err.startswith(f"primus: {path}: stack: release '2024.13'")


def test_a_bad_stack_option_names_the_option_not_the_files_field(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("fit", write_job(BASE), "--stack", "foo")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("primus: --stack: unknown stack 'foo'")


@pytest.mark.parametrize(("ref", "says"), [("nemo@25.01", "nemo@25.01 is not described; using nemo@24.07"),
                                           ("nemo@23.01", "nemo@23.01 is older than every described release; "
                                                          "using the oldest, nemo@24.07")])
def test_an_undescribed_release_newer_or_older_says_which_it_uses(run_cli, write_job, ref: str,
                                                                  says: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("fit", write_job(BASE), "--stack", ref, "--format", "json")
    assert code in (0, 1) and says in as_json(out)["assumptions"][0]
    # the defaults of another release apply: said on stderr too, not only in the assumption list
    assert err.startswith(f"primus: note: {says}") and err.count("\n") == 1
    code, _, err = run_cli("stacks", "show", ref)
    assert code == 0 and err.startswith(f"primus: note: {says}") and err.count("\n") == 1  # one line


def test_stacks_list_title_is_printed_as_written(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("stacks", "list")
    assert code == 0 and out.splitlines()[0].strip() == "Stacks (job key `stack: NAME[@RELEASE]`)"


def test_docs_cells_escape_markdown_specials() -> None:
    assert _cell("configs/*/*_workload|`x`") == "configs/\\*/\\*\\_workload\\|\\`x\\`"
    # Megatron-Bridge's source path renders as written, not in italics
    assert "configs/\\*/\\*\\_workload_base_configs.py" in render()
    assert "configs/*/*_workload" not in render()


def test_enumerate_lists_the_stack_in_its_assumptions(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job(TIGHT)
    code, out, _ = run_cli("enumerate", path, "--stack", "nemo@23.01", "--format", "json")
    assert code == 0 and as_json(out)["assumptions"][0].startswith("stack nemo@24.07 (nemo@23.01 is older")
    code, out, _ = run_cli("enumerate", path)
    assert code == 0 and "assumptions:\n  - stack megatron-lm@" in out


def test_memory_json_carries_fits_verdict_fields(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job(TIGHT)
    _, out, _ = run_cli("memory", path, "--format", "json")
    _, fit_out, _ = run_cli("fit", path, "--format", "json")
    mem, fit = as_json(out), as_json(fit_out)
    keys = ("verdict", "tight", "tight_by_bytes", "allocator_reserve_bytes", "over_hbm")
    assert mem["verdict"] == "tight" and mem["tight_by_bytes"] > 0
    assert {k: mem[k] for k in keys} == {k: fit[k] for k in keys}


@pytest.mark.parametrize(("ref", "says"), [
    # NVIDIA/Megatron-LM tag core_v0.14.0 tags 23e00ed096 of 2025-10-08 (the branch core_r0.14.0 has no tag)
    ("megatron-lm@core_r0.14", "megatron-lm@core_r0.14 is core_r0.14.0 of 2025-10-08 (NVIDIA/Megatron-LM tag "
                               "core_v0.14.0, commit 23e00ed096): read as 2025.10; megatron-lm@2025.10 is not "
                               "described; using megatron-lm@2025.03"),
    # tag core_v0.18.0: ba7b5ebce1 of 2026-06-22, the month of a described release
    ("megatron-lm@core_v0.18.0", "megatron-lm@core_v0.18.0 is core_v0.18.0 of 2026-06-22 (NVIDIA/Megatron-LM tag "
                                 "core_v0.18.0, commit ba7b5ebce1): read as 2026.06"),
])
def test_megatron_lm_release_names_resolve_as_the_month_of_their_tag(run_cli, ref: str, says: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("stacks", "show", ref, "--format", "json")
    assert code == 0 and as_json(out)["note"].startswith(says)
    code, _, err = run_cli("stacks", "show", ref)
    assert code == 0 and err.startswith(f"primus: note: {says}") and err.count("\n") == 1


def test_an_unknown_megatron_lm_release_name_is_one_line_with_a_suggestion(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("stacks", "show", "megatron-lm@core_r0.9.9")  # a patch release primus has no tag for
    assert (code, out, err.count("\n")) == (2, "", 1) and "did you mean 'core_r0.9.0'?" in err


def test_a_stack_name_in_the_wrong_case_is_refused_with_the_name(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("stacks", "show", "Megatron-LM")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "unknown stack 'Megatron-LM' (did you mean 'megatron-lm'? stack names are lowercase)" in err
    code, _, err = run_cli("fit", write_job(BASE), "--stack", "TorchTitan@2024.12")
    assert code == 2 and "did you mean 'torchtitan'?" in err


def test_the_release_megatron_exports_name_in_their_header_resolves(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("export", write_job(TIGHT), "--to", "megatron")
    assert code == 0
    header = next(line for line in out.splitlines() if "argument names" in line)
    release = header.split("Megatron-LM ", 1)[1].split(" ", 1)[0]  # "core_r0.14"
    code, _, err = run_cli("stacks", "show", f"megatron-lm@{release}")
    assert code == 0 and "read as" in err


@pytest.mark.parametrize(("ref", "why"), [("nemo@2024.01", "it is not YY.MM"), ("nemo@25.13", "month 13"),
                                          ("megatron-bridge@26.00", "month 00")])
def test_a_container_version_stack_takes_only_container_versions(run_cli, ref: str, why: str) -> None:  # type: ignore[no-untyped-def]
    # NeMo and Megatron-Bridge releases are container versions (YY.MM): 2024.01 would order after 25.04
    code, out, err = run_cli("stacks", "show", ref)
    assert code == 2 and out == "" and err.count("\n") == 1 and why in err


def test_a_published_month_resolves_a_container_version_stack_by_its_year() -> None:
    from primus.stacks.core import _lenient

    assert _lenient("nemo", "2024.09").release == "24.07" and _lenient("nemo", "2025.06").release == "25.04"


def test_an_empty_stack_option_names_the_option(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-8b\nhardware: h100-80gb\ngpus: 8\nseq_len: 4096\nglobal_batch_size: 64\n")
    code, out, err = run_cli("fit", str(job), "--stack", "")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("primus: --stack: is empty")


def test_megatron_lm_release_names_read_in_any_case_and_suggest_only_their_own_series(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run_cli("stacks", "show", "megatron-lm@CORE_V0.8.0")
    assert code == 0 and "is core_v0.8.0 of 2024-08-12" in err
    assert "did you mean 'core_v0.8.0'" in run_cli("stacks", "show", "megatron-lm@core_v0.8.1")[2]
    code, _, err = run_cli("stacks", "show", "megatron-lm@core_v0.3.0")  # no 0.3 release: no suggestion years off
    assert code == 2 and "did you mean" not in err and "core_r0.4.0 to core_v0.19.0" in err


@pytest.mark.parametrize("command", [("import", "--from", "primus"), ("fit", "--from", "primus")])
def test_a_launch_file_read_under_an_undescribed_release_says_which_it_uses_on_stderr(
        run_cli, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    # import and `--from` read the job without `read_job`: the note is said there too (review 45, L1)
    experiment = Path(__file__).parent / "data" / "launch" / "primus_llama3.1_70B-BF16-pretrain.yaml"
    code, _, err = run_cli(*command, str(experiment), "--stack", "primus@25.1", "--hardware", "mi300x",
                           "--nodes", "1")
    assert code in (0, 1)
    assert "primus: note: primus@25.1 is older than every described release; using the oldest, primus@26.1" in err
