"""Specification of what `primus models show` and `models list` say about active parameters, and how
they answer a mistyped model.

Publishers count "active" parameters two ways: Mistral and Qwen include the input embedding, DeepSeek,
Moonshot and OpenAI leave it out. `models show` states which convention each figure follows, prints
both, and labels the catalog's published figure with its own convention, so 5.71B and OpenAI's 5.13B
for gpt-oss-120b are not read as a disagreement.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from primus.cli.main import cli

HF = Path(__file__).parent / "data" / "hf"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def table_rows(out: str) -> dict[str, str]:
    """The field → value rows of a `models show` table."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    return {c[0]: c[1] for c in cells if len(c) == 2}


def show_json(model: str) -> dict[str, object]:
    code, out = run("models", "show", model, "--format", "json")
    assert code == 0, out
    return json.loads(out)


def test_gpt_oss_120b_without_the_input_embedding_is_openais_published_5_13b() -> None:
    # arXiv:2508.10925 Table 1: 5.13B active, the embedding excluded (to 0.01B)
    doc = show_json("gpt-oss-120b")
    assert doc["active_params"] == 5_711_982_912
    assert doc["active_params_without_input_embedding"] == 5_132_849_472


def test_the_json_states_the_active_convention() -> None:
    convention = str(show_json("gpt-oss-120b")["active_params_convention"])
    assert convention.startswith("parameters one token passes through: the input embedding, the output layer")


def test_the_published_figure_carries_its_convention_in_the_json() -> None:
    # arXiv:2405.04434 Appendix B: DeepSeek-V2-Lite 2.4B activated, the input embedding not counted
    published = show_json("deepseek-v2-lite")["published"]
    assert published == {**published, "active": 2_400_000_000, "active_excludes_input_embedding": True}


def test_the_table_labels_each_active_figure_with_its_convention() -> None:
    code, out = run("models", "show", "gpt-oss-120b")
    rows = table_rows(out)
    assert code == 0
    assert rows["active params (input embedding included)"] == "5,711,982,912"
    assert rows["active params without the input embedding"] == "5,132,849,472"
    assert rows["published active (without the input embedding, rounded)"] == "5,130,000,000"


def test_a_published_figure_that_counts_the_embedding_is_labelled_so() -> None:
    # Mistral AI (mistral.ai/news/mixtral-8x22b): 39B active, embedding included
    code, out = run("models", "show", "mixtral-8x22b")
    assert code == 0 and table_rows(out)["published active (with the input embedding, rounded)"] == "39,000,000,000"


def test_the_list_table_title_states_the_convention() -> None:
    code, out = run("models", "list")
    assert code == 0
    assert out.splitlines()[0].strip() == \
        "Models (active: parameters one token passes through, input embedding included)"


def test_the_list_csv_gives_both_active_figures() -> None:
    code, out = run("models", "list", "--format", "csv")
    assert code == 0
    header = out.splitlines()[0].split(",")
    assert header[:4] == ["name", "total_params", "active_params", "active_params_without_input_embedding"]


def test_a_model_name_in_the_wrong_case_gets_a_did_you_mean() -> None:
    code, out = run("models", "show", "LLAMA3.1-8B")
    assert code == 2
    assert out.strip() == ("primus: command line: MODEL: unknown model 'LLAMA3.1-8B' (did you mean 'llama3.1-8b'?); "
                           "see `primus models list`")


def test_a_directory_holding_a_config_json_is_refused_pointing_at_it() -> None:
    folder = HF / "llama-Llama-3.1-8B"
    code, out = run("models", "show", str(folder))
    assert code == 2
    assert out.strip() == (f"primus: command line: MODEL: {str(folder)!r} is a directory; a model is a file, a "
                           f"Hugging Face config.json or a model YAML (did you mean {str(folder / 'config.json')!r}?)")
