"""Shared pieces of the frozen pydantic specs: strict bounded types and error translation.

Users write these files by hand (and an LLM writes rules), so validation is strict: an integer field
does not accept `8.0`, `"8"` or `true`, unknown keys are errors with a did-you-mean, and every
failure becomes one `InputError` line naming the file and the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError

from primus.errors import InputError, did_you_mean, shown

# Sane ranges: large enough for any real cluster or model, small enough that arithmetic stays exact.
#: The largest count (layers, widths, heads, sizes) a spec or a Hugging Face config may hold.
MAX_COUNT = 10**9
PosInt = Annotated[StrictInt, Field(ge=1, le=MAX_COUNT)]
NonNegInt = Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
ByteCount = Annotated[StrictInt, Field(ge=0, le=2**50)]
Fraction = Annotated[StrictFloat | StrictInt, Field(ge=0.0, le=1.0)]
PosFloat = Annotated[StrictFloat | StrictInt, Field(gt=0.0, le=1e18)]
NonNegFloat = Annotated[StrictFloat | StrictInt, Field(ge=0.0, le=1e18)]
Bool = StrictBool
Text = Annotated[str, Field(max_length=2000)]
# A model's or a cluster's name lands in launch scripts, YAML, reports and terminals: one line of
# printable text (no control characters, so no newline can start a shell or YAML line of its own).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"must be one line of printable text; {shown(value)} holds a newline or another control "
                         "character")
    return value


#: the longest model or cluster name (it lands in tables, file names and launch lines)
NAME_MAX_CHARS = 100
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX_CHARS), AfterValidator(_one_line)]


class Spec(BaseModel):
    """Base of every spec: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


S = TypeVar("S", bound=BaseModel)


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def error_reason(err: Mapping[str, Any]) -> str:
    """One pydantic error as a plain reason: a validator's own message without pydantic's "Value
    error, " prefix, and the offending value only when it is a scalar (a model-level check would
    otherwise print the whole mapping it was given)."""
    ctx = err.get("ctx") or {}
    if err["type"] in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    msg = str(err["msg"])
    shown_input = "input" in err and err["type"] not in ("model_type", "dict_type")
    if shown_input and not isinstance(err["input"], (Mapping, list, tuple, set)):
        msg = f"{msg} (got {shown(err['input'])})"
    return msg


def exception_reason(exc: Exception) -> str:
    """One line for an exception met while checking untrusted input: a pydantic ValidationError as
    `field: reason` (its first error, as `error_reason` words it), anything else as its text."""
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        field = _loc(tuple(err["loc"]))
        return f"{field}: {error_reason(err)}" if field else error_reason(err)
    return " ".join(str(exc).split())


def validation_to_input_error(exc: ValidationError, cls: type[BaseModel], where: str, prefix: str = "") -> InputError:
    """The first validation error as one line: file, dotted field, reason (with did-you-mean). An
    unknown key is reported before anything else: a misspelt `hardwar:` is also a missing `hardware:`,
    and the misspelling is the news."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = _user_loc(cls, tuple(err["loc"]))
    field = _loc(loc)
    siblings = [e for e in errors if _user_loc(cls, tuple(e["loc"])) == loc]
    if err["type"] != "extra_forbidden" and len(siblings) > 1 and all(e["type"] in _KINDS for e in siblings):
        # every member of a union refused the value: say what the field accepts, not each member's tag
        kinds = " or ".join(dict.fromkeys(_KINDS[e["type"]] for e in siblings))
        return InputError(where, f"{prefix}.{field}" if prefix else field,
                          f"must be {kinds}, got {_kind_of(err.get('input'))}{_yaml_number_hint(err.get('input'))}")
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    if err["type"] == "extra_forbidden":
        name = str(loc[-1]) if loc else "?"
        known = _known_fields(cls, loc[:-1])
        return InputError(where, field, f"unknown key{did_you_mean(name, known)}")
    if err["type"] == "missing":
        return InputError(where, field, "required field is missing")
    return InputError(where, field, error_reason(err))


#: pydantic's type errors, as what the field accepts
_KINDS = {"string_type": "a string", "dict_type": "a mapping", "int_type": "an integer", "bool_type": "true or false",
          "list_type": "a list", "float_type": "a number", "model_type": "a mapping", "tuple_type": "a list"}


def _yaml_number_hint(value: Any) -> str:
    """For text YAML 1.1 read from a number written without a sign in its exponent (`1.25e9`, which
    YAML 1.2 and Python read as a number): how to write it so it is one."""
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]+(\.[0-9]*)?[eE][0-9]+", value.strip()):
        return ""
    mantissa, exponent = re.split("[eE]", value.strip())
    return f" (YAML reads {value.strip()} as text: write {mantissa}e+{exponent})"


def _kind_of(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return shown(value)


def _user_loc(cls: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The error's location as the user wrote it: without pydantic's validator tags (`function-after`)
    and without the union member it was trying (`model.str`, `model.dict[str,any]`), which are type
    names, not keys of the file."""
    out: list[Any] = []
    current: Any = cls
    parts = [p for p in loc if not (isinstance(p, str) and p.startswith(("function-", "tagged-union")))]
    i = 0
    while i < len(parts):
        part = parts[i]
        out.append(part)
        fields = getattr(current, "model_fields", None)
        if isinstance(part, int) or not fields or part not in fields:
            current = None
            i += 1
            continue
        members = _union_members(fields[part].annotation)
        current = _inner_model(fields[part].annotation)
        nxt = parts[i + 1] if i + 1 < len(parts) else None
        if nxt is not None and len(members) == 1 and get_origin(members[0]) is dict:  # `gemm: {bf16: ...}`
            out.append(nxt)
            i += 2
            continue
        if len(members) > 1 and isinstance(nxt, str) and not any(
                nxt in getattr(m, "model_fields", {}) for m in members):
            current = next((m for m in members if getattr(m, "__name__", None) == nxt), None)
            i += 1  # skip the member's tag
        i += 1
    return tuple(out)


def _union_members(annotation: Any) -> list[Any]:
    """The non-None members of a union annotation (through Annotated); one item for a plain type."""
    if get_origin(annotation) is Annotated:
        return _union_members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        return [m for a in get_args(annotation) if a is not type(None) for m in _union_members(a)]
    return [annotation]


def _known_fields(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names at a nested location, for the did-you-mean of an unknown key."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _inner_model(fields[part].annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return list(fields)


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def parse_spec(cls: type[S], data: Mapping[str, Any], where: str, prefix: str = "") -> S:
    """Validate a mapping into a frozen spec, turning pydantic's errors into one `InputError` line."""
    if not isinstance(data, Mapping):
        raise InputError(where, prefix or None, "must be a mapping")
    try:
        return cls.model_validate(dict(data))
    except ValidationError as exc:
        raise validation_to_input_error(exc, cls, where, prefix) from None
    except InputError:
        raise
    except ValueError as exc:  # a model_validator raising ValueError outside pydantic's wrapping
        raise InputError(where, prefix or None, str(exc)) from None
