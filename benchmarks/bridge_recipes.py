"""Write the `recipes:` of stacks/megatron-bridge.yaml from NVIDIA-NeMo/Megatron-Bridge's workload presets.

Run (where the Megatron-Bridge mirror exists; CI has none, so the stack file is committed as data):

    python benchmarks/bridge_recipes.py [--mirror DIR] [--write]

It prints the recipes (or, with --write, replaces the `recipes:` list of stacks/megatron-bridge.yaml). The
source files are read with `git show TAG:path` and parsed, never executed:

- 25.09 (NeMo 25.09 = Megatron-Bridge v0.1.0rc3): `scripts/performance/configs/*/*_llm_pretrain.yaml`
  `perf_matrix.<gpu>.num_gpus_<N>.<precision>` over its `common` block, and the file's model-wide
  `ConfigContainer.model` recompute setting;
- 25.11 to 26.06.01 (v0.2.0 to v0.5.1): the `WorkloadBaseConfig(...)` / `replace(BASE, ...)` constants of
  `scripts/performance/configs/*/*workload_base_configs.py`, over the dataclass defaults of
  `scripts/performance/utils/utils.py`;
- 26.08 (v0.6.0): the `<model>_pretrain_<N>gpu_<gpu>_<precision>[_<variant>]_config` functions of
  `src/megatron/bridge/perf_recipes/`, the `cfg.<section>.<field> = literal` assignments in them and in the
  perf helpers they call (not the model recipe they start from); development configs (`*_dev_config`) left out.

How a preset's fields become primus settings (scripts/performance/utils/overrides.py
`_set_recompute_overrides`, helpers.py `set_recompute_overrides`): `recompute_num_layers` is full block
recompute of that many layers; `recompute_modules` is selective recompute of those modules and wins over
`recompute_num_layers` (it is applied after it); an empty list recomputes nothing; `cpu_offloading_num_layers`
offloads activations; `use_megatron_fsdp` is sharding fsdp; VP (with PP > 1) is carried; `moe_a2a_overlap`
(26.08: `comm_overlap.overlap_moe_expert_parallel_comm`) True is the MoE all-to-all overlap (v0.2.0
helpers.py `set_moe_a2a_overlap_overrides`, v0.3.0-v0.5.1 overrides.py `_set_moe_a2a_overlap_overrides`). Each variant's
layout (TP, PP, VP, CP, EP, ETP, MBS, GPUs, GBS) tells variants apart (`Stack.recipe_for`). A key (model,
GPU, precision, release) is written only where some variant sets one of those settings, and then with every
variant, the default one first (argument_parser.py: --config_variant defaults to v2). What a preset sets that
primus does not model is named in its source. Consecutive releases with the same preset merge into one
recipe with `since`/`until`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
STACK = ROOT / "stacks" / "megatron-bridge.yaml"
#: NeMo container -> Megatron-Bridge tag (docs/releases/software-versions.md; the .01 containers are the
#: patch tags, 26.08 the first tag after 26.06.01). 26.04.01 is v0.4.2, not v0.4.1: v0.4.2 (2026-05-28) is the
#: first tag whose docs/performance-summary.md has the "26.04.01 NeMo Container" section, and its presets are
#: the configurations that section prints (all 34 of its runs match a v0.4.2 preset's layout, 32 a v0.4.1 one:
#: B200 DeepSeek-V3 MXFP8 at PP 8 x VP 2, EP 32 and B300 DeepSeek-V3 at PP 8, MBS 2 are v0.4.2's V2 presets).
RELEASES = {"25.09": "v0.1.0rc3", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
            "26.04.01": "v0.4.2", "26.06": "v0.5.0", "26.06.01": "v0.5.1", "26.08": "v0.6.0"}
ORDER = list(RELEASES)
MODELS = {"LLAMA3_8B": "llama3-8b", "LLAMA3_70B": "llama3-70b", "LLAMA31_405B": "llama3.1-405b",
          "DEEPSEEK_V3": "deepseek-v3", "GPT_OSS_120B": "gpt-oss-120b", "QWEN3_30B_A3B": "qwen3-30b-a3b",
          "QWEN3_235B_A22B": "qwen3-235b-a22b", "KIMI_K2": "kimi-k2"}
GPUS = {"H100": "h100-80gb", "B200": "b200", "B300": "b300", "GB200": "gb200", "GB300": "gb300"}
PRECISIONS = {"BF16": "bf16", "FP8_CS": "fp8", "FP8_MX": "mxfp8", "NVFP4": "nvfp4", "FP8_SC": "fp8-block",
              "FP8CS": "fp8", "FP8MX": "mxfp8", "FP8SC": "fp8-block"}
#: 25.09 perf_matrix precision keys (fp8_ds, delayed scaling, is not the FP8 the tables name: left out)
PRECISIONS_2509 = {"bf16": "bf16", "fp8_cs": "fp8", "fp8_mx": "mxfp8", "fp8_ss": "fp8-block"}
FILES_2509 = {"llama3/llama3_8b_llm_pretrain.yaml": "llama3-8b", "llama3/llama3_70b_llm_pretrain.yaml": "llama3-70b",
              "llama31/llama31_405b_llm_pretrain.yaml": "llama3.1-405b",
              "deepseek/deepseek_v3_llm_pretrain.yaml": "deepseek-v3",
              "qwen3/qwen3_30b_a3b_llm_pretrain.yaml": "qwen3-30b-a3b",
              "qwen3/qwen3_235b_a22b_llm_pretrain.yaml": "qwen3-235b-a22b"}
#: preset fields primus does not model, named in the recipe's source
UNMODELLED = ("pp_layout", "cuda_graph_impl", "cuda_graph_scope",
              "nccl_ub", "fp8_dot_product_attention")
UNMODELLED_FLAT = ("model.pipeline_model_parallel_layout", "model.fine_grained_activation_offloading",
                   "model.offload_modules",
                   "comm_overlap.overlap_moe_expert_parallel_comm", "model.moe_a2a_overlap", "model.cuda_graph_impl",
                   "model.cuda_graph_scope")
#: the 26.08 assignments that turn on the MoE all-to-all overlap
A2A_FLAT = ("comm_overlap.overlap_moe_expert_parallel_comm", "model.moe_a2a_overlap")
#: the catalog's MoE models (the ones whose presets choose a token dispatcher)
MOE_MODELS = ("deepseek-v3", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b", "kimi-k2")
#: before v0.4.0 a preset's moe_flex_dispatcher_backend reaches the model only through its model's perf script
#: (`moe_flex_dispatcher_backend=base_cfg.moe_flex_dispatcher_backend` in
#: scripts/performance/configs/<family>/*_llm_pretrain.py); the others never pass it (gpt_oss_llm_pretrain.py
#: names it nowhere in v0.2.0-v0.3.0); v0.3.1 below
PASSES_BACKEND = {"v0.2.0": ("deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b"),
                  "v0.3.0": ("deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b")}
#: v0.3.1 (26.02.01) decides otherwise: the model recipes apply a backend of their own (recipes/deepseek/
#: deepseek_v3.py `apply_flex_dispatcher_backend` with hybridep; recipes/kimi/kimi_k2.py names deepep, which
#: kimi_llm_pretrain.py applies when the preset names none), and qwen3_llm_pretrain.py sets the type outright
#: per GPU (lines 81-315: flex for Qwen3-235B on GB200/GB300 and Qwen3-30B everywhere, alltoall for Qwen3-235B
#: on B200/B300/H100); gpt_oss_llm_pretrain.py applies none
V031_RECIPE_BACKEND = {"deepseek-v3": "hybridep", "kimi-k2": "deepep"}
V031_QWEN_TYPE = {("qwen3-235b-a22b", "gb200"): "flex", ("qwen3-235b-a22b", "gb300"): "flex",
                  ("qwen3-235b-a22b", "b200"): "alltoall", ("qwen3-235b-a22b", "b300"): "alltoall",
                  ("qwen3-235b-a22b", "h100-80gb"): "alltoall"}
EXPR = "<expr>"
UNREAD = "<unread start>"
LAYOUT_KEYS = ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
               "model.expert_model_parallel_size", "model.context_parallel_size")
HEADER = """\
  # Read from NVIDIA-NeMo/Megatron-Bridge's workload presets by benchmarks/bridge_recipes.py (25.09: the
  # v0.1.0rc3 perf_matrix yamls; 25.11-26.06.01: v0.2.0-v0.5.1 scripts/performance/configs/*/
  # *workload_base_configs.py; 26.08: v0.6.0 src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py, the
  # explicit cfg settings and the perf helpers they call, not the model recipe they start from), every
  # preset of the catalog's models on H100/B200/B300/GB200/GB300 of which some variant sets something
  # primus models; every variant of such a preset is listed with its layout (Stack.recipe_for), the default
  # variant first (scripts/performance/argument_parser.py: --config_variant defaults to v2).
"""


@dataclass
class Preset:
    """One workload preset of one release, as its fields read."""

    release: str
    tag: str
    commit: str
    path: str
    name: str
    model: str
    gpu: str
    precision: str
    variant: str
    fields: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    whole_model: dict[str, Any] = field(default_factory=dict)


class Mirror:
    def __init__(self, root: Path) -> None:
        self.root = root

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, text=True,
                              check=True).stdout

    def show(self, tag: str, path: str) -> str:
        return self.git("show", f"{tag}:{path}")

    def files(self, tag: str, under: str) -> list[str]:
        return self.git("ls-tree", "-r", "--name-only", tag, under).split()

    def commit(self, tag: str) -> str:
        return self.git("rev-list", "-n1", tag).strip()


def _literal(node: ast.AST, names: dict[str, Any]) -> Any:
    """A literal, or a module-level name bound to one; EXPR for anything computed."""
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return EXPR


def read_perf_matrix(mirror: Mirror) -> list[Preset]:
    """25.09: the perf_matrix yamls of v0.1.0rc3."""
    release, tag = "25.09", RELEASES["25.09"]
    commit, out = mirror.commit(tag), []
    known = {"num_gpus_per_node", "seq_length", "mbs", "gbs", "tp", "pp", "vp", "cp", "ep", "etp",
             "use_megatron_fsdp", "recompute_num_layers", "cpu_offloading_num_layers", "moe_a2a_overlap"}
    for path, model in FILES_2509.items():
        full = f"scripts/performance/configs/{path}"
        doc = yaml.safe_load(mirror.show(tag, full))
        whole = (doc.get("ConfigContainer") or {}).get("model") or {}
        for gpu, scales in doc["perf_matrix"].items():
            for scale, block in scales.items():
                for key, over in block.items():
                    if key not in PRECISIONS_2509 or gpu.upper() not in GPUS:
                        continue
                    o = {**block["common"], **(over or {})}
                    fields = {"tensor_model_parallel_size": o.get("tp", 1),
                              "pipeline_model_parallel_size": o.get("pp", 1),
                              "virtual_pipeline_model_parallel_size": o.get("vp"),
                              "context_parallel_size": o.get("cp", 1),
                              "expert_model_parallel_size": o.get("ep", 1), "expert_tensor_parallel_size": o.get("etp"),
                              "micro_batch_size": o["mbs"], "num_gpus": int(scale.split("_")[-1]),
                              "global_batch_size": o["gbs"], "use_megatron_fsdp": o.get("use_megatron_fsdp"),
                              "recompute_num_layers": o.get("recompute_num_layers"),
                              "cpu_offloading_num_layers": o.get("cpu_offloading_num_layers"),
                              "moe_a2a_overlap": o.get("moe_a2a_overlap")}
                    extra = [f"{k} {o[k]}" for k in o if k not in known and o[k] not in (None, False)]
                    out.append(Preset(release, tag, commit, full, f"perf_matrix.{gpu}.{scale}.{key}", model,
                                      GPUS[gpu.upper()], PRECISIONS_2509[key], "", fields,
                                      ["not modelled: " + ", ".join(extra)] if extra else [], whole))
    return out


def _dataclass_defaults(source: str) -> dict[str, Any]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "WorkloadBaseConfig")
    return {n.target.id: _literal(n.value, {}) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None}


_PREC = "BF16|FP8_CS|FP8_MX|NVFP4|FP8_SC"
_NAME = re.compile(rf"^(?P<model>[A-Z0-9_]+?)_(?:PRETRAIN_CONFIG_(?P<gpu>[A-Z0-9]+)(?:_(?P<prec>{_PREC}))?"
                   rf"(?:_(?P<var>V\d+|LARGE_SCALE|GBS\d+))?|(?P<gpu2>[A-Z0-9]+)_(?P<prec2>{_PREC})_BASE_CONFIG)$")


def read_workload_configs(mirror: Mirror, release: str) -> list[Preset]:
    """25.11-26.06.01: the WorkloadBaseConfig constants, over the dataclass defaults."""
    tag = RELEASES[release]
    commit = mirror.commit(tag)
    defaults = _dataclass_defaults(mirror.show(tag, "scripts/performance/utils/utils.py"))
    out = []
    for path in mirror.files(tag, "scripts/performance/configs"):
        if not path.endswith("workload_base_configs.py"):
            continue
        env: dict[str, dict[str, Any]] = {}
        names: dict[str, Any] = {}
        for node in ast.parse(mirror.show(tag, path)).body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            target, value = node.targets[0].id, node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                if value.func.id == "WorkloadBaseConfig":
                    base = dict(defaults)
                elif value.func.id == "replace" and isinstance(value.args[0], ast.Name) and value.args[0].id in env:
                    base = dict(env[value.args[0].id])
                else:
                    continue
                base.update({k.arg: _literal(k.value, names) for k in value.keywords if k.arg})
                env[target] = base
            elif isinstance(value, ast.Name) and value.id in env:  # an alias: NAME_FP8_CS_V1 = NAME_V1
                env[target] = env[value.id]
            else:
                names[target] = _literal(value, names)
        for name, fields in env.items():
            m = _NAME.match(name)
            model = next((v for k, v in MODELS.items() if name.startswith(k + "_")), None)
            if m is None or model is None or not name.startswith(_model_key(model) + "_"):
                continue
            gpu, prec = m.group("gpu") or m.group("gpu2"), m.group("prec") or m.group("prec2")
            if gpu not in GPUS or m.group("model") != _model_key(model):
                continue
            set_here = {k: v for k, v in fields.items() if v != defaults.get(k)}
            notes = [f"{k} {set_here[k]!r}" if isinstance(set_here[k], str) else f"{k} {set_here[k]}"
                     for k in UNMODELLED if set_here.get(k) not in (None, False, [], "none")
                     and not (k == "pp_layout" and layout_modelled(model, fields, release, set_here[k]))]
            out.append(Preset(release, tag, commit, path, name, model, GPUS[gpu], PRECISIONS[prec] if prec else "*",
                              m.group("var") or "", fields, ["not modelled: " + ", ".join(notes)] if notes else []))
    return out


def layout_modelled(model: str, fields: dict[str, Any], release: str, text: object) -> bool:
    """Whether a preset's `pp_layout` is one the stack file's `pipeline_layouts` give the model at its PP x VP
    in this release (then the projection runs it, `primus.stacks.apply.model_pipeline_layout`)."""
    if not isinstance(text, str):
        return False
    pp = fields["pipeline_model_parallel_size"]
    vp = fields.get("virtual_pipeline_model_parallel_size") or 1
    at = ORDER.index(release)
    for r in yaml.safe_load(STACK.read_text(encoding="utf-8")).get("pipeline_layouts", []):
        if (r["model"], r["pp"], r.get("vp", 1)) != (model, pp, vp) or r["layout"] != "".join(text.split()):
            continue
        if ORDER.index(r.get("since", ORDER[0])) <= at <= ORDER.index(r.get("until", ORDER[-1])):
            return True
    return False


def _model_key(model: str) -> str:
    return next(k for k, v in MODELS.items() if v == model)


_FLAT = re.compile(r"^(?P<model>\w+?)_pretrain_(?P<gpus>\d+)gpu_(?P<gpu>[a-z0-9]+)_(?P<prec>[a-z0-9]+?)"
                   r"(?:_(?P<var>\w+))?_config$")


class _Flat:
    """v0.6.0's perf_recipes functions, per model family, and the assignments a recipe makes."""

    def __init__(self, mirror: Mirror, tag: str) -> None:
        self.functions: dict[str, dict[str, tuple[ast.FunctionDef, str]]] = {}
        for path in mirror.files(tag, "src/megatron/bridge/perf_recipes"):
            if not path.endswith(".py"):
                continue
            parts = path.split("/")
            family = parts[4] if len(parts) > 5 else "_"
            for node in ast.parse(mirror.show(tag, path)).body:
                if isinstance(node, ast.FunctionDef):
                    self.functions.setdefault(family, {})[node.name] = (node, path)

    def lookup(self, family: str, name: str) -> tuple[ast.FunctionDef, str] | None:
        return self.functions.get(family, {}).get(name) or self.functions.get("_", {}).get(name)

    def walk(self, family: str, fn: tuple[ast.FunctionDef, str], state: dict[str, Any], var: str = "cfg") -> None:
        """The `var.<section>.<field> = ...` assignments of `fn`'s body in order, following the perf helpers
        it calls with `var` and the perf recipe it starts from (`cfg = other_config()`)."""
        for st in fn[0].body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                target, value = st.targets[0], st.value
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                        and isinstance(target.value.value, ast.Name) and target.value.value.id == var):
                    state[f"{target.value.attr}.{target.attr}"] = _literal(value, {})
                elif (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                      and target.value.id == var and isinstance(value, ast.Call)):
                    # `cfg.comm_overlap = CommOverlapConfig(k=v, ...)`: a fresh section with those fields
                    for key in [k for k in state if k.startswith(target.attr + ".")]:
                        del state[key]
                    state.update({f"{target.attr}.{k.arg}": _literal(k.value, {}) for k in value.keywords if k.arg})
                elif isinstance(target, ast.Name) and isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                    start, gbs = value, None
                    if value.func.id == "_with_global_batch_size" and isinstance(value.args[0], ast.Call):
                        start, gbs = value.args[0], _literal(value.args[1], {})
                    if isinstance(start.func, ast.Name):
                        inner = self.lookup(family, start.func.id)
                        if inner is not None and not start.func.id.endswith("pretrain_config"):
                            self.walk(family, inner, state, "cfg")
                        elif inner is None and not start.func.id.endswith("pretrain_config"):
                            state[UNREAD] = start.func.id  # a start outside perf_recipes: its layout is unknown
                    if gbs is not None:
                        state["train.global_batch_size"] = gbs
            elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Name):
                call, func = st.value, st.value.func
                if call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == var:
                    inner = self.lookup(family, func.id)
                    if inner is not None:
                        params = [a.arg for a in inner[0].args.args]
                        self.walk(family, inner, state, params[0] if params else var)


def read_flat_recipes(mirror: Mirror) -> list[Preset]:
    """26.08: v0.6.0's perf_recipes functions."""
    release, tag = "26.08", RELEASES["26.08"]
    commit, flat, out = mirror.commit(tag), _Flat(mirror, tag), []
    lower = {k.lower(): v for k, v in MODELS.items()}
    for family, table in flat.functions.items():
        for name, fn in table.items():
            m = _FLAT.match(name)
            if m is None or "dev" in (m.group("var") or ""):
                continue
            model, gpu, prec = lower.get(m.group("model")), GPUS.get(m.group("gpu").upper()), \
                PRECISIONS.get(m.group("prec").upper())
            if not (model and gpu and prec):
                continue
            st: dict[str, Any] = {}
            flat.walk(family, fn, st)
            fields = {"tensor_model_parallel_size": st.get("model.tensor_model_parallel_size", 1),
                      "pipeline_model_parallel_size": st.get("model.pipeline_model_parallel_size", 1),
                      "virtual_pipeline_model_parallel_size": st.get("model.virtual_pipeline_model_parallel_size"),
                      "context_parallel_size": st.get("model.context_parallel_size", 1),
                      "expert_model_parallel_size": st.get("model.expert_model_parallel_size", 1),
                      "expert_tensor_parallel_size": st.get("model.expert_tensor_parallel_size"),
                      "micro_batch_size": st.get("train.micro_batch_size", 1),
                      "global_batch_size": st.get("train.global_batch_size"), "num_gpus": int(m.group("gpus")),
                      "use_megatron_fsdp": st.get("ddp.use_megatron_fsdp"),
                      "recompute_num_layers": st.get("model.recompute_num_layers"),
                      "recompute_method": st.get("model.recompute_method"),
                      "recompute_modules": st.get("model.recompute_modules"),
                      "recompute_granularity": st.get("model.recompute_granularity"),
                      "cpu_offloading_num_layers": (st.get("model.cpu_offloading_num_layers")
                                                    if st.get("model.cpu_offloading") else None),
                      "moe_a2a_overlap": any(st.get(k) is True for k in A2A_FLAT),
                      "moe_token_dispatcher_type": st.get("model.moe_token_dispatcher_type"),
                      "cutedsl_fused_grouped_mlp": st.get("model.use_transformer_engine_op_fuser") is True}
            if fields["global_batch_size"] is None or (UNREAD in st and not any(k in st for k in LAYOUT_KEYS)):
                continue  # starts from a recipe outside perf_recipes (recipes/qwen/h100/qwen3_moe.py) that sets
                # the layout: not read here, so not known
            notes = [(f"{k.split('.')[-1]} (set by code)" if st[k] == EXPR else f"{k.split('.')[-1]} {st[k]!r}")
                     for k in UNMODELLED_FLAT if k in st and st[k] not in (None, False, [], "none")
                     and not (k in A2A_FLAT and st[k] is True)]  # a literal True is modelled (settings_of)
            out.append(Preset(release, tag, commit, fn[1], name, model, gpu, prec, (m.group("var") or "").upper(),
                              fields, ["not modelled: " + ", ".join(notes)] if notes else []))
    return out


def dispatcher_of(p: Preset) -> tuple[str | None, str | None]:
    """The MoE token dispatcher a preset's run used, and why where a named backend was not applied.

    - 25.09 (v0.1.0rc3 scripts/performance/run_script.py, setup_experiment.py): DeepEP (`enable_deepep`, the
      recipe's `moe_token_dispatcher_type = "flex"`) for DeepSeek-V3 on H100 only (B200/GB200 drop tokens);
      every other run keeps the model provider's `alltoall`.
    - 25.11-26.02 (v0.2.0-v0.3.0): the preset's backend where its model's perf script passes it
      (`PASSES_BACKEND`) to the recipe's `apply_flex_dispatcher_backend`, else the provider's `alltoall`.
    - 26.02.01 (v0.3.1): the model recipes' own backends and Qwen3's per-GPU types (`V031_*`).
    - 26.04-26.06.01 (v0.4.0-v0.5.1): scripts/performance/utils/overrides.py `set_workload_base_configs` for
      every model: the preset's backend, or `cfg.model.moe_token_dispatcher_type = "alltoall"` where it names none.
    - `apply_flex_dispatcher_backend` (src/megatron/bridge/training/flex_dispatcher_backend.py) skips DeepEP
      off Ampere/Hopper/B200/B300 (so on GB200/GB300) and, in v0.2.0, HybridEP off GB200/GB300; from v0.3.0
      HybridEP runs on every compute capability 8/9/10 GPU. A skipped backend leaves `alltoall`.
    - 26.08 (v0.6.0 perf_recipes): the `cfg.model.moe_token_dispatcher_type` a preset or its helpers assign;
      none assigned: not stated (the stack's default)."""
    if p.model not in MOE_MODELS:
        return None, None
    if p.release == "25.09":
        return ("flex" if p.model == "deepseek-v3" and p.gpu == "h100-80gb" else "alltoall"), None
    if p.tag == "v0.6.0":
        return p.fields.get("moe_token_dispatcher_type"), None
    backend = p.fields.get("moe_flex_dispatcher_backend")
    if p.tag == "v0.3.1":
        if p.model.startswith("qwen3-"):
            return V031_QWEN_TYPE.get((p.model, p.gpu), "flex"), None
        if p.model == "gpt-oss-120b":
            return "alltoall", (f"moe_flex_dispatcher_backend {backend!r} not applied by gpt_oss_llm_pretrain.py"
                                if backend else None)
        backend = V031_RECIPE_BACKEND[p.model] if p.model == "deepseek-v3" or backend is None else backend
    if backend is None:
        return "alltoall", None
    if p.tag in PASSES_BACKEND and p.model not in PASSES_BACKEND[p.tag]:
        return "alltoall", f"moe_flex_dispatcher_backend {backend!r} not passed on by the model's perf script"
    applies = (p.gpu in ("h100-80gb", "b200", "b300") if backend == "deepep"
               else (p.gpu in ("gb200", "gb300") or p.tag != "v0.2.0") if backend == "hybridep" else False)
    if not applies:
        return "alltoall", f"moe_flex_dispatcher_backend {backend!r} skipped on {p.gpu} (apply_flex_dispatcher_backend)"
    return "flex", None


def settings_of(p: Preset) -> dict[str, Any]:
    """The primus recipe settings a preset's fields make (module docstring)."""
    f, s = p.fields, dict[str, Any]()
    if f.get("use_megatron_fsdp"):
        s["sharding"] = "fsdp"
    if f.get("recompute_num_layers") is not None:
        s.update(recompute="full", recompute_num_layers=f["recompute_num_layers"],
                 recompute_method=f.get("recompute_method") or "block")
    if f.get("recompute_granularity") == "selective" and f.get("recompute_modules") is None:
        s["recompute"] = "selective"  # Megatron-Core's default modules, ['core_attn']
    if f.get("recompute_modules") == []:
        s["recompute"] = "none"
    if f.get("recompute_modules"):
        s.pop("recompute_num_layers", None)
        s.pop("recompute_method", None)
        s.update(recompute="selective", recompute_modules=list(f["recompute_modules"]))
    if p.whole_model.get("recompute_granularity") == "selective" and "recompute" not in s:
        s["recompute"] = "selective"
    if f.get("cpu_offloading_num_layers"):
        s["cpu_offloading_num_layers"] = f["cpu_offloading_num_layers"]
    if f["pipeline_model_parallel_size"] > 1 and (f.get("virtual_pipeline_model_parallel_size") or 1) > 1:
        s["vp"] = f["virtual_pipeline_model_parallel_size"]
    if f.get("moe_a2a_overlap") is True:
        s["moe_a2a_overlap"] = True
    if dispatcher_of(p)[0] == "flex":  # the stack's default is the providers' alltoall
        s["moe_dispatcher"] = "flex"
    if f.get("cutedsl_fused_grouped_mlp") is True and p.model in MOE_MODELS and p.precision == "mxfp8":
        # 26.06-26.06.01: overrides.py `set_workload_base_configs` sets use_transformer_engine_op_fuser (v0.5.0
        # lines 238-243) and perf_plugins.py NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (lines 308-309); 26.08: the recipe's
        # own helpers set the op fuser and its env_vars the variable. Megatron-Core core_v0.18.0 then builds the
        # experts from Transformer Engine's fused ops (MXFP8 only)
        s["moe_grouped_gemm"] = "te_fused"
    return s


def layout_of(f: dict[str, Any]) -> dict[str, Any]:
    return {"tp": f["tensor_model_parallel_size"], "pp": f["pipeline_model_parallel_size"],
            "vp": f.get("virtual_pipeline_model_parallel_size") or 1, "cp": f["context_parallel_size"],
            "ep": f["expert_model_parallel_size"], "etp": f.get("expert_tensor_parallel_size"),
            "mbs": f["micro_batch_size"], "gpus": f["num_gpus"], "gbs": f["global_batch_size"]}


def _notes(p: Preset) -> list[str]:
    notes = list(p.notes)
    skipped = dispatcher_of(p)[1]
    if skipped:
        notes.append(skipped)
    if p.whole_model.get("recompute_granularity") == "selective":
        notes.insert(0, "ConfigContainer.model recompute_granularity 'selective' for every GPU (the DeepSeek-V3 "
                        "recipe's recompute_modules None: Megatron-Core's ['core_attn'])")
    if p.whole_model.get("pipeline_model_parallel_layout"):
        notes.insert(1, f"pipeline_model_parallel_layout {p.whole_model['pipeline_model_parallel_layout']!r} "
                        "(not modelled)")
    return notes


def _rank(variant: str) -> tuple[int, str]:
    return (0 if variant == "V2" else 1 if variant in ("V1", "") else 2, variant)


def _flow(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {'[' + ', '.join(v) + ']' if isinstance(v, list) else json.dumps(v)}"
                           for k, v in d.items() if v is not None) + "}"


def recipes(presets: list[Preset]) -> str:
    """The YAML of the recipes (module docstring), HEADER first."""
    by: dict[tuple[str, str, str, str], list[Preset]] = {}
    for p in presets:
        for prec in ([p.precision] if p.precision != "*" else ["bf16", "fp8", "mxfp8", "nvfp4"]):
            by.setdefault((p.model, p.gpu, prec, p.release), []).append(p)
    for key, items in by.items():  # a precision-less constant only where the precision has none of its own
        own = [p for p in items if p.precision != "*"]
        by[key] = own or items
    lines = [HEADER.rstrip("\n")]
    seq: dict[tuple[str, str, str, str], list[tuple[str, Preset]]] = {}
    first: dict[tuple[str, str, str], int] = {}
    for (model, gpu, prec, release), items in by.items():
        if not any(settings_of(p) for p in items):
            continue  # no variant sets anything primus models: the stack's defaults are the preset's
        if release == "25.09":
            for p in items:  # 25.09 scales are variants of their own
                first.setdefault((model, gpu, prec), len(first))
                seq.setdefault((model, gpu, prec, f"25.09:{p.name}"), []).append((release, p))
            continue
        ranked = sorted(items, key=lambda p: (_rank(p.variant)[0], -p.fields["num_gpus"] if p.tag == "v0.6.0" else 0,
                                              p.variant))
        for p in ranked:
            first.setdefault((model, gpu, prec), len(first))
            seq.setdefault((model, gpu, prec, p.variant or "V1"), []).append((release, p))
    keys = sorted(seq, key=lambda k: (not k[3].startswith("25.09"), first[k[:3]], _rank(k[3])))
    for key in keys:
        groups: list[list[tuple[str, Preset]]] = []
        for release, p in sorted(seq[key], key=lambda x: ORDER.index(x[0])):
            last = groups[-1][-1] if groups else None
            if (last is not None and ORDER.index(last[0]) == ORDER.index(release) - 1 and last[1].name == p.name
                    and (layout_of(last[1].fields), settings_of(last[1]), _notes(last[1]))
                    == (layout_of(p.fields), settings_of(p), _notes(p))):
                groups[-1].append((release, p))
            else:
                groups.append([(release, p)])
        for g in groups:
            lines += _entry(key[:3], g)
    return "\n".join(lines) + "\n"


def _entry(key: tuple[str, str, str], group: list[tuple[str, Preset]]) -> list[str]:
    (since, a), (until, b) = group[0], group[-1]
    model, gpu, prec = key
    if a.release == "25.09":
        src = f"NVIDIA-NeMo/Megatron-Bridge {a.tag} ({a.commit}, NeMo 25.09) {a.path} {a.name}"
        notes = _notes(a)
        src += f"; {'; '.join(notes)}" if notes else ""
        span = ['    until: "25.09"']
    else:
        tags = a.tag if a.tag == b.tag else f"{a.tag}-{b.tag}"
        last = f", last {b.commit}" if b.commit != a.commit else ""
        to = f" to {until}" if until != since else ""
        src = f"NVIDIA-NeMo/Megatron-Bridge {tags} ({a.commit}{last}; NeMo {since}{to}) {a.path} {a.name}"
        notes = _notes(a)
        src += f"; {'; '.join(notes)}" if notes else ""
        span = [f'    since: "{since}"'] + ([f'    until: "{until}"'] if until != ORDER[-1] else [])
    return [f"  - model: {model}", f"    gpu: {gpu}", f"    precision: {prec}", *span,
            f"    layout: {_flow(layout_of(a.fields))}", f"    settings: {_flow(settings_of(a))}",
            "    source: >-", f"      {src}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR)
    ap.add_argument("--write", action="store_true", help=f"replace the recipes of {STACK.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if not (args.mirror / "HEAD").exists():
        print(f"{args.mirror}: no Megatron-Bridge mirror (git bare repository)", file=sys.stderr)
        return 2
    mirror = Mirror(args.mirror)
    presets = read_perf_matrix(mirror)
    for release in ORDER[1:-1]:
        presets += read_workload_configs(mirror, release)
    presets += read_flat_recipes(mirror)
    text = recipes(presets)
    if not args.write:
        sys.stdout.write(text)
        return 0
    stack = STACK.read_text(encoding="utf-8")
    head = stack[:stack.index("\nrecipes:\n") + len("\nrecipes:\n")]
    STACK.write_text(head + text, encoding="utf-8")
    print(f"{STACK.relative_to(ROOT)}: {text.count('  - model: ')} recipes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
