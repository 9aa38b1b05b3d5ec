"""torchtitan's Muse Glimmer flavors (``torchtitan/models/muse_glimmer/__init__.py``, pytorch/torchtitan
b5bcd76), read statically into Megatron-named model fields.

A text flavor is a decoder: ``_muse_glimmer_config(dim=..., n_layers=..., ...)`` builds its layers with
``_build_muse_glimmer_layers``. What that code builds, per layer (``MuseGlimmerTransformerBlock``):

- four gain-centred RMSNorms of ``dim`` weights (``attention_norm``, ``post_attention_norm``,
  ``ffn_norm``, ``post_ffn_norm``): the sandwich placement;
- GQA attention (``wq``, ``wk``, ``wv``, ``wo``, no biases) with a sigmoid output gate ``o_gate``
  (``dim`` to heads × head_dim, the shape of Megatron-Core's ``attention_output_gate``) and q/k
  RMSNorms without weights (``_scaleless_norm``: ``elementwise_affine=False``);
- a SwiGLU FFN of ``int(_FFN_DIM_MULTIPLIER * dim)`` (read from the builder and the module's constant);
- a sliding window on the layers the cyclic ``window_pattern`` gives a positive size
  (``_layer_window_size``: pattern[(layer + _EVERY_N_LAYERS_NOPE - n_layers % _EVERY_N_LAYERS_NOPE) %
  len(pattern)]); NoPE layers drop RoPE, which has no weights.

Around them: an untied ``SoftCappedLinear`` head (an output multiplier and a tanh soft-cap: scalings,
no weights), a gain-centred final norm, and the token embedding followed by a norm without weights
(no parameters; the ledger keeps no saved bytes for an embedding norm). A flavor that builds a
``vision_encoder`` (``*_mm``) is refused before this module is reached.
"""

from __future__ import annotations

import ast
from typing import Any

from primus.errors import InputError

#: the builder code this module reads, by function: the keyword each must pass (what makes the layer)
STRUCTURE = {"_build_muse_glimmer_attention": ("o_gate", "qk_norm"),
             "_build_muse_glimmer_layers": ("post_attention_norm", "post_ffn_norm", "feed_forward"),
             "_scaleless_norm": ("elementwise_affine",)}


def _constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level ``NAME = literal`` assignments (``_FFN_DIM_MULTIPLIER = 3.0``)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                continue
    return out


def _arith(node: ast.AST, names: dict[str, Any]) -> float | int | None:
    """A number from literals, known names, ``* + - /`` and ``int(...)``; None when it is anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        value = names.get(node.id)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "int" and len(node.args) == 1:
        inner = _arith(node.args[0], names)
        return None if inner is None else int(inner)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.Div)):
        left, right = _arith(node.left, names), _arith(node.right, names)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        ops = {ast.Mult: lambda: left * right, ast.Add: lambda: left + right, ast.Sub: lambda: left - right,
               ast.Div: lambda: left / right}
        return ops[type(node.op)]()
    return None


def _function(tree: ast.Module, name: str, where: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise InputError(where, "model.flavor", f"muse_glimmer: no {name}() in the model package; primus reads the "
                     "layers as pytorch/torchtitan b5bcd76 builds them")


def _check_structure(tree: ast.Module, where: str) -> None:
    for name, keywords in STRUCTURE.items():
        passed = {k.arg for node in ast.walk(_function(tree, name, where)) if isinstance(node, ast.Call)
                  for k in node.keywords}
        missing = [k for k in keywords if k not in passed]
        if missing:
            raise InputError(where, "model.flavor", f"muse_glimmer: {name}() no longer passes {', '.join(missing)}; "
                             "primus reads the layers as pytorch/torchtitan b5bcd76 builds them")


def muse_glimmer_args(tree: ast.Module, model: Any, layers: Any, where: str) -> dict[str, Any]:
    """The FFN width, per-layer windows and head scalings of a text flavor, read from the package's
    code (`model` and `layers`: the registry reader's calls of the config and of the layer builder)."""
    _check_structure(tree, where)
    constants = _constants(tree)
    dim = layers.kwargs.get("dim")
    hidden: float | int | None = None
    for node in _function(tree, "_build_muse_glimmer_layers", where).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "hidden_dim"):
            hidden = _arith(node.value, {**constants, "dim": dim})
    if not isinstance(hidden, int):
        raise InputError(where, "model.flavor", "muse_glimmer: the FFN width (hidden_dim) is not read statically")
    n_layers, pattern = layers.kwargs.get("n_layers"), layers.kwargs.get("window_pattern")
    nope = constants.get("_EVERY_N_LAYERS_NOPE")
    if not (isinstance(n_layers, int) and isinstance(pattern, list) and pattern
            and all(isinstance(p, int) for p in pattern) and isinstance(nope, int) and nope > 0):
        raise InputError(where, "model.flavor", "muse_glimmer: window_pattern or _EVERY_N_LAYERS_NOPE is not read "
                         "statically")
    windows = [pattern[(i + nope - n_layers % nope) % len(pattern)] for i in range(n_layers)]
    out: dict[str, Any] = {"hidden_dim": hidden, "layer_windows": windows}
    head = model.kwargs.get("lm_head")
    scalings = {}
    for key in ("output_multiplier", "output_soft_cap_temp"):
        value = head.kwargs.get(key) if head is not None and hasattr(head, "kwargs") else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            scalings[key] = float(value)
    if scalings:
        out["scalings"] = scalings
    return out


def muse_glimmer_fields(fields: dict[str, Any], args: dict[str, Any], where: str) -> dict[str, Any]:
    """Megatron-named fields of a Muse Glimmer text flavor. The per-layer windows must be Megatron's
    pattern (one window size, every k-th layer global, layer k-1 first): else refused."""
    windows: list[int] = args["layer_windows"]
    sizes = {w for w in windows if w > 0}
    fields.update(kv_channels=int(args["head_dim"]), ffn_hidden_size=int(args["hidden_dim"]),
                  norm_placement="sandwich", qk_layernorm=True, qk_layernorm_affine=False,
                  attention_output_gate=True)
    if args.get("scalings"):
        fields["scalings"] = args["scalings"]
    if sizes:
        globals_at = [i for i, w in enumerate(windows) if w <= 0]
        skip = globals_at[0] + 1 if globals_at else None
        expected = [not (skip and (i + 1) % skip == 0) for i in range(len(windows))]
        if len(sizes) > 1 or expected != [w > 0 for w in windows]:
            raise InputError(where, "model.flavor", f"window pattern {windows} is not one window with "
                             "every k-th layer global (what the ledger models)")
        fields.update(window_size=sizes.pop(), window_attn_skip_freq=skip)
    return fields
