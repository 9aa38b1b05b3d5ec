"""`primus export --from-tune` reads what `primus tune` writes (issue 17, item 4): the real result.json of
a tune run, for every launch format, gives back the best layout and the job's own options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli

REPO = Path(__file__).resolve().parent.parent
SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _tune(root: Path, job: dict[str, object]) -> Path:
    """Run `primus tune --llm none` on a job and return its result.json."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    code, _, err = _cli("tune", str(root / "job.yaml"), "--llm", "none", "--workers", "1", "--out", str(root / "run"),
                        "--format", "json")
    assert code == 0, err
    return root / "run" / "result.json"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tune(tmp_path_factory.mktemp("tuned"), SMALL)


@pytest.fixture(scope="module")
def tuned_torchtitan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same job on the torchtitan stack: tune searches what torchtitan can run (FSDP only), so its
    best layout has a torchtitan launch config (a Megatron-LM job's best may be ZeRO-2, which has none)."""
    return _tune(tmp_path_factory.mktemp("tuned-tt"), {**SMALL, "stack": "torchtitan"})


@pytest.mark.parametrize("kind", ["megatron", "primus", "torchtitan"])
def test_a_real_tune_result_exports_its_best_layout(tuned: Path, tuned_torchtitan: Path, tmp_path: Path,
                                                    kind: str) -> None:
    if kind == "torchtitan":
        tuned = tuned_torchtitan
    out = tmp_path / f"launch.{kind}"
    code, _, err = _cli("export", "--from-tune", str(tuned), "--to", kind, "--out", str(out))
    assert code == 0, err
    code, stdout, err = _cli("import", "--from", kind, str(out), "--hardware", "h100-80gb", "--gpus", "8",
                             "--format", "json")
    assert code == 0, err
    best = json.loads(tuned.read_text())["best"]["parallel"]
    assert json.loads(stdout)["job"]["parallel"] == best


def test_the_jobs_own_options_and_a_model_given_by_path_travel_with_the_result(tmp_path: Path) -> None:
    """An HF config.json by path and the fp8 blockwise recipe: the export is of the job tune ran."""
    hf = REPO / "tests" / "data" / "hf" / "llama-Llama-3.1-8B" / "config.json"
    result = _tune(tmp_path / "t", {**SMALL, "model": str(hf), "precision": "fp8", "fp8_recipe": "blockwise"})
    code, stdout, err = _cli("export", "--from-tune", str(result), "--to", "megatron")
    assert code == 0, err
    assert "--fp8-recipe blockwise \\" in stdout and "--num-layers 32 \\" in stdout


def test_a_result_written_before_job_spec_existed_exports_with_its_gpus(tuned: Path, tmp_path: Path) -> None:
    """Older run directories hold only the summary `job` (both nodes and gpus, which agree)."""
    doc = json.loads(tuned.read_text())
    del doc["job_spec"]
    old = tmp_path / "result.json"
    old.write_text(json.dumps(doc))
    code, stdout, err = _cli("export", "--from-tune", str(old), "--to", "megatron")
    assert code == 0, err
    assert f"--micro-batch-size {doc['best']['parallel']['mbs']} \\" in stdout
