"""The Python API (`import primus`) gives the same answers as the CLI, as typed results.

Each test calls the API the way a notebook would and checks the answer against the CLI's
`--format json` document for the same job, so the two cannot drift apart.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import primus
from primus.cli.main import cli
from primus.errors import InputError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FITS = EXAMPLES / "llama3.1-70b-mi300x.yaml"
NO_FIT = EXAMPLES / "llama3.1-70b-h100-tp1.yaml"
FREE = EXAMPLES / "llama3.1-70b-mi300x-free.yaml"


def cli_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_load_job_reads_a_path_and_a_mapping_to_the_same_job() -> None:
    from_file = primus.load_job(FITS)
    from_dict = primus.load_job({"model": "llama3.1-70b", "hardware": "mi300x", "nodes": 2, "seq_len": 8192,
                                 "global_batch_size": 128,
                                 "parallel": dict(from_file.spec.parallel.pinned())})
    assert from_dict.model == from_file.model and from_dict.num_gpus == from_file.num_gpus == 16
    # Llama 3.1 70B: 70,553,706,496 parameters (HF safetensors index of meta-llama/Llama-3.1-70B)
    from primus.specs.params import count_params

    assert count_params(from_dict.model).total == 70_553_706_496


def test_load_job_refuses_bad_input_with_an_input_error() -> None:
    with pytest.raises(InputError, match="hardwre"):
        primus.load_job({"model": "llama3.1-70b", "hardwre": "mi300x", "gpus": 8, "seq_len": 4096,
                         "global_batch_size": 8})


def test_fit_proves_fit_as_the_cli_does() -> None:
    answer = primus.fit(FITS)
    assert answer.fits and not answer.negative and answer.layout is not None
    assert answer.to_json() == cli_json("fit", str(FITS))


def test_fit_explains_a_refusal_and_takes_rules() -> None:
    answer = primus.fit(NO_FIT)
    assert not answer.fits and answer.negative and "memory" in answer.result.violated_rules
    assert answer.to_json() == cli_json("fit", str(NO_FIT))
    limited = primus.fit(FREE, rules=["tp <= 4"])
    assert limited.fits and limited.layout is not None and limited.layout.tp <= 4


def test_enumerate_layouts_counts_and_ranks_as_the_cli_does() -> None:
    counted = primus.enumerate_layouts(FREE, count_only=True)
    assert counted.to_json() == cli_json("enumerate", str(FREE), "--count")  # the count and the assumptions
    assert "layouts" not in counted.to_json()
    ranked = primus.enumerate_layouts(FREE, rank=True, top=5)
    assert ranked.count == counted.count and len(ranked.rows) == 5
    speeds = [r["tokens_per_s_per_gpu"] for r in ranked.rows]
    assert speeds == sorted(speeds, reverse=True)
    assert ranked.to_json() == cli_json("enumerate", str(FREE), "--rank", "--top", "5")


def test_project_gives_the_cli_projection() -> None:
    answer = primus.project(FITS)
    assert answer.fits and answer.projection is not None
    assert answer.projection.tokens_per_s_per_gpu > 0 and answer.uncertainty.pct is not None
    assert answer.to_json() == cli_json("project", str(FITS))


def test_tune_writes_the_same_audited_run_as_the_cli(tmp_path: Path) -> None:
    answer = primus.tune(FREE, out=tmp_path / "api", workers=1)
    assert not answer.negative and answer.out_dir == tmp_path / "api"
    assert answer.to_json()["best"] == json.loads((tmp_path / "api" / "result.json").read_text())["best"]
    typed = CliRunner().invoke(cli, ["tune", str(FREE), "--llm", "none", "--workers", "1", "--out",
                                     str(tmp_path / "cli"), "--format", "json"])
    assert typed.exit_code == 0, typed.output
    assert json.loads(typed.stdout)["best"] == answer.best
    verify = CliRunner().invoke(cli, ["audit", "verify", str(tmp_path / "api"), "--workers", "1"])
    assert verify.exit_code == 0, verify.output


def test_tune_refuses_a_foreign_output_directory(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("precious")
    with pytest.raises(InputError):
        primus.tune(FREE, out=tmp_path, workers=1)
    assert (tmp_path / "thesis.tex").read_text() == "precious"
    assert sorted(tmp_path.iterdir()) == [tmp_path / "thesis.tex"]


def test_tune_refuses_a_convergence_change_it_may_not_make() -> None:
    with pytest.raises(InputError, match="global_batch_size"):
        primus.tune(FREE, out="unused", allow=["global_batch_size"])


SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


@pytest.mark.parametrize(("call", "named"), [
    (lambda out: primus.load_job(None), "not NoneType"),
    (lambda out: primus.load_job(b"job.yaml"), "not bytes"),
    (lambda out: primus.fit(5), "not int"),
    (lambda out: primus.fit(SMALL, rules="tp <= 4"), "rules: a list of strings"),
    (lambda out: primus.fit(SMALL, rules=5), "rules: a list of strings"),
    (lambda out: primus.fit(SMALL, without=[5]), "without: a list of strings"),
    (lambda out: primus.enumerate_layouts(SMALL, top=-1), "top: an integer of at least 1, not -1"),
    (lambda out: primus.enumerate_layouts(SMALL, top="5"), "top: an integer of at least 1"),
    (lambda out: primus.tune(SMALL, out=5), "out: a directory's path"),
    (lambda out: primus.tune(SMALL, out=out, workers=0), "workers: an integer from 1 to 256, not 0"),
    (lambda out: primus.tune(SMALL, out=out, llm=5), "llm_base_url: must be a string or null"),
    (lambda out: primus.tune(SMALL, out=out, llm_calls=1000), "llm_calls: must be an integer from 0 to 100"),
    (lambda out: primus.tune(SMALL, out=out, allow="precision"), "allow: a list of strings"),
])
def test_an_argument_of_the_wrong_type_or_range_is_an_input_error_naming_it(call, named: str, tmp_path: Path) -> None:
    # a notebook passes data too: never a TypeError, never a silently wrong answer (top=-1 dropped a row)
    with pytest.raises(InputError, match=re.escape(named)):
        call(tmp_path / "run")
    assert not (tmp_path / "run").exists()
