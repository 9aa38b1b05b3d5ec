"""Rule records and the loaders for rule files, a job's `rules:` list and `--rule` texts.

Rule files are written by people and by an LLM, so the loader is strict: unknown keys are errors
(with a did-you-mean, because a misspelt `severity` silently meaning "hard" would hide intent),
every `require` is parsed at load time, ids must be unique, and every failure is one `InputError`
line naming the file, the rule and the reason. Whether the names a rule uses exist is only known
once the job's axes and facts are, so that check is `check_rule`, called later.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from primus.errors import InputError, did_you_mean
from primus.rules.expr import MAX_TEXT, Domain, Expr, RuleError, check, parse_rule
from primus.yamlio import load_yaml

Severity = Literal["hard", "soft"]
Origin = Literal["built-in", "user", "job", "inline", "llm"]
ORIGINS: tuple[str, ...] = get_args(Origin)
ID_PATTERN = r"^[a-z][a-z0-9_.:-]{0,63}$"
_ID_RE = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")

FILE_KEYS = ("id", "why", "source", "severity", "weight", "require")
REQUIRED_KEYS = ("id", "why", "source", "require")
_FRIENDLY = {
    "string_pattern_mismatch": "must start with a lowercase letter and use only a-z 0-9 _ . : - "
                               "(at most 64 characters)",
}


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Expr:
    """Rules are parsed when validated and again wherever `.parsed` is read; parse each text once."""
    return parse_rule(text)


class Rule(BaseModel):
    """One constraint over parallelism axes and facts; `require` must hold in every legal layout
    (hard) or is rewarded with `weight` when it holds (soft)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: Annotated[str, Field(pattern=ID_PATTERN)]
    why: Annotated[str, Field(max_length=300)] = ""
    source: Annotated[str, Field(max_length=500)] = ""
    severity: Severity = "hard"
    weight: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    require: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    origin: Origin = "user"

    @field_validator("why")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or "\r" in value:
            raise ValueError("must be one line")
        return value

    @field_validator("require")
    @classmethod
    def _parses(cls, value: str) -> str:
        try:
            _parse_cached(value)
        except RuleError as exc:
            raise ValueError(exc.reason) from None
        return value

    @property
    def parsed(self) -> Expr:
        """The rule's expression (parsed once per distinct text; validated at construction)."""
        try:
            return _parse_cached(self.require)
        except RuleError as exc:  # only reachable through model_construct, which skips validation
            raise InputError(f"rule {self.id}", "require", exc.reason) from None


def check_rule(rule: Rule, domains: Mapping[str, Domain], where: str) -> Domain:
    """Check a rule against the job's names (axes and facts); errors name `where` and the rule."""
    try:
        return check(rule.parsed, domains)
    except RuleError as exc:
        raise InputError(where, f"rule {rule.id}", exc.reason) from None


def load_rule_file(path: Path, origin: str) -> tuple[Rule, ...]:
    """Rules from a YAML file: one rule mapping, a list of them, or `{rules: [...]}`."""
    where = str(path)
    data = load_yaml(path)
    if isinstance(data, list):
        items: Any = data
    elif isinstance(data, dict) and "rules" in data:
        extra = sorted(str(k) for k in data if k != "rules")
        if extra:
            raise InputError(where, None, f"unknown top-level key {extra[0]!r} next to 'rules'")
        items = data["rules"]
    elif isinstance(data, dict):
        return (_rule(data, where, origin, 0, suggest=(*FILE_KEYS, "rules")),)
    else:
        raise InputError(where, None, "expected a rule mapping, a list of rules, or a mapping with a "
                                      "'rules' list")
    return rules_from_mappings(items, where, origin)


def rules_from_mappings(items: Any, where: str, origin: str) -> tuple[Rule, ...]:
    """Rules from a list of mappings (a rule file's body, or a job's `rules:` list)."""
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {ORIGINS}, got {origin!r}")
    if not isinstance(items, list):
        raise InputError(where, "rules", "must be a list of rule mappings")
    rules: list[Rule] = []
    first_index: dict[str, int] = {}
    for i, item in enumerate(items):
        rule = _rule(item, where, origin, i, suggest=FILE_KEYS)
        if rule.id in first_index:
            first = first_index[rule.id]
            raise InputError(where, f"rule {rule.id}", f"duplicate id (first used by rules[{first}])")
        first_index[rule.id] = i
        rules.append(rule)
    return tuple(rules)


def _rule(item: Any, where: str, origin: str, i: int, suggest: tuple[str, ...]) -> Rule:
    if not isinstance(item, dict):
        raise InputError(where, f"rules[{i}]", "must be a mapping with id, why, source and require")
    rid = item.get("id")
    named = isinstance(rid, str) and _ID_RE.fullmatch(rid) is not None

    def fail(key: str, reason: str) -> InputError:
        if named:
            return InputError(where, f"rule {rid}", f"{key}: {reason}")
        return InputError(where, f"rules[{i}].{key}", reason)

    for key in item:
        if key not in FILE_KEYS:
            hint = did_you_mean(str(key), suggest)
            if key == "origin":
                hint = " (origin is set by where the rule was loaded from)"
            raise fail(str(key), f"unknown key {str(key)!r}{hint}")
    for key in REQUIRED_KEYS:
        if key not in item:
            raise fail(key, "missing required key")
        if key in ("why", "source") and isinstance(item[key], str) and not item[key].strip():
            raise fail(key, "must not be empty")
    if item.get("severity") == "soft" and "weight" not in item:
        raise fail("weight", "a soft rule needs a weight (1..1000000)")
    if item.get("severity", "hard") == "hard" and "weight" in item:
        raise fail("weight", "weight applies only to soft rules")
    try:
        return Rule(**item, origin=cast(Origin, origin))
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "rule"
        ctx = err.get("ctx") or {}
        if err["type"] == "value_error" and "error" in ctx:
            reason = str(ctx["error"])
        else:
            reason = _FRIENDLY.get(err["type"], err["msg"])
        raise fail(key, reason) from None


def inline_where(text: str) -> str:
    """How an inline rule is named in errors: the command-line option that gave it."""
    flat = " ".join(str(text).split())
    if len(flat) > 80:
        flat = flat[:77] + "..."
    return f"--rule {shlex.quote(flat)}"


def inline_rules(texts: list[str]) -> tuple[Rule, ...]:
    """Hard rules given as bare expressions on the command line: ids inline-1, inline-2, ..."""
    rules = []
    for n, text in enumerate(texts, start=1):
        try:
            parse_rule(text)
        except RuleError as exc:
            raise InputError(inline_where(text), None, exc.reason) from None
        rules.append(Rule(id=f"inline-{n}", require=text, origin="inline"))
    return tuple(rules)
