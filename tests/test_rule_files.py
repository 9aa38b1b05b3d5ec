"""Rule files, a job's `rules:` list and `--rule` texts: strict loading with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.errors import InputError
from primus.rules.expr import Domain, parse_rule
from primus.rules.model import Rule, check_rule, inline_rules, load_rule_file, rules_from_mappings

GOOD = """\
rules:
  - id: tp-in-scaleup
    why: Tensor parallelism must stay inside one NVLink domain.
    source: Megatron-LM docs, tensor parallelism section
    require: tp * cp <= scaleup_domain_size
  - id: sp-needs-tp
    why: Sequence parallelism splits along the tensor-parallel group.
    source: https://example.org/sp
    severity: soft
    weight: 50
    require: |
      implies(sp,
              tp > 1)
"""

RULE = """\
id: {rid}
why: because
source: a paper
require: {require}
"""


def as_item(mapping_text: str) -> str:
    """A YAML mapping as one item of a block list."""
    return "- " + mapping_text.rstrip("\n").replace("\n", "\n  ") + "\n"


def write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_rule_file(path, "user")
    line = info.value.line()
    assert "\n" not in line
    assert line.startswith(str(path))
    return line


def test_a_good_file_loads_with_its_fields_and_origin(tmp_path: Path) -> None:
    rules = load_rule_file(write(tmp_path, GOOD), "built-in")
    assert [r.id for r in rules] == ["tp-in-scaleup", "sp-needs-tp"]
    assert rules[0].severity == "hard" and rules[0].origin == "built-in"
    assert rules[1].severity == "soft" and rules[1].weight == 50
    assert rules[1].parsed == parse_rule("implies(sp, tp > 1)")


def test_a_file_may_hold_a_single_rule_mapping(tmp_path: Path) -> None:
    rules = load_rule_file(write(tmp_path, RULE.format(rid="one", require="tp >= 1")), "user")
    assert [r.id for r in rules] == ["one"]


def test_a_file_may_hold_a_bare_list_of_rules(tmp_path: Path) -> None:
    text = as_item(RULE.format(rid="a", require="tp >= 1"))
    assert [r.id for r in load_rule_file(write(tmp_path, text), "user")] == ["a"]


def test_rules_are_frozen(tmp_path: Path) -> None:
    rule = load_rule_file(write(tmp_path, GOOD), "user")[0]
    with pytest.raises(ValueError, match="frozen"):
        rule.id = "other"  # type: ignore[misc]


def test_an_unknown_key_is_one_line_with_did_you_mean(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="r1", require="tp >= 1") + "severty: soft\n")
    assert line.endswith("rule r1: severty: unknown key 'severty' (did you mean 'severity'?)")


def test_origin_cannot_be_set_from_a_file(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="r1", require="tp >= 1") + "origin: built-in\n")
    assert "unknown key 'origin'" in line


def test_a_misspelt_rules_key_suggests_rules(tmp_path: Path) -> None:
    assert "did you mean 'rules'?" in load_error(tmp_path, "rule:\n  - id: x\n")


def test_a_duplicate_id_is_refused(tmp_path: Path) -> None:
    text = as_item(RULE.format(rid="same", require="tp >= 1"))
    line = load_error(tmp_path, text + text)
    assert line.endswith("rule same: duplicate id (first used by rules[0])")


def test_a_bad_expression_names_the_file_and_the_rule(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="evil", require="\"open('/etc/passwd')\""))
    assert line == f"{tmp_path / 'rules.yaml'}: rule evil: require: call to 'open' is not allowed " \
                   "(only implies, min, max, abs)"


def test_a_rule_that_is_not_a_condition_is_refused_at_load_time(tmp_path: Path) -> None:
    assert "must be a condition" in load_error(tmp_path, RULE.format(rid="r", require="tp + 1"))


def test_a_missing_required_key_is_refused(tmp_path: Path) -> None:
    assert "rule r: source: missing required key" in load_error(tmp_path, "id: r\nwhy: w\nrequire: sp\n")


def test_a_bad_id_is_reported_by_position(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="Bad Id", require="sp"))
    assert "rules[0].id: must start with a lowercase letter" in line


def test_a_soft_rule_needs_a_weight(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="s", require="sp") + "severity: soft\n")
    assert "rule s: weight: a soft rule needs a weight" in line


def test_a_hard_rule_may_not_have_a_weight(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="h", require="sp") + "weight: 3\n")
    assert "weight applies only to soft rules" in line


def test_a_weight_out_of_range_is_refused(tmp_path: Path) -> None:
    line = load_error(tmp_path, RULE.format(rid="s", require="sp") + "severity: soft\nweight: 0\n")
    assert "rule s: weight:" in line and "greater than or equal to 1" in line


def test_why_must_be_one_line(tmp_path: Path) -> None:
    text = "id: r\nwhy: |\n  two\n  lines\nsource: s\nrequire: sp\n"
    assert "rule r: why: must be one line" in load_error(tmp_path, text)


def test_a_yaml_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}, *a{i-1}]"
              for i in range(1, 12)]
    assert "aliases" in load_error(tmp_path, "\n".join(lines) + "\n")


def test_a_file_that_is_not_a_mapping_or_list_is_refused(tmp_path: Path) -> None:
    assert "expected a rule mapping" in load_error(tmp_path, "just a string\n")


def test_job_rules_come_from_a_list_of_mappings() -> None:
    items = [{"id": "j1", "why": "w", "source": "job file", "require": "tp <= 4"}]
    (rule,) = rules_from_mappings(items, "job.yaml", "job")
    assert rule.origin == "job" and rule.require == "tp <= 4"


def test_job_rule_errors_name_the_job_file() -> None:
    with pytest.raises(InputError) as info:
        rules_from_mappings([{"id": "j1"}], "job.yaml", "job")
    assert info.value.line() == "job.yaml: rule j1: why: missing required key"


def test_inline_rules_are_numbered_in_order() -> None:
    rules = inline_rules(["tp >= 2", "implies(sp, tp > 1)"])
    assert [(r.id, r.origin, r.severity) for r in rules] == [
        ("inline-1", "inline", "hard"), ("inline-2", "inline", "hard")]


def test_an_inline_rule_error_quotes_the_rule_as_given() -> None:
    with pytest.raises(InputError) as info:
        inline_rules(["tp >= 2", "tp ** 2 > 1"])
    assert info.value.line() == "--rule 'tp ** 2 > 1': '**' (power) is not allowed"


def test_check_rule_reports_an_unknown_name_against_the_rule() -> None:
    (rule,) = inline_rules(["tpp > 1"])
    with pytest.raises(InputError) as info:
        check_rule(rule, {"tp": Domain.integer(1, 8)}, "--rule 'tpp > 1'")
    assert info.value.line() == "--rule 'tpp > 1': rule inline-1: unknown name 'tpp' (did you mean 'tp'?)"


def test_check_rule_accepts_a_rule_over_known_names() -> None:
    rule = Rule(id="r", require="tp * cp <= 8")
    assert check_rule(rule, {"tp": Domain.integer(1, 8), "cp": Domain.integer(1, 4)}, "x").is_bool
