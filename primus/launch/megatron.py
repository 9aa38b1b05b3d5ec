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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from primus import __version__
from primus.errors import InputError, shown
from primus.job import Job
from primus.launch.common import (
    Collector,
    Exported,
    LaunchConfig,
    derived_model_name,
    finish,
    header_line,
    read_header,
    residual,
    resolve_cluster,
)
from primus.launch.launch_env import LAUNCH_ENV, allocator_env, expandable_segments_of, megatron_env, shell_lines
from primus.launch.megatron_args import ARGS, BY_DEST, BY_FLAG, MEGATRON_DEFAULTS, MEGATRON_RELEASE, coerce
from primus.launch.megatron_job import ImportContext, args_from_job, job_from_args, model_from_args
from primus.launch.megatron_release_check import for_release
from primus.launch.option_names import check_option
from primus.launch.shell import Command, Script, read_script
from primus.parallel import Layout
from primus.stacks.megatron_release import GROUPED_MLP_REMOVED_IN, LEGACY_GEMM_FLAG, megatron_target, newest_with
from primus.yamlio import int_too_long

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_LAUNCHER_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "--module", "-m"}
_ALWAYS = {"tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
           "expert_model_parallel_size", "micro_batch_size", "global_batch_size", "seq_length",
           "normalization", "position_embedding_type", "hidden_dropout", "attention_dropout", "fp8_recipe",
           "rotary_base"}
SCRIPT = "pretrain_gpt.py"
_HF_ID = re.compile(r"[\w.-]+/[\w.-]+")  # a Hugging Face model id: ORG/NAME


@dataclass
class ParsedLine:
    ns: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # dest -> the argument as written
    order: list[tuple[str, str]] = field(default_factory=list)  # ("known", dest) or ("other", text)
    nnodes: int | None = None
    nproc: int | None = None
    #: the launcher's --nnodes was given but not as a number the file states (a command substitution, or a
    #: variable the file leaves to its environment, $SLURM_NNODES): the world size comes from --nodes/--gpus
    nnodes_unresolved: bool = False
    script: str | None = None  # the training script the launcher runs (pretrain_gpt.py)
    launched: bool = True  # False: a file of argument definitions with no launch line
    expandable_segments: bool | None = None  # PyTorch's allocator setting, when the file sets it
    variables: dict[str, Any] = field(default_factory=dict)


def _commands(text: str, where: str, out: Collector, base_dir: Path | None = None) -> tuple[list[str], bool, Script]:
    """The command with the most ``--`` options, after bash's expansion (`primus.launch.shell`); a
    file with no such command (a model definition: ``MODEL_ARGS="..."``) gives the words of every
    variable that holds ``--`` options, in the order they were defined. Returns (words, launched,
    script)."""
    script = read_script(text, where, base_dir)
    for env_name, env_value in script.exported:
        if env_name in LAUNCH_ENV:
            out.note(f"{env_name}={env_value}: a launch requirement of Megatron-LM, read (no effect on memory)")
        elif expandable_segments_of(env_name, env_value) is not None:
            out.note(f"{env_name}={env_value}: read as allocator.expandable_segments (the allocator reserve)")
        else:
            out.skip(f"env {env_name}={env_value}")
    for item in script.unresolved:
        out.note(item)
    out.notes.extend(script.notes)
    best: Command | None = None
    for cmd in script.commands:
        if _options(cmd.words) > (_options(best.words) if best else 0):
            best = cmd
    if best is not None:
        others = len(script.commands) - 1
        if others:
            out.note(f"{others} other shell line(s) skipped: only the command with the most options is read")
        return [*best.prefix, *best.words], True, script
    words: list[str] = []
    used: list[str] = []
    for var in sorted(script.variables, key=lambda n: script.defined_at.get(n, 0)):
        value = script.variables[var]
        items = " ".join(value).split() if isinstance(value, list) else value.split()
        if items and items[0].startswith("--"):
            words += items
            used.append(var)
    _layout_only(script, words, where)
    if not words:
        raise InputError(where, None, "no command with -- options found (expected Megatron-LM arguments)")
    out.note(f"no launch line: the arguments of {', '.join(used)} are read (a model definition)")
    return words, False, script


#: Variables of Megatron-LM's modelopt conf files that hold parallel sizes (conf/arguments.sh turns them
#: into --tensor-model-parallel-size, ...), and the options that say a file defines a model.
LAYOUT_VARIABLES: Final = ("TP", "PP", "EP", "ETP", "CP", "VP", "DP")
MODEL_OPTIONS: Final = ("--num-layers", "--hidden-size", "--num-attention-heads")
#: The variable of those files naming the checkpoint the model is read from (conf/arguments.sh)
CHECKPOINT_VARIABLE: Final = "HF_MODEL_CKPT"


def _layout_only(script: Script, words: list[str], where: str) -> None:
    """Refuse, with what to import instead, a file with no launch line that sets parallel sizes and
    no model (Megatron-LM's ``conf/moonshotai/kimi_k2_instruct.sh``: ``TP=8 ETP=1 EP=64`` and a
    checkpoint path; ``conf/arguments.sh`` sources the model's own file by a name given at run time)."""
    sizes = [v for v in LAYOUT_VARIABLES if v in script.variables]
    if not sizes or any(w.split("=")[0] in MODEL_OPTIONS for w in words):
        return
    extra = sorted({w.split("=")[0] for w in words if w.startswith("--")})
    checkpoint = script.restored(CHECKPOINT_VARIABLE)
    source = "the model definition that Megatron-LM's conf/arguments.sh sources by the name given at run time"
    if isinstance(checkpoint, str) and checkpoint.strip("/"):
        stem = checkpoint.rstrip("/").split("/")[-1]
        sibling = Path(where).parent / f"{stem}.sh"
        source = (f"{sibling.name} beside it (the model of {CHECKPOINT_VARIABLE}={checkpoint}): import that file"
                  if sibling.is_file() else f"the model of {CHECKPOINT_VARIABLE}={checkpoint}, defined in no file here")
    also = f" and options {', '.join(extra)}" if extra else ""
    raise InputError(where, None, f"not a model definition: it sets only parallel sizes ({', '.join(sizes)}){also}; "
                     f"the model comes from {source}")


def _options(words: tuple[str, ...] | list[str]) -> int:
    return sum(w.startswith("--") for w in words)


def parse_line(text: str, where: str, out: Collector, base_dir: Path | None = None) -> ParsedLine:
    words, launched, script = _commands(text, where, out, base_dir)
    parsed = ParsedLine(launched=launched, variables={k: script.restored(k) for k in script.variables})
    for env_name, env_value in script.exported:
        setting = expandable_segments_of(env_name, env_value)
        parsed.expandable_segments = setting if setting is not None else parsed.expandable_segments
    i = 0
    while i < len(words) and _ASSIGN.match(words[i]):
        name, value = words[i].split("=", 1)
        setting = expandable_segments_of(name, value)
        if setting is None:
            out.skip(f"env {script.restore(words[i])}")
        else:
            out.note(f"{words[i]}: read as allocator.expandable_segments (the allocator reserve)")
            parsed.expandable_segments = setting
        i += 1
    i = _launcher(words, i, parsed, where, out, script)
    _check_kind(parsed.script, words[i:], where)
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            parsed.order.append(("other", script.restore(word)))
            i += 1
            continue
        name, eq, inline = word.partition("=")
        j = i + 1
        values = [inline] if eq else []
        while not eq and j < len(words) and not words[j].startswith("--"):
            values.append(words[j])
            j += 1
        arg = BY_FLAG.get(name)
        if arg is not None:
            _not_substituted(script, name, values, where)
        if arg is None:
            check_option(name, where)
            parsed.order.append(("other", script.restore(" ".join([name, *values]))))
        elif arg.kind in ("true", "false"):
            if eq:
                raise InputError(where, name, "takes no value (a switch)")
            parsed.order.extend(("other", script.restore(v)) for v in values)
            _store(parsed, arg.dest, arg.kind == "true", name, out)
        elif arg.kind == "list":
            _store(parsed, arg.dest, values, " ".join([name, *values]), out)
        else:
            if len(values) != 1:
                raise InputError(where, name, f"expects one value, got {len(values)}")
            hint = (" (shell text left unexpanded: a variable the script does not set, or arithmetic or a command "
                    "primus does not evaluate)") if values[0].startswith("$") else ""
            try:
                value = coerce(arg, values[0], where, name)
            except InputError as exc:
                raise InputError(where, name, exc.reason + hint) from None
            _store(parsed, arg.dest, value, f"{name} {values[0]}", out)
        i = j
    return parsed


#: Training scripts that are not a decoder-only GPT pre-training run, and what they are.
NOT_DECODER: Final = {"pretrain_bert.py": "BERT (an encoder)", "pretrain_t5.py": "T5 (an encoder-decoder)",
                      "pretrain_mamba.py": "hybrid (Mamba layers)", "pretrain_vlm.py": "a vision-language model",
                      "pretrain_retro.py": "RETRO (retrieval)", "pretrain_ict.py": "ICT (a retriever)",
                      "pretrain_vision_classify.py": "a vision model", "pretrain_vision_dino.py": "a vision model",
                      "pretrain_vision_inpaint.py": "a vision model"}
#: Megatron-LM options that make a model a Mamba hybrid (megatron/training/arguments.py).
HYBRID_FLAGS: Final = ("--hybrid-layer-pattern", "--hybrid-override-pattern", "--is-hybrid-model",
                       "--hybrid-attention-ratio", "--hybrid-mlp-ratio", "--mamba-num-heads", "--mamba-state-dim")
_INFERENCE = ("inference", "text_generation", "generate", "run_text_gen")


def _check_kind(script: str | None, words: list[str], where: str) -> None:
    """Refuse (exit 2, one line) what is not a decoder-only pre-training run: other model families,
    Mamba hybrids, inference servers."""
    name = Path(script).name if script else ""
    if name in NOT_DECODER:
        raise InputError(where, name, f"not supported: {NOT_DECODER[name]}; primus models decoder-only GPT training")
    flags = {w.partition("=")[0] for w in words if w.startswith("--")}
    hybrid = [f for f in HYBRID_FLAGS if f in flags]
    if hybrid or any(w in ("HybridModel", "MambaModel") for w in words):
        raise InputError(where, hybrid[0] if hybrid else "--export-model-type",
                         "not supported: hybrid (Mamba layers); primus models transformer decoders only")
    if name and any(key in name for key in _INFERENCE):
        raise InputError(where, name, "not supported: inference (this script serves or generates; it does not "
                         "train)")


def _store(parsed: ParsedLine, dest: str, value: Any, raw: str, out: Collector) -> None:
    if dest in parsed.ns:
        out.note(f"{BY_DEST[dest].flag} given twice: the last wins (argparse)")
    else:
        parsed.order.append(("known", dest))
    parsed.ns[dest], parsed.raw[dest] = value, raw


def _not_substituted(script: Script, name: str, values: list[str], where: str) -> None:
    """Refuse (exit 2) an option primus reads whose value comes from a command substitution: the
    value is only known by running it, and primus reads scripts, never runs them (issue 21)."""
    for value in values:
        found = script.substitution_in(value)
        if found is not None:
            line, raw = found
            why = script.why_unresolved(value)
            if why is not None:  # a variable a loop, case block or called function sets
                raise InputError(where, f"line {line}: {name}", f"its value comes from {raw}, which {why} may set "
                                 "and primus reads but never runs; set it outside the block, with a literal value")
            raise InputError(where, f"line {line}: {name}", f"its value comes from {raw}, which primus reads but "
                             "never runs; give it with a literal value in the file")


def _launcher(words: list[str], i: int, parsed: ParsedLine, where: str, out: Collector, script: Script) -> int:
    """Skip the launcher (torchrun / python -m torch.distributed.run / python) up to the script, reading
    --nnodes and --nproc-per-node; returns the index of the first training argument."""
    if i >= len(words):
        return i
    starts = [k for k in range(i, len(words)) if Path(words[k]).name == "torchrun"
              or re.fullmatch(r"python[0-9.]*", Path(words[k]).name)]
    if starts and starts[0] > i and not any(w.endswith(".py") for w in words[i:starts[0]]):
        out.skip("launcher prefix: " + script.restore(" ".join(words[i:starts[0]])))  # uv run, nsys profile ...
        i = starts[0]
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
        if i < len(words) and words[i].endswith(".py"):
            parsed.script = script.restore(words[i])
            return i + 1
        return i
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            parsed.script = script.restore(word)
            if parsed.nproc is not None and parsed.nnodes is None and not parsed.nnodes_unresolved:
                parsed.nnodes = 1
                out.note("torchrun --nproc-per-node without --nnodes: one node (torchrun's default)")
            return i + 1  # the training script
        name, eq, value = word.partition("=")
        step = 1
        if not eq and word not in _LAUNCHER_FLAGS and i + 1 < len(words):
            value, step = words[i + 1], 2
        key = name.lstrip("-").replace("_", "-")
        if key in ("nnodes", "nproc-per-node") and (script.substitution_in(value) is not None or "$" in value):
            # a command substitution or a variable left to the environment ($SLURM_NNODES): not a size the file
            # states, so the world size comes from --nodes/--gpus (or the error asking for them)
            out.skip(script.restore(f"torchrun {name} {value}"))
            parsed.nnodes_unresolved = parsed.nnodes_unresolved or key == "nnodes"
        elif key == "nnodes":
            parsed.nnodes = _count(value, where, "torchrun --nnodes")
        elif key == "nproc-per-node" and value.isdigit():
            parsed.nproc = _count(value, where, "torchrun --nproc-per-node")
        else:
            out.skip(script.restore(f"torchrun {name} {value}".rstrip()))
        i += step
    return i


def _count(value: str, where: str, name: str) -> int:
    if not value.isdigit() or int_too_long(value) or int(value) < 1:
        raise InputError(where, name,
                         f"must be a positive integer (elastic ranges are not modelled), got {shown(value)}")
    return int(value)


def _name(parsed: ParsedLine, where: str) -> str:
    """The file's own name for its model: the Hugging Face id of its tokenizer (``--tokenizer-model
    Qwen/Qwen3-8B``, or a TOKENIZER_MODEL / HF_MODEL_CKPT variable), else the file's name."""
    for value in [parsed.ns.get("tokenizer_model"), parsed.variables.get("HF_MODEL_CKPT"),
                  parsed.variables.get("TOKENIZER_MODEL")]:
        if isinstance(value, str) and _HF_ID.fullmatch(value):
            return value.split("/")[-1]
    return derived_model_name(Path(where).stem)


def import_megatron(text: str, where: str, *, hardware: str | None = None, nodes: int | None = None,
                    gpus: int | None = None, base_dir: Path | None = None) -> LaunchConfig:
    out = Collector()
    header = read_header(text, where)
    parsed = parse_line(text, where, out, base_dir)
    if not parsed.launched and "global_batch_size" not in parsed.ns:
        return _model_only(parsed, header, where, out)
    cluster = resolve_cluster(where, out, cli_hardware=hardware, cli_nodes=nodes, cli_gpus=gpus, header=header,
                              file_nnodes=parsed.nnodes, file_nproc=parsed.nproc, base_dir=base_dir)
    ctx = replace(_context(parsed, header, where, cluster.gpus), world_source=cluster.source,
                  gpus_per_node=cluster.spec.gpus_per_node)
    job, consumed = job_from_args(parsed.ns, ctx, out)
    _date_legacy_gemm(job, bool(parsed.ns.get("moe_use_legacy_grouped_gemm")), header, out)
    if parsed.expandable_segments is not None:
        job["allocator"] = {"expandable_segments": parsed.expandable_segments}
    _skip_unread(parsed, consumed, out)
    return finish("megatron", MEGATRON_RELEASE, where, job, header, cluster, out, base_dir)


def _date_legacy_gemm(job: dict[str, Any], flag: bool, header: dict[str, Any], out: Collector) -> None:
    """A line with --moe-use-legacy-grouped-gemm ran on a release that has it (core_v0.11.0 to core_v0.16.1):
    with no stack in its header, the job is on the newest of them, not on the default stack's newest
    release, which has no GroupedMLP (`primus.stacks.megatron_release.OPTION_WINDOWS`)."""
    if "stack" in header or not flag:  # the flag dates the line even where SequentialMLP ignores it
        return
    tag = newest_with(LEGACY_GEMM_FLAG)
    job["stack"] = f"megatron-lm@{tag}"
    out.note(f"stack megatron-lm@{tag}: {LEGACY_GEMM_FLAG} is an argument of Megatron-LM core_v0.11.0 to {tag} "
             f"(#3410 removed it in {GROUPED_MLP_REMOVED_IN}), so the line ran on one of them; --stack names another")


def _context(parsed: ParsedLine, header: dict[str, Any], where: str, gpus: int) -> ImportContext:
    """How the arguments of a parsed file are read into a job or a model (flags named as Megatron-LM's)."""
    return ImportContext(where, gpus, {}, lambda dest: BY_DEST[dest].flag if dest in BY_DEST else dest,
                         header_model=header.get("model"), model_name=header.get("model_name") or _name(parsed, where))


def _skip_unread(parsed: ParsedLine, consumed: Any, out: Collector) -> None:
    """Everything of the file that the job or the model did not read is listed as unmodelled, in order."""
    for kind, item in parsed.order:
        if kind == "other":
            out.skip(item)
        elif item not in consumed:
            out.skip(parsed.raw[item])


def _model_only(parsed: ParsedLine, header: dict[str, Any], where: str, out: Collector) -> LaunchConfig:
    """A file that defines a model's arguments and neither launches nor gives a global batch
    (Megatron-LM's examples/post_training/modelopt/conf/*.sh): the model, for a job's `model:`."""
    tokenizer = parsed.variables.get("TOKENIZER_MODEL")
    if "tokenizer_model" not in parsed.ns and isinstance(tokenizer, str) and _HF_ID.fullmatch(tokenizer):
        parsed.ns["tokenizer_model"] = tokenizer  # what Megatron-LM's modelopt scripts pass as --tokenizer-model
        parsed.raw["tokenizer_model"] = f"TOKENIZER_MODEL={tokenizer}"
    ref, consumed = model_from_args(parsed.ns, _context(parsed, header, where, 1), out)
    _skip_unread(parsed, consumed, out)
    out.note("a model definition (no launch line, no global batch size): use the model under `model:` of a job")
    return LaunchConfig("megatron", MEGATRON_RELEASE, {"model": ref}, tuple(out.unmodelled), tuple(out.notes),
                        where, model_only=True)


# ---- export -------------------------------------------------------------------------------------


def format_value(dest: str, value: Any) -> str:
    kind = BY_DEST[dest].kind
    if kind == "window":
        return f"{value[0]},{value[1]}"
    if isinstance(value, tuple):  # a Python list literal: quoted, or bash globs "[1,1]" against the cwd
        return shlex.quote("[" + ",".join(str(v) for v in value) + "]")
    if isinstance(value, list):
        return " ".join(shlex.quote(str(v)) for v in value)
    return shlex.quote(repr(value) if isinstance(value, float) else str(value))


def flags(ns: dict[str, Any]) -> list[str]:
    """The arguments for a dest → value mapping: switches when on, values unless Megatron's default."""
    out = []
    for dest, value in ns.items():
        if not writes(dest, value):
            continue
        arg = BY_DEST[dest]
        out.append(arg.flag if arg.kind in ("true", "false") else f"{arg.flag} {format_value(dest, value)}")
    return out


def writes(dest: str, value: Any) -> bool:
    """Whether `flags` writes this argument: a switch when on, a value when given and not Megatron's default."""
    kind = BY_DEST[dest].kind
    if value is None:
        return False
    if kind in ("true", "false"):
        return value is (kind == "true")
    return dest in _ALWAYS or MEGATRON_DEFAULTS.get(dest) != value


def export_megatron(job: Job, layout: Layout) -> Exported:
    """The launch line in the arguments of the Megatron-LM release the job runs (`megatron_target`)."""
    target = megatron_target(job.resolved_stack, job.where)
    ns, notes, written = args_from_job(job, layout, fsdp="megatron")
    ns, release_notes = for_release(job, layout, ns, target, writes)
    notes += release_notes
    release = (f"Megatron-LM {target.tag} argument names (megatron/training/arguments.py at NVIDIA/Megatron-LM tag "
               f"{target.tag}; {target.why})")
    gpn = job.cluster.gpus_per_node
    nproc = min(job.num_gpus, gpn)
    fsdp = bool(ns.get("use_torch_fsdp2") or ns.get("use_megatron_fsdp"))
    lines = [f"# Megatron-LM launch line for {job.model.name} on {job.num_gpus} x {job.cluster.name}, written by "
             f"primus {__version__}.",
             f"# Option names: {release}.",
             "# Data, tokenizer, learning-rate and checkpoint options are not written: add your own.",
             *[f"# note: {n}" for n in notes],
             header_line(residual(job, written)),
             *shell_lines(megatron_env(layout.tp, layout.cp, fsdp, bool(ns.get("overlap_moe_expert_parallel_comm")),
                                       job.cluster.accelerator.compute_major, target.tag)),
             *shell_lines(allocator_env(job.expandable_segments)),
             f"torchrun --nnodes {job.num_gpus // nproc} --nproc-per-node {nproc} {SCRIPT} \\"]
    args = flags(ns)
    lines += [f"    {a} \\" for a in args[:-1]] + [f"    {args[-1]}"]
    return Exported("megatron", release, "\n".join(lines) + "\n", tuple(notes))


__all__ = ["ARGS", "export_megatron", "import_megatron", "parse_line"]
