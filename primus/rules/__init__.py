"""Rules: untrusted constraints over parallelism axes, parsed safely and compiled to CP-SAT.

`expr` parses, types, bounds and evaluates rule text; `cpsat` compiles it into a fully reified
literal (import it directly: OR-tools is loaded only when a CP-SAT model is built); `model` loads
rule files, a job's `rules:` list and `--rule` texts.
"""

from primus.rules.expr import (
    Domain,
    Expr,
    RuleError,
    annotate,
    check,
    evaluate,
    names,
    parse_expr,
    parse_rule,
    unparse,
)
from primus.rules.model import (
    Rule,
    check_rule,
    inline_rules,
    inline_where,
    load_rule_file,
    rules_from_mappings,
)

__all__ = [
    "Domain",
    "Expr",
    "Rule",
    "RuleError",
    "annotate",
    "check",
    "check_rule",
    "evaluate",
    "inline_rules",
    "inline_where",
    "load_rule_file",
    "names",
    "parse_expr",
    "parse_rule",
    "rules_from_mappings",
    "unparse",
]
