"""The Megatron-LM argument line: read one out of a launch script, write one for a job.

A file may hold just the arguments, or a whole command (``torchrun --nnodes 2 --nproc-per-node 8
pretrain_gpt.py --tensor-model-parallel-size 8 ...``, with ``\\`` continuations, ``VAR=value``
prefixes and comments). Words are split with `shlex` (nothing is executed); the command read is the
line with the most ``--`` options. Plain ``NAME=value`` assignments earlier in the file are
substituted into ``$NAME``/``${NAME}``/``${NAME:-default}`` (no arrays, no command substitution);
exported variables are listed as unmodelled. Every argument primus does not model is listed as
written (``--lr 0.00015``), and so are the launcher's own rendezvous options.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus import __version__
from primus.errors import InputError, shown
from primus.job import Job
from primus.launch.common import (
    Collector,
    Exported,
    LaunchConfig,
    finish,
    header_line,
    read_header,
    residual,
    resolve_cluster,
)
from primus.launch.megatron_args import ARGS, BY_DEST, BY_FLAG, MEGATRON_DEFAULTS, MEGATRON_RELEASE, coerce
from primus.launch.megatron_job import ImportContext, args_from_job, job_from_args
from primus.parallel import Layout
from primus.yamlio import int_too_long

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_LAUNCHER_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module", "-m"}
_ALWAYS = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
           "expert_model_parallel_size", "micro_batch_size", "global_batch_size", "seq_length",
           "normalization", "position_embedding_type", "hidden_dropout", "attention_dropout", "fp8_recipe"}
SCRIPT = "pretrain_gpt.py"


@dataclass
class ParsedLine:
    ns: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # dest -> the argument as written
    order: list[tuple[str, str]] = field(default_factory=list)  # ("known", dest) or ("other", text)
    nnodes: int | None = None
    nproc: int | None = None


def _commands(text: str, where: str, out: Collector) -> tuple[list[str], dict[str, str]]:
    """The command with the most ``--`` options (variables substituted), and the file's assignments."""
    env: dict[str, str] = {}
    best: list[str] = []
    skipped = 0
    for lineno, line in _logical_lines(text):
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise InputError(where, f"line {lineno}", f"cannot split into words ({exc})") from None
        if not words:
            continue
        exported = words[0] == "export"
        body = words[1:] if exported else words
        if body and all(_ASSIGN.match(w) for w in body):
            for w in body:
                name, value = _ASSIGN.match(w).groups()  # type: ignore[union-attr]
                env[name] = _expand(value, env)
                if exported:
                    out.skip(f"env {name}={env[name]}")
            continue
        if sum(w.startswith("--") for w in words) > sum(w.startswith("--") for w in best):
            skipped += bool(best)
            best = words
        else:
            skipped += 1
    if not best:
        raise InputError(where, None, "no command with -- options found (expected Megatron-LM arguments)")
    if skipped:
        out.note(f"{skipped} other shell line(s) skipped: only the command with the most options is read")
    return [_expand(w, env) for w in best], env


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Comments cut per physical line (a ``#`` at a word start, outside quotes), then ``\\``-newline
    continuations joined, as the shell does; blank results dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not pending:
            start = lineno
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        if joined:
            out.append((start, joined))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def _strip_comment(line: str) -> str:
    quote = ""
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _expand(word: str, env: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in env:
            return env[name]
        return match.group(2) if match.group(2) is not None else match.group(0)

    return _VAR.sub(sub, word)


def parse_line(text: str, where: str, out: Collector) -> ParsedLine:
    words, _ = _commands(text, where, out)
    parsed = ParsedLine()
    i = 0
    while i < len(words) and _ASSIGN.match(words[i]):
        out.skip(f"env {words[i]}")
        i += 1
    i = _launcher(words, i, parsed, where, out)
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            parsed.order.append(("other", word))
            i += 1
            continue
        name, eq, inline = word.partition("=")
        j = i + 1
        values = [inline] if eq else []
        while not eq and j < len(words) and not words[j].startswith("--"):
            values.append(words[j])
            j += 1
        arg = BY_FLAG.get(name)
        if arg is None:
            parsed.order.append(("other", " ".join([name, *values])))
        elif arg.kind in ("true", "false"):
            if eq:
                raise InputError(where, name, "takes no value (a switch)")
            parsed.order.extend(("other", v) for v in values)
            _store(parsed, arg.dest, arg.kind == "true", name, out)
        elif arg.kind == "list":
            _store(parsed, arg.dest, values, " ".join([name, *values]), out)
        else:
            if len(values) != 1:
                raise InputError(where, name, f"expects one value, got {len(values)}")
            hint = " (an unexpanded shell variable)" if values[0].startswith("$") else ""
            try:
                value = coerce(arg, values[0], where, name)
            except InputError as exc:
                raise InputError(where, name, exc.reason + hint) from None
            _store(parsed, arg.dest, value, f"{name} {values[0]}", out)
        i = j
    return parsed


def _store(parsed: ParsedLine, dest: str, value: Any, raw: str, out: Collector) -> None:
    if dest in parsed.ns:
        out.note(f"{BY_DEST[dest].flag} given twice: the last wins (argparse)")
    else:
        parsed.order.append(("known", dest))
    parsed.ns[dest], parsed.raw[dest] = value, raw


def _launcher(words: list[str], i: int, parsed: ParsedLine, where: str, out: Collector) -> int:
    """Skip the launcher (torchrun / python -m torch.distributed.run / python) up to the script, reading
    --nnodes and --nproc-per-node; returns the index of the first training argument."""
    if i >= len(words):
        return i
    head = Path(words[i]).name
    if head.startswith("python"):
        i += 1
        if i + 1 < len(words) and words[i] == "-m" and words[i + 1] in ("torch.distributed.run",
                                                                        "torch.distributed.launch"):
            head, i = "torchrun", i + 2
        elif i + 1 < len(words) and words[i] == "-m":
            return i + 2
    elif head == "torchrun":
        i += 1
    if head != "torchrun":
        return i + 1 if i < len(words) and words[i].endswith(".py") else i
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            return i + 1  # the training script
        name, eq, value = word.partition("=")
        step = 1
        if not eq and word not in _LAUNCHER_FLAGS and i + 1 < len(words):
            value, step = words[i + 1], 2
        key = name.lstrip("-").replace("_", "-")
        if key == "nnodes":
            parsed.nnodes = _count(value, where, "torchrun --nnodes")
        elif key == "nproc-per-node" and value.isdigit():
            parsed.nproc = _count(value, where, "torchrun --nproc-per-node")
        else:
            out.skip(f"torchrun {name} {value}".rstrip())
        i += step
    return i


def _count(value: str, where: str, name: str) -> int:
    if not value.isdigit() or int_too_long(value) or int(value) < 1:
        raise InputError(where, name,
                         f"must be a positive integer (elastic ranges are not modelled), got {shown(value)}")
    return int(value)


def import_megatron(text: str, where: str, *, hardware: str | None = None, nodes: int | None = None,
                    gpus: int | None = None, base_dir: Path | None = None) -> LaunchConfig:
    out = Collector()
    header = read_header(text, where)
    parsed = parse_line(text, where, out)
    cluster = resolve_cluster(where, out, cli_hardware=hardware, cli_nodes=nodes, cli_gpus=gpus, header=header,
                              file_nnodes=parsed.nnodes, file_nproc=parsed.nproc, base_dir=base_dir)
    ctx = ImportContext(where, cluster.gpus, {}, lambda dest: BY_DEST[dest].flag if dest in BY_DEST else dest,
                        header_model=header.get("model"))
    job, consumed = job_from_args(parsed.ns, ctx, out)
    for kind, item in parsed.order:
        if kind == "other":
            out.skip(item)
        elif item not in consumed:
            out.skip(parsed.raw[item])
    return finish("megatron", MEGATRON_RELEASE, where, job, header, cluster, out, base_dir)


# ---- export -------------------------------------------------------------------------------------


def format_value(dest: str, value: Any) -> str:
    kind = BY_DEST[dest].kind
    if kind == "window":
        return f"{value[0]},{value[1]}"
    if isinstance(value, tuple):
        return "[" + ",".join(str(v) for v in value) + "]"
    if isinstance(value, list):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(repr(value) if isinstance(value, float) else str(value))


def flags(ns: dict[str, Any]) -> list[str]:
    """The arguments for a dest → value mapping: switches when on, values unless Megatron's default."""
    out = []
    for dest, value in ns.items():
        arg = BY_DEST[dest]
        if value is None:
            continue
        if arg.kind in ("true", "false"):
            if value is (arg.kind == "true"):
                out.append(arg.flag)
            continue
        if dest not in _ALWAYS and MEGATRON_DEFAULTS.get(dest) == value:
            continue
        out.append(f"{arg.flag} {format_value(dest, value)}")
    return out


def export_megatron(job: Job, layout: Layout) -> Exported:
    ns, notes, written = args_from_job(job, layout, fsdp="megatron")
    gpn = job.cluster.gpus_per_node
    nproc = min(job.num_gpus, gpn)
    lines = [f"# Megatron-LM launch line for {job.model.name} on {job.num_gpus} x {job.cluster.name}, written by "
             f"primus {__version__}.",
             f"# Option names: {MEGATRON_RELEASE}.",
             "# Data, tokenizer, learning-rate and checkpoint options are not written: add your own.",
             *[f"# note: {n}" for n in notes],
             header_line(residual(job, written)),
             f"torchrun --nnodes {job.num_gpus // nproc} --nproc-per-node {nproc} {SCRIPT} \\"]
    args = flags(ns)
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]}"]
    return Exported("megatron", MEGATRON_RELEASE, "\n".join(lines) + "\n", tuple(notes))


__all__ = ["ARGS", "export_megatron", "import_megatron", "parse_line"]
