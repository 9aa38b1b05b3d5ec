"""Text from input is escaped in the report (issue 17, item 1): report.html, report.md and the charts.

A hostile run carries markup in every text field that comes from input and reaches the report: a rule
file's `why` and `source` (`--rules FILE`), an LLM's hypotheses and rule ids (a stub endpoint), the
model's name from a Hugging Face config, the hardware's display name, and the job file's comments,
copied there by `primus import` from a Megatron launch script. Rule ids from files cannot hold markup
at all: they are refused when loaded. tests/test_report_browser.py loads the same report in Chromium.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from primus.cli.main import cli
from primus.report.markdown import md_code, md_fence, md_text
from tests.conftest import REPO
from tests.helpers.fake_llm import fake_llm

# Each payload sets an attribute on <html> if it runs: tests/test_report_browser.py looks for it.
SCRIPT = "<script>document.documentElement.setAttribute('data-pwned','{}')</script>"
IMG = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','{}')\">"
MD = " | `tick` *em* _u_ [link](javascript:alert(1)) ![i](http://example.invalid/i.png)"
PAYLOADS = {
    "rule why": "why " + SCRIPT.format("why") + MD,
    "rule source": "source " + IMG.format("source") + MD,
    "LLM hypothesis": "hypothesis " + SCRIPT.format("hypothesis") + MD,
    "LLM rule id": "rid<img src=x onerror=document.documentElement.dataset.pwned=1>",  # ids: at most 64
    "model name": IMG.format("hf-name"),  # `_name_or_path`: primus keeps the part after the last "/"
    "hardware name": "H100 " + SCRIPT.format("hardware"),
    "job comment": SCRIPT.format("comment") + MD,
    "launch file option": SCRIPT.format("launch"),
}


def hostile_run(root: Path) -> Path:
    """A guided `primus tune` run whose every input text carries markup; returns the run directory."""
    root.mkdir(parents=True, exist_ok=True)
    config = json.loads((REPO / "tests/data/hf/llama-Llama-3.1-8B/config.json").read_text())
    config["_name_or_path"] = "org/" + PAYLOADS["model name"]
    (root / "config.json").write_text(json.dumps(config))
    script = (REPO / "tests/data/launch/llama3_8b_h200_bf16.sh").read_text()
    option = f"--wandb-exp-name \"{PAYLOADS['launch file option']}\" --seq-length"
    (root / "launch.sh").write_text(script.replace("--seq-length", option, 1))
    runner = CliRunner()
    imported = runner.invoke(cli, ["import", "--from", "megatron", str(root / "launch.sh"), "--hardware",
                                   "h100-80gb"], catch_exceptions=False)
    assert imported.exit_code == 0, imported.stderr
    comments = [line for line in imported.stdout.splitlines() if line.startswith("#")]
    body = {"model": "config.json", "hardware": {"base": "h100-80gb", "display_name": PAYLOADS["hardware name"]},
            "gpus": 16, "seq_len": 4096, "global_batch_size": 32}
    (root / "job.yaml").write_text("\n".join([f"# {PAYLOADS['job comment']}", *comments])
                                   + "\n" + yaml.safe_dump(body, sort_keys=False))
    rule = {"id": "pp-two", "why": PAYLOADS["rule why"], "source": PAYLOADS["rule source"], "require": "pp >= 2"}
    (root / "rules.yaml").write_text(yaml.safe_dump({"rules": [rule]}))
    reply = {"hypotheses": [{"text": PAYLOADS["LLM hypothesis"], "predicted_effect": "faster"}],
             "rules": [{"id": PAYLOADS["LLM rule id"], "why": "w", "require": "tp <= 8"}]}
    out = root / "run"
    with fake_llm([("json", reply)] * 4) as (url, script_):
        result = runner.invoke(cli, ["tune", str(root / "job.yaml"), "--rules", str(root / "rules.yaml"), "--out",
                                     str(out), "--exhaustive-limit", "0", "--llm-base-url", url, "--llm-calls", "2",
                                     "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert script_.requests, "the stub LLM was never asked: the LLM fields would not be tested"
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_run(tmp_path_factory.mktemp("hostile"))


def visible(field: str) -> str:
    """The part of a payload a reader must see: the LLM's rule id is lower-cased and cut by the tuner."""
    payload = PAYLOADS[field].split(" | ")[0]
    return payload[:30].lower() if field == "LLM rule id" else payload.lower()


class _Elements(HTMLParser):
    """Every element of a page, and every attribute that names an event handler."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.handlers += [f"{tag} {name}" for name, _ in attrs if name.startswith("on")]


def test_every_payload_reaches_the_report_as_text(hostile: Path):
    """The test is only worth something if each payload is in the report; HTML shows it as text."""
    page = (hostile / "report.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page)).lower()  # what a reader sees
    for field in PAYLOADS:
        assert visible(field) in text, field


def test_report_html_holds_no_markup_from_input(hostile: Path):
    page = (hostile / "report.html").read_text()
    parsed = _Elements()
    parsed.feed(page)
    assert not parsed.tags & {"script", "img", "iframe", "object", "embed", "a", "form", "link", "base"}
    assert parsed.handlers == []
    assert "<script" not in page.lower() and "<img" not in page.lower()


def test_report_html_forbids_scripts_with_a_content_security_policy(hostile: Path):
    page = (hostile / "report.html").read_text()
    head = page[:page.index("<title>")]  # before any text from input
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', head)
    assert policy is not None
    directives = dict(d.strip().split(" ", 1) for d in policy.group(1).split(";"))
    assert directives["default-src"] == "'none'"  # no script, no fetch
    assert "script-src" not in directives and directives["style-src"] == "'unsafe-inline'"


def test_charts_hold_no_markup_from_input(hostile: Path):
    for svg in (hostile / "charts").glob("*.svg"):
        text = svg.read_text()
        assert "<script" not in text.lower() and "<img" not in text.lower(), svg.name


def test_report_md_holds_no_markup_from_input(hostile: Path):
    md = (hostile / "report.md").read_text()
    outside_fences = re.sub(r"(?ms)^(`{3,})yaml\n.*?^\1$", "", md)
    assert "<script" not in outside_fences.lower() and "<img" not in outside_fences.lower()
    # no link or image but the report's own charts: every other "](" is escaped
    assert not re.search(r"(?<!\\)\]\((?!charts/)", outside_fences)
    why = next(line for line in md.splitlines() if line.startswith("| pp-two |"))
    assert why.count(" | ") + 2 == why.count("|") - why.count("\\|")  # the payload's pipes split no cell
    assert "\\`tick\\` \\*em\\* \\_u\\_ \\[link\\](javascript:alert(1))" in why


# A CommonMark renderer with GitHub's tables and strikethrough, as a pull-request view renders report.md.
COMMONMARK = MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _shown(rendered: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", rendered))


def test_report_md_renders_no_element_from_input(hostile: Path):
    rendered = COMMONMARK.render((hostile / "report.md").read_text())
    parsed = _Elements()
    parsed.feed(rendered)
    assert not parsed.tags & {"script", "iframe", "object", "embed", "a", "form", "link", "base", "del", "s"}
    assert parsed.handlers == []
    assert sorted(re.findall(r'<img src="([^"]+)"', rendered)) == sorted(f"charts/{c}.svg" for c in
                                                                        ("memory", "timeline", "scatter", "progress"))
    shown = _shown(rendered).lower()
    for field in PAYLOADS:
        assert " ".join(visible(field).split()) in shown, field


PIECES = st.sampled_from([*"ab1 _*`[]()!<>&|\\#-+=.~:/\"'\n\t;", "&amp;", "&#60;", "http://x", "<b>", "1.", "- ", "# ",
                          "```", "~~", "![i](u)"])
FRAMES = {"paragraph": "{}\n", "list item": "- {}\n", "table cell": "| h |\n|---|\n| {} |\n", "emphasis": "*{}*\n",
          "heading": "# {}\n"}


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_escaped_text_renders_as_exactly_its_characters_wherever_the_template_puts_it(text: str):
    want = " ".join(text.split())
    assume(want)
    for frame, template in FRAMES.items():
        rendered = COMMONMARK.render(template.format(md_text(want)))
        if frame == "table cell":
            cell = re.search(r"<td>(.*?)</td>", rendered, re.S)
            assert cell is not None, rendered
            rendered = cell.group(1)
        assert _shown(rendered).strip() == want, (frame, md_text(want), rendered)


@settings(max_examples=200, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_a_code_span_shows_exactly_its_text_in_a_table_cell(text: str):
    want = " ".join(text.split())
    assume(want)
    rendered = COMMONMARK.render(f"| h |\n|---|\n| {md_code(want)} |\n")
    code = re.search(r"<td><code>(.*?)</code></td>", rendered, re.S)
    assert code is not None and html.unescape(code.group(1)) == want, (md_code(want), rendered)


def test_the_job_file_is_shown_verbatim_in_a_fence_it_cannot_close(hostile: Path):
    md = (hostile / "report.md").read_text()
    job = (hostile / "inputs" / "job.yaml").read_text()
    fence = re.search(r"(?ms)^(`{3,})yaml\n(.*?)\n\1$", md)
    assert fence is not None and fence.group(2) == job.rstrip("\n")


def test_a_rule_id_from_a_file_cannot_hold_markup(tmp_path: Path, run_cli):
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"rules": [{"id": SCRIPT.format("id"), "why": "w", "source": "s",
                                                "require": "pp >= 2"}]}))
    code, _, err = run_cli("tune", str(REPO / "examples" / "llama3.1-70b-mi300x.yaml"), "--rules", str(rules),
                           "--llm", "none", "--out", str(tmp_path / "run"))
    last = err.strip().splitlines()[-1]
    assert code == 2 and "rules[0].id" in last and "must start with a lowercase letter" in last


@pytest.mark.parametrize(("text", "shown"), [
    ("a | b", "a \\| b"),
    ("<b>x</b> & y", "&lt;b&gt;x&lt;/b&gt; &amp; y"),
    ("[t](u) ![i](v)", "\\[t\\](u) !\\[i\\](v)"),
    ("`c` *e* _u_ ~s~ \\", "\\`c\\` \\*e\\* \\_u\\_ \\~s\\~ \\\\"),
    ("line\n# heading", "line \\# heading"),
    ("# heading #", "\\# heading \\#"),
    ("- item", "\\- item"),
    ("1. item", "1\\. item"),
    ("tp_comm __init__ a_ _b", "tp_comm \\_\\_init\\_\\_ a\\_ \\_b"),
    ("-0.123", "-0.123"),
    ("+1.5", "+1.5"),
])
def test_markdown_text_is_escaped(text: str, shown: str):
    assert md_text(text) == shown


def test_markdown_code_spans_and_fences_cannot_be_closed_from_inside():
    assert md_code("a ``b`` | c") == "``` a ``b`` \\| c ```"
    assert md_code("tp <= 8") == "`tp <= 8`"
    assert md_fence("x\n```\ny", "yaml") == "````yaml\nx\n```\ny\n````"
    assert md_text(md_code("a_b")) == "`a_b`"  # built Markdown is not escaped twice
