"""Text from input is safe on a terminal (issue 20): control characters from a model file, a launch
file, a rule file or an LLM reply are never printed raw but shown escaped (ESC as \\x1b), and an error
message quotes at most a short excerpt of the offending value."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.safe_text import EXCERPT_CHARS, escape_controls, one_line

# An OSC sequence that retitles the terminal, then one that turns the text red, and a right-to-left
# override (input files are read line by line, so a carriage return ends the line there).
PAYLOAD = "evil\x1b]0;pwned\x07\x1b[31mred\u202eltr"
SHOWN = "evil\\x1b]0;pwned\\x07\\x1b[31mred\\u202eltr"
RAW = ("\x1b", "\x07", "\r", "\u202e")

HF_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "vocab_size": 128256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False}
SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def assert_escaped(text: str, shown: str = SHOWN) -> None:
    assert not any(c in text for c in RAW), repr(text[:300])
    assert shown in text


def test_escape_controls_shows_every_control_character_and_keeps_the_rest():
    assert escape_controls(PAYLOAD) == SHOWN
    assert escape_controls("over\rwrite\x9b2J\x00") == "over\\x0dwrite\\x9b2J\\x00"
    assert escape_controls("a\tb\nc", keep_layout=True) == "a\tb\nc"
    assert escape_controls("a\tb\nc") == "a\\x09b\\x0ac"
    assert escape_controls("héllo — ok") == "héllo — ok"


def test_models_show_of_a_config_json_whose_name_holds_an_escape_sequence_prints_it_escaped(tmp_path: Path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**HF_LLAMA, "_name_or_path": PAYLOAD}))
    code, out, err = run("models", "show", str(config))
    assert code == 2 and out == ""  # a name must be one printable line; the refusal quotes it escaped
    assert not any(c in err for c in RAW) and "\\x1b]0;pwned" in err


def test_models_show_escapes_a_display_name_from_a_model_file(tmp_path: Path):
    model = yaml.safe_load((Path(__file__).resolve().parent.parent / "models" / "llama3.1-8b.yaml").read_text())
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump({**model, "display_name": PAYLOAD}))
    code, out, _ = run("models", "show", str(path))
    assert code == 0
    assert_escaped(out)


def test_a_rule_whose_why_holds_control_characters_is_printed_escaped(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**SMALL, "parallel": {"tp": 1, "pp": 1}}))
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"id": "needs-tp", "why": PAYLOAD, "source": "test",
                                                "require": "tp >= 2"}]}))
    code, out, _ = run("fit", str(job), "--rules", str(rules))
    assert code == 1 and "needs-tp" in out
    assert_escaped(out)


def test_a_launch_file_option_with_control_characters_is_listed_escaped(tmp_path: Path):
    recipe = Path(__file__).resolve().parent / "data" / "launch" / "llama3_8b_h100_fp8.sh"
    launch = tmp_path / "train.sh"
    launch.write_text(recipe.read_text().rstrip() + f" \\\n    --unknown-flag '{PAYLOAD}'\n")
    code, out, err = run("import", "--from", "megatron", str(launch), "--hardware", "h100-80gb")
    assert code == 0, err
    assert "unknown-flag" in err
    assert_escaped(err)
    assert not any(c in out for c in RAW)  # the YAML on stdout quotes it escaped too


def test_an_error_quotes_a_short_excerpt_of_a_huge_model_name(tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({**SMALL, "model": "x" * 1_000_000 + "\x1b[2J"}))
    code, out, err = run("job", "show", str(job))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert len(err) < 1_000 and "x" * (EXCERPT_CHARS - 1) in err and "more characters" in err
    assert "\x1b" not in err


def test_one_line_keeps_ordinary_messages_as_they_are():
    line = "/tmp/some/where/job.yaml: parallel.tp: must be a power of two (got 3)"
    assert one_line(line) == line


def test_an_llm_reply_with_control_characters_never_reaches_the_terminal_raw(tmp_path: Path):
    from tests.helpers.fake_llm import fake_llm

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    reply = {"hypotheses": [{"text": PAYLOAD, "predicted_effect": PAYLOAD}],
             "rules": [{"id": "tp\x1b[2J", "why": PAYLOAD, "require": "tp <= 8"}]}
    with fake_llm([("json", reply)] * 4) as (url, _):
        code, out, err = run("tune", str(job), "--exhaustive-limit", "0", "--llm-base-url", url, "--llm-timeout",
                             "2", "--workers", "1", "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert not any(c in out + err for c in RAW)


def test_an_llm_reply_with_control_characters_is_shown_escaped_in_every_report_file(tmp_path: Path):
    # `cat report.md` (or report.html, a chart) in a terminal must not retitle or recolour it
    from tests.helpers.fake_llm import fake_llm

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    reply = {"hypotheses": [{"text": PAYLOAD + "\x00nul", "predicted_effect": PAYLOAD}],
             "rules": [{"id": "tp\x1b[2J", "why": PAYLOAD, "require": "tp <= 8"}]}
    out = tmp_path / "run"
    with fake_llm([("json", reply)] * 4) as (url, _):
        code, _, err = run("tune", str(job), "--exhaustive-limit", "0", "--llm-base-url", url, "--llm-timeout",
                           "2", "--workers", "1", "--out", str(out))
    assert code == 0, err
    for name in ("report.md", "report.html", *(f"charts/{p.name}" for p in (out / "charts").glob("*.svg"))):
        text = (out / name).read_text()
        assert not any(c in text for c in (*RAW, "\x00")), name
    assert SHOWN.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]") in (out / "report.md").read_text()
    assert SHOWN in (out / "report.html").read_text()
    assert run("audit", "verify", str(out), "--workers", "1")[0] == 0


def test_rich_markup_and_emoji_codes_in_a_rule_file_are_printed_as_written_on_a_colour_terminal(tmp_path: Path):
    # rich reads "[link=URL]" as markup and writes a hidden OSC 8 hyperlink; ":x:" would become an emoji
    why = "[link=https://evil.example]click[/link] [bold red]RED[/] :x:"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"id": "evil", "why": why, "source": "test", "require": "tp >= 16"}]}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(SMALL))
    result = CliRunner().invoke(cli, ["fit", str(job), "--rules", str(rules)], env={"FORCE_COLOR": "1"},
                                catch_exceptions=False)
    assert result.exit_code == 1
    assert "\x1b[1;31mDOES NOT FIT" in result.stdout  # the program's own styling still reaches the terminal
    assert "\x1b]8;" not in result.stdout and "evil.example" in result.stdout and "\u274c" not in result.stdout
    plain = "".join(part.split("m", 1)[-1] for part in result.stdout.split("\x1b["))  # without the highlighting
    assert why in plain


def test_an_imported_script_whose_file_name_holds_an_escape_names_its_model_with_the_escape_shown(tmp_path: Path):
    # the model is named after the file; the name is derived, not typed, so its control characters are shown
    # escaped (a refusal used to blame a `model.name` the file never wrote)
    from primus.launch import import_launch

    path = tmp_path / "evil\x1b[31m.sh"
    path.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 79 --hidden-size 8192 "
                    "--num-attention-heads 64 --seq-length 4096 --max-position-embeddings 4096 --vocab-size 32000 "
                    "--micro-batch-size 1 --global-batch-size 8 --bf16\n")
    config = import_launch("megatron", path, hardware="h100-80gb")
    model = config.job["model"]
    name = model["name"] if isinstance(model, dict) else model
    assert name == "evil\\x1b[31m" and "\x1b" not in name
