"""torchtitan model flavors read from the checkout a TOML lives in, statically (Python's `ast`).

A torchtitan TOML names a model by ``model.name`` and ``model.flavor``; the flavor's architecture is a
``ModelArgs(...)`` call in a dict of the model package's ``__init__.py`` (``llama3_args = {"8B":
TransformerModelArgs(dim=4096, ...)}``, ``qwen3_args = {...}``; pytorch/torchtitan v0.2.2), with the
dataclass defaults in ``model/args.py``. When a TOML sits inside such a checkout
(``torchtitan/models/<name>/train_configs/``), the flavor is read from those files, never imported or
run: only literal keyword values count, and anything else is reported. Families read: ``llama3``
(the SwiGLU width rule of ``FeedForward``: 2/3 of 4 x dim, times ``ffn_dim_multiplier``, rounded up to
``multiple_of``), ``qwen3`` (dense, and MoE with ``moe_args``) and ``deepseek_v3`` (MLA, dense layers
first, shared experts), and, for flavors torchtitan after #2386 builds in functions, also ``gpt_oss``,
``kimi_k2_7`` and ``muse_glimmer`` (`primus.launch.torchtitan_muse`); a flavor may be
``functools.partial(builder, key=literal)``. ``flux`` is not a language model.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Final

from primus.errors import InputError
from primus.yamlio import read_text

NOT_LANGUAGE: Final = {"flux": "diffusion (an image model)",
                        "qwen3_5": "hybrid (Gated DeltaNet linear-attention layers)"}
#: Megatron-LM's --make-vocab-size-divisible-by default, which a ModelSpec takes unless told; torchtitan
#: builds the embedding at vocab_size exactly, so a vocabulary that is no multiple of it gets 1
MEGATRON_VOCAB_MULTIPLE: Final = 128
FAMILIES: Final = ("llama3", "llama4", "qwen3", "deepseek_v3", "gpt_oss", "kimi_k2_7", "muse_glimmer")


def package_dir(toml: Path, name: str) -> Path | None:
    """The model package of a TOML under torchtitan/models/<name>/train_configs/, if that is where it is."""
    for parent in toml.resolve().parents:
        candidate = parent if parent.name == name else parent / name
        if (candidate / "__init__.py").is_file() and candidate.parent.name == "models":
            return candidate
    return None


def parse_python(path: Path) -> ast.Module:
    """A Python file's syntax tree (never executed); a file that does not parse is one InputError line."""
    try:
        return ast.parse(read_text(path), str(path))
    except (SyntaxError, ValueError) as exc:
        raise InputError(str(path), None, f"not Python that parses ({exc.__class__.__name__}: {exc})") from None


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _call_kwargs(call: ast.Call, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise InputError(where, "flavor", "a **kwargs in the flavor's arguments is not read statically")
        if isinstance(kw.value, ast.Call):
            out[kw.arg] = _call_kwargs(kw.value, where)
        else:
            value = _literal(kw.value)
            if value is None and not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                out[kw.arg] = ("unresolved", ast.unparse(kw.value))
            else:
                out[kw.arg] = value
    return out


def _class_defaults(tree: ast.Module, cls: str) -> dict[str, Any]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            out: dict[str, Any] = {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    value = _literal(item.value)
                    if value is not None:
                        out[item.target.id] = value
                    elif _factory(item.value) == "MoEArgs":  # field(default_factory=MoEArgs): its defaults
                        out[item.target.id] = {}
            return out
    return {}


def _factory(node: ast.AST) -> str | None:
    """The class named by ``field(default_factory=NAME)``, else None."""
    if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "field":
        for kw in node.keywords:
            if kw.arg == "default_factory" and isinstance(kw.value, ast.Name):
                return kw.value.id
    return None


def read_flavor(package: Path, flavor: str, where: str) -> tuple[str, dict[str, Any]]:
    """(the ModelArgs class name, its keyword values over the class defaults) of a flavor."""
    tree = parse_python(package / "__init__.py")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if (isinstance(key, ast.Constant) and key.value == flavor and isinstance(value, ast.Call)
                        and not _partial(value)):
                    cls = ast.unparse(value.func).split(".")[-1]
                    args = _call_kwargs(value, where)
                    defaults: dict[str, Any] = {}
                    args_file = package / "model" / "args.py"
                    if args_file.is_file():
                        defaults = _class_defaults(parse_python(args_file), cls)
                    merged = {**defaults, **args}
                    moe_file = package.parent / "moe" / "moe.py"
                    if isinstance(merged.get("moe_args"), dict) and moe_file.is_file():
                        moe_defaults = _class_defaults(parse_python(moe_file), "MoEArgs")
                        merged["moe_args"] = {**moe_defaults, **merged["moe_args"]}
                    return cls, merged
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == flavor and isinstance(value, ast.Name):
                    return value.id, _built_flavor(tree, value.id, package.name, where)
                if isinstance(key, ast.Constant) and key.value == flavor and _partial(value):
                    # `"30B_mm": partial(_muse_glimmer_30b, with_vision=True)`: the builder, with those settings
                    assert isinstance(value, ast.Call) and isinstance(value.args[0], ast.Name)
                    bound = {k.arg: _literal(k.value) for k in value.keywords if k.arg}
                    return value.args[0].id, _built_flavor(tree, value.args[0].id, package.name, where, bound)
    raise InputError(where, "model.flavor", f"{flavor!r} is not a flavor of {package / '__init__.py'}")


def _partial(node: ast.AST) -> bool:
    """``functools.partial(FUNCTION, key=literal, ...)``."""
    return (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "partial"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and all(k.arg for k in node.keywords))


#: The layer builders of flavors built by functions (torchtitan after #2386) that are read: dense only.
LAYER_BUILDERS: Final = {"muse_glimmer": ("_build_muse_glimmer_layers",), "llama3": ("_build_llama3_layers",),
                          "qwen3": ("_build_qwen3_layers", "_build_qwen3_moe_layers"),
                          "deepseek_v3": ("_build_dsv3_layers",), "gpt_oss": ("_build_gptoss_layers",),
                          "kimi_k2_7": ("_build_kimi_layers",)}
#: `_build_dsv3_layers` keywords and the v0.2 DeepSeekV3ModelArgs field each one was.
_DSV3: Final = {"n_dense_layers": "n_dense_layers", "q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank",
                "qk_nope_head_dim": "qk_nope_head_dim", "qk_rope_head_dim": "qk_rope_head_dim",
                "v_head_dim": "v_head_dim", "dense_hidden_dim": "inter_dim", "moe_hidden_dim": "moe_inter_dim"}


def _built_flavor(tree: ast.Module, function: str, package: str, where: str,
                  bound: dict[str, Any] | None = None) -> dict[str, Any]:
    """A flavor that torchtitan after #2386 builds in a function (``llama3_configs = {"8B": _8b}``, the
    function returning ``Llama3Model.Config(dim=..., layers=_build_llama3_layers(n_layers=..., hidden_dim=
    compute_ffn_hidden_dim(dim, multiple_of=1024, ffn_dim_multiplier=1.3), rope=...))``), read with the
    registry reader into the keyword arguments the v0.2 ``ModelArgs`` had."""
    from primus.launch.torchtitan_registry import MAX_DEPTH as MAX_CALLS
    from primus.launch.torchtitan_registry import Call, _Reader

    reader = _Reader(tree, where, follow=False)
    model = reader.run(function, bound=bound)
    for _ in range(MAX_CALLS):  # a flavor that returns another function's config, called with its settings
        if not (isinstance(model, Call) and model.name in reader.functions and not model.name.startswith("_build")):
            break
        model = reader.run(model.name, bound=model.kwargs)
    layers = model.kwargs.get("layers") if isinstance(model, Call) else None
    builders = LAYER_BUILDERS.get(package, ())
    if not isinstance(model, Call) or not isinstance(layers, Call) or layers.name not in builders:
        built = layers.name if isinstance(layers, Call) else "?"
        known = ", ".join(f"{k} ({', '.join(v)})" for k, v in LAYER_BUILDERS.items())
        raise InputError(where, "model.flavor", f"{function}() builds its layers with {built}: flavors built by "
                         f"functions are read for {known}")
    if model.kwargs.get("vision_encoder") is not None:
        raise InputError(where, "model.flavor", f"not supported: a vision-language model ({function}() builds a "
                         "vision_encoder); primus models text decoders")
    kw = layers.kwargs
    tied = model.kwargs.get("enable_weight_tying", "lm_head" not in model.kwargs)
    args: dict[str, Any] = {"dim": model.kwargs.get("dim"), "vocab_size": model.kwargs.get("vocab_size"),
                            "n_layers": kw.get("n_layers"), "n_heads": kw.get("n_heads"),
                            "n_kv_heads": kw.get("n_kv_heads"), "enable_weight_tying": tied}
    hidden = kw.get("hidden_dim")
    if isinstance(hidden, Call) and hidden.name == "compute_ffn_hidden_dim":
        args["multiple_of"] = hidden.kwargs.get("multiple_of", 1)  # the function's default
        args["ffn_dim_multiplier"] = hidden.kwargs.get("ffn_dim_multiplier")
    elif isinstance(hidden, int):
        args["hidden_dim"] = hidden
    if isinstance(kw.get("head_dim"), int):
        args["head_dim"] = kw["head_dim"]
    if layers.name in ("_build_dsv3_layers", "_build_kimi_layers"):  # Kimi's wraps build_mla_moe_layers too
        args.update({field: kw.get(key) for key, field in _DSV3.items()})
        args["moe_args"] = {"num_experts": kw.get("num_experts"), "top_k": kw.get("router_top_k"),
                            "num_shared_experts": kw.get("num_shared_experts", 0)}
    if layers.name == "_build_gptoss_layers":  # attention shape: _make_gptoss_attn_config's defaults
        args.update(moe_inter_dim=kw.get("hidden_dim"), moe_args={"num_experts": kw.get("num_experts"),
                                                                   "top_k": kw.get("top_k")})
        args.pop("hidden_dim", None)
        args.update({k: v for k, v in GPT_OSS_ATTENTION.items() if k != "sliding_window_size"})
    if layers.name == "_build_qwen3_moe_layers":  # every layer MoE, softmax top-k, no shared expert
        args.update(moe_enabled=True, moe_inter_dim=kw.get("moe_hidden_dim"), hidden_dim=kw.get("moe_hidden_dim"),
                    moe_args={"num_experts": kw.get("num_experts"), "top_k": kw.get("top_k"),
                              "num_shared_experts": 0})
    rope = kw.get("rope")
    if isinstance(rope, Call):
        args["max_seq_len"] = rope.kwargs.get("max_context_length")
    if layers.name == "_build_muse_glimmer_layers":
        from primus.launch.torchtitan_muse import muse_glimmer_args

        args.update(muse_glimmer_args(tree, model, layers, where))
    missing = [k for k in ("dim", "vocab_size", "n_layers", "n_heads") if not isinstance(args[k], int)]
    if missing:
        raise InputError(where, "model.flavor", f"{function}: cannot read {', '.join(missing)} statically")
    return args


def spec_fields(name: str, args: dict[str, Any], where: str) -> dict[str, Any]:
    """ModelSpec fields (Megatron names) of a flavor's arguments; one InputError line when one is missing."""
    try:
        return _fields(name, args, where)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(where, "model.flavor", f"{name}: the flavor's arguments lack {exc}") from None


def _fields(name: str, args: dict[str, Any], where: str) -> dict[str, Any]:
    unresolved = [f"{k} = {v[1]}" for k, v in args.items() if isinstance(v, tuple) and v[:1] == ("unresolved",)]
    if unresolved:
        raise InputError(where, "model.flavor", f"cannot read statically: {', '.join(unresolved)}")
    if isinstance(args.get("vocab_size"), int) and args["vocab_size"] < 1:  # v0.1's ModelArgs default, -1
        raise InputError(where, "model.flavor", f"{name}: the flavor's vocab_size is {args['vocab_size']}: torchtitan "
                         "sets it from the tokenizer file at run time (model.tokenizer_path), which primus does not "
                         "read; use a flavor that states its vocabulary")
    dim, heads = int(args["dim"]), int(args["n_heads"])
    fields: dict[str, Any] = {
        "num_layers": int(args["n_layers"]), "hidden_size": dim, "num_attention_heads": heads,
        "num_query_groups": args.get("n_kv_heads") or heads, "vocab_size": int(args["vocab_size"]),
        "position_embedding_type": "rope", "normalization": "RMSNorm", "swiglu": True, "add_bias_linear": False,
        "hidden_dropout": 0.0, "attention_dropout": 0.0,
        "untie_embeddings_and_output_weights": not args.get("enable_weight_tying", False),
        "max_position_embeddings": args.get("max_seq_len"),
    }
    if int(args["vocab_size"]) % MEGATRON_VOCAB_MULTIPLE:  # torchtitan never pads the vocabulary
        fields["make_vocab_size_divisible_by"] = 1
    if name == "llama3" and isinstance(args.get("hidden_dim"), int):
        fields.update(ffn_hidden_size=int(args["hidden_dim"]), kv_channels=dim // heads)
        return fields
    if name == "llama3":
        fields["ffn_hidden_size"] = _swiglu_width(args, dim)
        fields["kv_channels"] = dim // heads
        return fields
    if name == "llama4":
        return _llama4(fields, args, dim, heads)
    if name == "qwen3":
        fields.update(kv_channels=int(args["head_dim"]), qk_layernorm=bool(args.get("qk_norm", True)),
                      ffn_hidden_size=int(args["hidden_dim"]))
        if args.get("moe_enabled"):
            moe = args.get("moe_args") or {}
            fields.update(num_experts=int(moe["num_experts"]), moe_router_topk=int(moe.get("top_k", 1)),
                          moe_ffn_hidden_size=int(args["moe_inter_dim"]))
            if moe.get("num_shared_experts"):
                fields["moe_shared_expert_intermediate_size"] = int(moe["num_shared_experts"]) * int(
                    args["moe_inter_dim"])
        return fields
    if name in ("deepseek_v3", "kimi_k2_7"):  # Kimi K2.x and Moonlight are DeepSeek-V3-shaped text towers
        return _deepseek(fields, args)
    if name == "gpt_oss":
        return _gpt_oss(fields, args)
    if name == "muse_glimmer":
        from primus.launch.torchtitan_muse import muse_glimmer_fields

        return muse_glimmer_fields(fields, args, where)
    raise InputError(where, "model.name", f"{name}: flavors are read for {', '.join(FAMILIES)} only")


def _swiglu_width(args: dict[str, Any], dim: int, denominator: int = 1) -> int:
    """torchtitan's SwiGLU width (llama3 and llama4 ``FeedForward``): 2/3 of 4 x dim, times
    ``ffn_dim_multiplier``, divided by `denominator` (llama4's auto-scaled experts), rounded up to
    ``multiple_of``."""
    hidden = int(2 * 4 * dim / 3)
    if args.get("ffn_dim_multiplier") is not None:
        hidden = int(float(args["ffn_dim_multiplier"]) * hidden)
    hidden = int(hidden / denominator)
    multiple = int(args.get("multiple_of", 256))
    return multiple * ((hidden + multiple - 1) // multiple)


def _llama4(fields: dict[str, Any], args: dict[str, Any], dim: int, heads: int) -> dict[str, Any]:
    """llama4 ``TransformerModelArgs`` (torchtitan v0.2.2 model/model.py ``TransformerBlock``): layer i
    is MoE when (i + 1) % ``interleave_moe_layer_step`` == 0, else a dense SwiGLU of the llama3 width;
    with ``auto_scale_hidden_dim`` an expert's width is that width ÷ (top_k + num_shared_experts),
    rounded up to ``multiple_of``; the shared experts are one SwiGLU of num_shared_experts x that width.
    The router is a bias-free linear; its load-balancing ``expert_bias`` is a buffer, not a parameter.
    NoPE layers (``every_n_layers_nope``) drop RoPE, which has no parameters."""
    moe = args.get("moe_args") or {}
    top_k, shared = int(moe.get("top_k", 1)), int(moe.get("num_shared_experts", 0))
    step = int(args.get("interleave_moe_layer_step", 1))
    n_layers = int(args["n_layers"])
    expert = _swiglu_width(args, dim, top_k + shared if args.get("auto_scale_hidden_dim", True) else 1)
    fields.update(kv_channels=dim // heads, ffn_hidden_size=_swiglu_width(args, dim),
                  num_experts=int(moe["num_experts"]), moe_router_topk=top_k, moe_ffn_hidden_size=expert,
                  moe_layer_freq=[int((i + 1) % step == 0) for i in range(n_layers)])
    if shared:
        fields["moe_shared_expert_intermediate_size"] = shared * expert
    return fields


#: gpt-oss's attention where a flavor does not set it: v0.2 ``GptOssModelArgs`` defaults, and the defaults
#: of ``_make_gptoss_attn_config`` after #2386 (64 query heads, 8 KV heads of 64, a 128-token window on
#: the even layers; ``_build_gptoss_layers`` passes none of them). pytorch/torchtitan v0.2.2 and b5bcd76.
GPT_OSS_ATTENTION: Final = {"n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "sliding_window_size": 128}


def _gpt_oss(fields: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """gpt-oss: every layer a MoE of ``moe_inter_dim``-wide SwiGLU experts with biases and a biased
    softmax router (``gate_bias``), no shared expert; attention with learnable sinks and biases, a
    sliding window on every other layer (layer 0 first: Megatron's ``window_attn_skip_freq`` 2)."""
    merged = {**GPT_OSS_ATTENTION, **{k: v for k, v in args.items() if v is not None}}
    moe = merged.get("moe_args") or {}
    heads = int(merged["n_heads"])
    fields.update(num_attention_heads=heads, num_query_groups=int(merged["n_kv_heads"]),
                  kv_channels=int(merged["head_dim"]), add_bias_linear=True, softmax_type="learnable",
                  window_size=int(merged["sliding_window_size"]), window_attn_skip_freq=2,
                  num_experts=int(moe["num_experts"]), moe_router_topk=int(moe.get("top_k", 1)),
                  moe_ffn_hidden_size=int(merged["moe_inter_dim"]), moe_router_bias=True)
    fields.pop("ffn_hidden_size", None)
    return fields


def _deepseek(fields: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """DeepSeekV3ModelArgs: MLA (``q_lora_rank`` 0 = a plain query projection), ``n_dense_layers``
    dense layers first, then MoE layers with ``num_shared_experts`` shared experts of the expert width.
    The q/kv latent norms are built as Megatron's qk_layernorm builds them with MLA."""
    moe = args.get("moe_args") or {}
    n_layers, dense = int(args["n_layers"]), int(args.get("n_dense_layers", 0))
    moe_width = int(args["moe_inter_dim"])
    fields.update(multi_latent_attention=True, kv_channels=None, num_query_groups=None, qk_layernorm=True,
                  q_lora_rank=int(args["q_lora_rank"]) or None, kv_lora_rank=int(args["kv_lora_rank"]),
                  qk_head_dim=int(args["qk_nope_head_dim"]), qk_pos_emb_head_dim=int(args["qk_rope_head_dim"]),
                  v_head_dim=int(args["v_head_dim"]), ffn_hidden_size=int(args["inter_dim"]),
                  num_experts=int(moe["num_experts"]), moe_router_topk=int(moe.get("top_k", 1)),
                  moe_ffn_hidden_size=moe_width, moe_layer_freq=[0] * dense + [1] * (n_layers - dense))
    shared = int(moe.get("num_shared_experts", 0))
    if shared:
        fields["moe_shared_expert_intermediate_size"] = shared * moe_width
    return fields
