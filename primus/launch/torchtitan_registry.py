"""torchtitan's Python configs (``torchtitan/models/<pkg>/config_registry.py``), read with `ast`.

Since pytorch/torchtitan #2386 (9810191, 2026) a training config is a function returning
``Trainer.Config(...)``, chosen with ``--module <pkg> --config <function>``; the TOML files are gone.
This module reads such a function statically — it never imports or runs the file — and turns it into
the same keys a v0.2 TOML holds, so `primus.launch.torchtitan` reads both alike:

- the function's ``return Trainer.Config(...)`` (or ``config = other_function()`` in the same file,
  followed by ``config.section.key = value`` changes), local names bound to calls, and literal values;
- ``model_registry("8B", converters=[Float8LinearConverter.Config(...)])``: the flavor of the package
  (``llama3``), and fp8 / mxfp8 converters;
- ``TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8 * 8192, max_context_length=8192)``: the
  micro-batch (tokens ÷ context length) and the sequence length (torchtitan/config/configs.py);
  ``num_tokens_per_train_step`` the global batch in tokens; under PP ``num_pp_microbatches`` of those
  micro-batches make one schedule (torchtitan/trainer.py at b5bcd76: tokens of one accumulation step
  = micro-batch tokens × PP microbatches × DP);
- ``ParallelismConfig``, ``CompileConfig`` as their TOML sections; ``FullAC`` / ``SelectiveAC`` (the
  default) / ``MemoryBudgetAC`` as ``activation_checkpoint.mode``; ``ChunkedLossWrapper`` as a chunked
  loss, which never holds the whole [tokens, vocab] logits.

Anything else it meets (a call it does not know, a non-literal value) is reported, never guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from primus.errors import InputError

#: Config classes whose keyword arguments are a TOML section of the same name.
SECTIONS: Final = {"TrainingConfig": "training", "ParallelismConfig": "parallelism", "CompileConfig": "compile"}
AC_MODES: Final = {"FullAC": "full", "SelectiveAC": "selective", "MemoryBudgetAC": "memory_budget"}
CONVERTERS: Final = {"Float8LinearConverter": "quantize.linear.float8", "MXFP8LinearConverter": "quantize.linear.mx"}
#: model_registry(...) arguments that choose a kernel, not the model's bytes: the attention backend (flex,
#: varlen, sdpa: all memory-efficient, none holds the scores) and the TP GEMM backend
NO_BYTES: Final = ("converters", "attn_backend", "tp_gemm_backend")
#: model_registry(...) arguments that change bytes and are not modelled, and why (listed in the notes)
UNREAD: Final = {"non_blocking_capacity_factor": "HybridEP's non-blocking dispatch sizes the permuted-token buffer "
                 "statically, max tokens per rank x EP x min(local experts, top-k) x the factor "
                 "(torchtitan models/common/token_dispatcher.py); the ledger sizes the expert inputs by the routed "
                 "tokens"}
MAX_DEPTH: Final = 8  # config functions calling config functions; torchtitan's go 2 deep (a loop guard)


@dataclass(frozen=True)
class Call:
    """A constructor call as written: its name (last dotted part, ``Config`` dropped) and arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class Registry:
    """The TOML-shaped keys of one config function, and what could not be read."""

    doc: dict[str, dict[str, Any]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    chunked_loss: bool = False


class _Reader:
    """Evaluates a config function's statements over literals; `follow`: also run the same file's
    config functions (those annotated ``-> Trainer.Config``) that a call reaches with arguments
    (``return _gpt_oss_debugmodel(attn_backend="flex")``)."""

    def __init__(self, tree: ast.Module, where: str, follow: bool = True) -> None:
        self.where = where
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.unresolved: list[str] = []
        self.follow = follow

    def _config_function(self, name: str) -> bool:
        fn = self.functions.get(name)
        return fn is not None and fn.returns is not None and ast.unparse(fn.returns).endswith("Trainer.Config")

    def value(self, node: ast.AST, scope: dict[str, Any], depth: int) -> Any:
        if isinstance(node, ast.Name) and node.id in scope:
            return scope[node.id]
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            parts = [p for p in func.split(".") if p != "Config"]
            name = parts[-1] if parts else func
            if name in self.functions and not node.args and not node.keywords:
                return self.run(name, depth + 1)
            if self.follow and self._config_function(name) and all(k.arg for k in node.keywords):
                params = [a.arg for a in self.functions[name].args.args]
                if len(node.args) <= len(params):
                    bound = {p: self.value(a, scope, depth) for p, a in zip(params, node.args, strict=False)}
                    bound.update({k.arg: self.value(k.value, scope, depth) for k in node.keywords if k.arg})
                    return self.run(name, depth + 1, bound)
            return Call(name, tuple(self.value(a, scope, depth) for a in node.args),
                        {k.arg or "**": self.value(k.value, scope, depth) for k in node.keywords})
        if isinstance(node, ast.List):
            return [self.value(e, scope, depth) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.FloorDiv)):
            left, right = self.value(node.left, scope, depth), self.value(node.right, scope, depth)
            if isinstance(left, int) and isinstance(right, int):
                ops = {ast.Mult: left * right, ast.Add: left + right, ast.Sub: left - right}
                return ops[type(node.op)] if type(node.op) in ops else left // right
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return Unresolved(ast.unparse(node))

    def run(self, name: str, depth: int = 0, bound: dict[str, Any] | None = None) -> Any:
        """The value the function returns; `bound`: the keyword arguments of the call that reached it
        (a builder called with its settings, ``_moonlight_16b_a3b_config(rope_theta=...)``)."""
        if depth > MAX_DEPTH:
            raise InputError(self.where, name, "the config functions call each other too deeply")
        fn = self.functions.get(name)
        if fn is None:
            known = ", ".join(n for n in self.functions if not n.startswith("_"))
            raise InputError(self.where, "--config", f"no function {name!r} in the registry ({known})")
        scope: dict[str, Any] = {**_defaults(fn), **(bound or {})}
        done, value = self._block(fn.body, scope, depth)
        if done:
            return value
        raise InputError(self.where, name, "the function returns no config")

    def _block(self, body: list[ast.stmt], scope: dict[str, Any], depth: int) -> tuple[bool, Any]:
        """Run statements: (True, the value) at a ``return``, else (False, None). An ``if`` whose test
        is decided by what is bound (``if with_vision:``, ``if x is not None:``) runs its branch; one
        that is not is reported and neither branch is read."""
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                value = self.value(stmt.value, scope, depth)
                if isinstance(target, ast.Name):
                    scope[target.id] = value
                elif isinstance(target, ast.Attribute):
                    self._set(target, value, scope)
                elif isinstance(target, ast.Tuple):  # `a, b = f(...)`: each name is not a literal
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name):
                            scope[elt.id] = Unresolved(f"{ast.unparse(stmt.value)}[{i}]")
            elif isinstance(stmt, ast.If):
                test = _decide(stmt.test, scope)
                if test is None:
                    self.unresolved.append(f"if {ast.unparse(stmt.test)} (line {stmt.lineno}): neither branch read")
                    continue
                done, value = self._block(stmt.body if test else stmt.orelse, scope, depth)
                if done:
                    return True, value
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                return True, self.value(stmt.value, scope, depth)
        return False, None

    def _set(self, target: ast.Attribute, value: Any, scope: dict[str, Any]) -> None:
        path: list[str] = []
        node: ast.AST = target
        while isinstance(node, ast.Attribute):
            path.insert(0, node.attr)
            node = node.value
        base = scope.get(node.id) if isinstance(node, ast.Name) else None
        if not isinstance(base, Call):
            self.unresolved.append(ast.unparse(target))
            return
        obj: Call = base
        for part in path[:-1]:
            child = obj.kwargs.get(part)
            if not isinstance(child, Call):
                child = Call(part, (), {})
                obj.kwargs[part] = child
            obj = child
        obj.kwargs[path[-1]] = value


@dataclass(frozen=True)
class Unresolved:
    text: str


def _defaults(fn: ast.FunctionDef) -> dict[str, Any]:
    """The literal defaults of a function's parameters (``attn_backend: str = "varlen"``,
    ``*, with_vision: bool = False``); parameters without one stay unbound."""
    out: dict[str, Any] = {}
    positional = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
    pairs = [*zip(positional, fn.args.defaults, strict=True),
             *((a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True) if d is not None)]
    for arg, default in pairs:
        try:
            out[arg.arg] = ast.literal_eval(default)
        except (ValueError, SyntaxError, TypeError):
            out[arg.arg] = Unresolved(ast.unparse(default))
    return out


def _decide(test: ast.expr, scope: dict[str, Any]) -> bool | None:
    """An ``if`` test over bound names: a name holding a bool, ``NAME is [not] None``, ``not`` of
    either; None when it is not decided by literals."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide(test.operand, scope)
        return None if inner is None else not inner
    if isinstance(test, ast.Name):
        value = scope.get(test.id, Unresolved(test.id))
        return value if isinstance(value, bool) else None
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None):
        if test.left.id not in scope or isinstance(scope[test.left.id], Unresolved):
            return None
        same = scope[test.left.id] is None
        return same if isinstance(test.ops[0], ast.Is) else not same
    return None


def read_registry(path: Path, config: str, where: str) -> tuple[str, Registry]:
    """(the model package, the TOML-shaped keys) of `config` in the registry file at `path`."""
    from primus.launch.torchtitan_flavors import parse_python

    tree = parse_python(path)
    reader = _Reader(tree, where)
    _a_config(reader, config, where)
    trainer = reader.run(config)
    if not isinstance(trainer, Call):
        raise InputError(where, config, "does not return a Trainer.Config(...) call")
    out = Registry()
    package = path.resolve().parent.name
    model = trainer.kwargs.get("model_spec")
    if not (isinstance(model, Call) and model.name == "model_registry" and model.args
            and isinstance(model.args[0], str)):
        raise InputError(where, f"{config}.model_spec", "is not model_registry(\"FLAVOR\", ...) of the package")
    out.doc["model"] = {"name": package, "flavor": model.args[0]}
    for key, value in model.kwargs.items():
        if key == "num_mtp_layers" and isinstance(value, int) and not isinstance(value, bool):
            out.doc["model"]["num_mtp_layers"] = value  # MTP blocks: parameters, bytes and time
        elif key not in (*NO_BYTES, "moe_comm_backend"):
            why = UNREAD.get(key, "an argument primus does not model")
            out.unresolved.append(f"not read: model_registry {key}={getattr(value, 'text', value)} ({why})")
    converters = model.kwargs.get("converters") or []
    for conv in converters if isinstance(converters, list) else []:
        kind = CONVERTERS.get(conv.name) if isinstance(conv, Call) else None
        if kind is None:
            out.unresolved.append(f"model converter {getattr(conv, 'name', conv)}")
        else:
            out.doc["model"].setdefault("converters", []).append(kind)
    for key, value in trainer.kwargs.items():  # a section set by attribute (`config.compile.enable = True`)
        if isinstance(value, Call) and (value.name in SECTIONS or key in SECTIONS.values()):  # is named by key
            out.doc[SECTIONS.get(value.name, key)] = {k: v for k, v in value.kwargs.items() if not isinstance(v, Call)}
    backend = model.kwargs.get("moe_comm_backend")
    if isinstance(backend, str):  # after #2386 the TOML's parallelism.expert_parallel_comm_backend
        out.doc.setdefault("parallelism", {})["expert_parallel_comm_backend"] = backend
    elif backend is not None:
        out.unresolved.append(f"model_registry moe_comm_backend={getattr(backend, 'text', backend)} (not read)")
    moved = out.doc.get("compile", {}).pop("enable_async_tensor_parallel", None)
    if moved is not None:  # after #2386 async TP is a compile option; the TOML had it under [parallelism]
        out.doc.setdefault("parallelism", {})["enable_async_tensor_parallel"] = moved
    ac = trainer.kwargs.get("activation_checkpoint")
    mode = "selective" if ac is None else AC_MODES.get(ac.name) if isinstance(ac, Call) else None
    if mode is None:
        out.unresolved.append(f"activation_checkpoint {getattr(ac, 'name', ac)}")
    else:
        out.doc["activation_checkpoint"] = {"mode": mode, **({"selective_ac_option": "op"} if mode == "selective"
                                                             else {})}
    loss = trainer.kwargs.get("loss")
    out.chunked_loss = isinstance(loss, Call) and loss.name == "ChunkedLossWrapper"
    for section, values in out.doc.items():
        for key, value in list(values.items()):
            if isinstance(value, Unresolved) or (isinstance(value, list) and any(isinstance(v, Unresolved)
                                                                                 for v in value)):
                text = value.text if isinstance(value, Unresolved) else repr(value)
                out.unresolved.append(f"{section}.{key} = {text[:80]}")
                del values[key]
    _tokens(out, where)
    out.unresolved.extend(reader.unresolved)
    return package, out


def _a_config(reader: _Reader, config: str, where: str) -> None:
    """Refuse a function of the registry that is not a config: one that needs an argument or returns
    ``None`` (``enable_fused_swiglu(config: Trainer.Config) -> None``, a helper the configs call)."""
    fn = reader.functions.get(config)
    if fn is None:
        return
    required = fn.args.args[:len(fn.args.args) - len(fn.args.defaults)]
    returns = ast.unparse(fn.returns) if fn.returns is not None else None
    if required or returns == "None":
        signature = f"{config}({', '.join(a.arg for a in required)}) -> {returns or '?'}"
        raise InputError(where, "--config", f"not a config: {signature} is a helper of the registry, not a "
                         "config function (one that takes no argument and returns a Trainer.Config)")


def _tokens(out: Registry, where: str) -> None:
    """The token budget as the TOML's batch: micro-batch = tokens per microbatch ÷ context length."""
    training = out.doc.setdefault("training", {})
    context = training.pop("max_context_length", 2048)  # TrainingConfig's default
    per_micro = training.pop("num_tokens_per_microbatch_per_dp_rank", 16384)
    per_step = training.pop("num_tokens_per_train_step", -1)
    if not isinstance(context, int) or not isinstance(per_micro, int) or per_micro % context:
        raise InputError(where, "training.num_tokens_per_microbatch_per_dp_rank",
                         f"{per_micro} is not a whole number of {context}-token sequences")
    training["seq_len"] = context
    training["local_batch_size"] = per_micro // context
    parallelism = out.doc.get("parallelism", {})
    pp = parallelism.get("pipeline_parallel_degree", 1)
    if isinstance(pp, int) and pp > 1:  # trainer.py: ignored at PP 1 (then reported as not read)
        count = parallelism.pop("num_pp_microbatches", 1)  # ParallelismConfig's default
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InputError(where, "parallelism.num_pp_microbatches", f"must be an integer >= 1, got {count!r}")
        # the TOML's batch: a DP rank's tokens of one schedule, in microbatches of the per-forward tokens
        parallelism["pipeline_parallel_microbatch_size"] = per_micro // context
        training["local_batch_size"] = count * (per_micro // context)
    if isinstance(per_step, int) and per_step > 0:
        if per_step % context:
            raise InputError(where, "training.num_tokens_per_train_step", f"is not a multiple of {context}")
        training["global_batch_size"] = per_step // context
