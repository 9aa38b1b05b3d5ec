"""Safe, bounded YAML and JSON loading for user-supplied files.

Job, model, hardware and rule files come from users and (for rules) from an LLM, so loading is
capped: file size, anchors/aliases (no "billion laughs"), nesting depth and the number of nodes after
alias expansion. Duplicate keys are errors, because YAML silently keeping the last one hides typos.
The files primus ships itself (catalogs, profiles, stacks, rules, error bars) are parsed with libyaml
when PyYAML has it, with the same key and integer checks (`is_shipped`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from primus.errors import InputError

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_ALIASES = 64
MAX_NODES = 200_000
MAX_DEPTH = 64
# Integers longer than this are refused while parsing. No field of any spec holds more than 19 digits
# (the widest bounds are 2**50 bytes and 1e18); a hundred leaves room for launch-config keys primus
# does not model, and stays far below the 4,300 digits past which Python refuses to convert a string
# to an int (CPython's int_max_str_digits, a ValueError that would otherwise escape as a traceback).
MAX_INT_DIGITS = 100


def int_too_long(text: str) -> str | None:
    """Why a numeral is refused (one line), or None when it is short enough to convert."""
    digits = sum(ch.isalnum() for ch in text)
    if digits <= MAX_INT_DIGITS:
        return None
    return f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS} are read)"


class _IntTooLong(ValueError):
    pass


def bounded_json_int(text: str) -> int:
    """`json.loads(parse_int=...)`: a ValueError for an integer of more than MAX_INT_DIGITS digits."""
    reason = int_too_long(text)
    if reason is not None:
        raise _IntTooLong(reason)
    return int(text)


class _Checks:
    """What every YAML primus reads must satisfy: scalar, unique mapping keys and integers short
    enough to convert (mixed into the loaders below)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[attr-defined]
            if isinstance(key, (list, dict)):
                raise yaml.YAMLError("mapping keys must be scalars")
            if key in seen:
                raise yaml.YAMLError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        reason = int_too_long(str(node.value))
        if reason is not None:
            raise yaml.constructor.ConstructorError(None, None, reason, node.start_mark)
        return int(super().construct_yaml_int(node))  # type: ignore[misc]


class _BoundedLoader(_Checks, yaml.SafeLoader):
    """SafeLoader that counts aliases and refuses duplicate mapping keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases")
        return super().compose_node(parent, index)


_Fast: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _ShippedLoader(_Checks, _Fast):  # type: ignore[valid-type, misc]
    """The loader for the files primus ships (catalogs, profiles, stacks, its error bars): libyaml's
    parser when PyYAML has it (several times faster on the 40 kB error-bar table every `project` reads),
    with the same key and integer checks. These files are written by this project, so the alias cap
    that guards user files is not needed; the node budget (`_check_size`) still applies."""


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)  # type: ignore[type-var]
_ShippedLoader.add_constructor("tag:yaml.org,2002:int", _ShippedLoader.construct_yaml_int)

#: The folders of shipped data: the package itself and the data folders beside it (editable install)
#: or inside it (wheel, `primus.paths`).
_SHIPPED = (Path(__file__).resolve().parent,
            *(Path(__file__).resolve().parent.parent / name for name in ("models", "hardware", "constraints",
                                                                          "stacks")))


def is_shipped(path: Path) -> bool:
    """Whether `path` is one of the files primus ships (read with the faster `_ShippedLoader`)."""
    try:
        resolved = path.resolve()
    except OSError:
        return False
    return any(resolved.is_relative_to(root) for root in _SHIPPED)


def _check_size(obj: Any, where: str) -> None:
    """Walk the loaded object with a node budget (aliases make DAGs that expand exponentially)."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise InputError(where, None, f"document too large after alias expansion (> {MAX_NODES} nodes)")
        if depth > MAX_DEPTH:
            raise InputError(where, None, f"document nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def read_text(path: Path) -> str:
    where = str(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(where, None, f"cannot read file ({exc.strerror or exc})") from None
    if not path.is_file():
        raise InputError(where, None, "not a regular file")
    if size > MAX_FILE_BYTES:
        raise InputError(where, None, f"file is {size} bytes, more than the {MAX_FILE_BYTES} allowed")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(where, None, "not UTF-8 text") from None
    except OSError as exc:
        raise InputError(where, None, f"cannot read file ({exc.strerror or exc})") from None


def _flow_depth(text: str) -> int:
    """Deepest nesting of [ and { (a cheap pre-check: refusing a deep document before parsing it)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def loads_yaml(text: str, where: str, shipped: bool = False) -> Any:
    """`text` parsed with the bounded loader, or with `_ShippedLoader` for a file primus ships."""
    if len(text.encode("utf-8", errors="replace")) > MAX_FILE_BYTES:
        raise InputError(where, None, f"document larger than {MAX_FILE_BYTES} bytes")
    if _flow_depth(text) > MAX_DEPTH:
        raise InputError(where, None, f"document nested deeper than {MAX_DEPTH} levels")
    try:
        loader = (_ShippedLoader if shipped else _BoundedLoader)(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(where, None, f"invalid YAML{loc}: {problem}") from None
    except RecursionError:
        raise InputError(where, None, "invalid YAML: nested too deeply") from None
    _check_size(data, where)
    return data


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object that names a key twice is refused, as a YAML mapping is: json keeps the last value
    silently, so a config.json with two `hidden_size` would describe another model than it seems to."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


def loads_json(text: str, where: str) -> Any:
    """`text` parsed as JSON, bounded as YAML is. A leading byte-order mark is ignored, as RFC 8259 section 8.1
    allows and as the YAML reader does (editors on Windows write one; json.loads refuses it)."""
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(text, parse_int=bounded_json_int, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise InputError(where, None, f"invalid JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(where, None, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    except _IntTooLong as exc:
        raise InputError(where, None, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise InputError(where, None, "invalid JSON: nested too deeply") from None
    _check_size(data, where)
    return data


def load_yaml(path: Path) -> Any:
    return loads_yaml(read_text(path), str(path), shipped=is_shipped(path))


def load_json(path: Path) -> Any:
    return loads_json(read_text(path), str(path))


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML (or JSON, which YAML reads too) file whose top level must be a mapping."""
    data = load_json(path) if path.suffix.lower() == ".json" else load_yaml(path)
    if not isinstance(data, dict):
        raise InputError(str(path), None, "top level must be a mapping")
    return data
