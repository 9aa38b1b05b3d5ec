"""The model of an imported launch config: architecture options in, a job's `model` value out.

Launch configs spell the architecture out (Megatron's --num-layers, --hidden-size, ...) while a job
names a catalog model. The importer builds the `ModelSpec` the options describe, then compares it
with every catalog entry on the *resolved* architecture (head dim, query groups, the MoE layer
pattern: what changes parameters and memory), so `kv_channels` left to Megatron's default still
equals a catalog entry that writes 128. Equal to an entry: the job names it. Otherwise the job holds
``{base: <nearest entry>, <field>: <value>, ...}`` with exactly the fields that differ, which says
both what the model is and how it departs from the nearest known one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache, lru_cache
from typing import Any

from primus.catalog.models import catalog_models, resolve_model
from primus.errors import InputError
from primus.specs.base import parse_spec
from primus.specs.model import ModelSpec
from primus.specs.params import count_params

DESCRIPTIVE = frozenset({"name", "display_name", "source", "notes", "published"})
ARCH_FIELDS: tuple[str, ...] = tuple(f for f in ModelSpec.model_fields if f not in DESCRIPTIVE)
MOE_ONLY = ("moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_bias")
MLA_ONLY = ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
VOCAB_FIELDS = ("vocab_size", "make_vocab_size_divisible_by")
#: Fields that do not tell two architectures apart when a vocabulary is looked up by shape.
SHAPE_IGNORED = (*VOCAB_FIELDS, "hidden_dropout", "attention_dropout")
#: RoPE's base, rotated share and Llama 3 scaling: what a launch trains, not a byte or a second that primus
#: answers, so no architecture is told apart by them (an argument line that leaves --rotary-base at
#: Megatron's default still names llama3.1-70b); the import says where the file's differ from the model's
ROPE_FIELDS = ("rotary_base", "rotary_percent", "rope_scaling_factor", "mla_rotary_scaling_factor", "mla_mscale",
               "mla_mscale_all_dim")


def signature(spec: ModelSpec) -> dict[str, Any]:
    """The architecture with defaults resolved and meaningless fields blanked (MoE fields of a dense
    model, MLA dimensions without MLA, the dense FFN of an all-MoE model)."""
    sig: dict[str, Any] = {f: getattr(spec, f) for f in ARCH_FIELDS}
    sig["kv_channels"] = None if spec.multi_latent_attention else spec.head_dim
    sig["num_query_groups"] = None if spec.multi_latent_attention else spec.query_groups
    sig["moe_layer_freq"] = spec.moe_layers
    if not spec.has_dense_layers:
        sig["ffn_hidden_size"] = None
    if not spec.is_moe:
        for key in MOE_ONLY:
            sig[key] = None
    if not spec.multi_latent_attention:
        for key in MLA_ONLY:
            sig[key] = None
    else:  # MLA's q/kv latent norms are what Megatron's qk_layernorm builds; the ledger counts them always
        sig["qk_layernorm"] = None
    if spec.window_size is None:
        sig["window_attn_skip_freq"] = None
    if spec.position_embedding_type != "learned_absolute":
        sig["max_position_embeddings"] = None  # only a learned table makes it a weight
    for key in ROPE_FIELDS:
        sig[key] = None
    return sig


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[str, ModelSpec, tuple[tuple[str, Any], ...]], ...]:
    out = []
    for slug in catalog_models():
        spec = resolve_model(slug, "catalog")
        out.append((slug, spec, tuple(signature(spec).items())))
    return tuple(out)


def catalog_spec(slug: str) -> ModelSpec:
    return resolve_model(slug, "catalog")


def differences(a: ModelSpec, b: ModelSpec, ignore: tuple[str, ...] = ()) -> list[str]:
    sa, sb = signature(a), signature(b)
    return [f for f in ARCH_FIELDS if f not in ignore and sa[f] != sb[f]]


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def model_reference(spec: ModelSpec, prefer: tuple[str, ...] = (), name: str | None = None, where: str = "import"
                    ) -> tuple[str | dict[str, Any], str]:
    """The job's `model` value for an architecture, and a note saying how it was chosen.

    An architecture that is no catalog model becomes ``{base, name, <changed fields>}``: the base is
    the entry with the fewest differing fields, ties going to the nearest in parameter count (so a
    7B model is not written over a 405B one); `name` (the file's own name for the model, else
    "imported") keeps it from printing as its base."""
    target = signature(spec)
    size = count_params(spec).total
    best: tuple[int, int, int, float, str, list[str]] | None = None
    for slug, cat, sig_items in _catalog():
        sig = dict(sig_items)
        diff = [f for f in ARCH_FIELDS if sig[f] != target[f]]
        same_context = cat.max_position_embeddings == spec.max_position_embeddings
        distance = abs(math.log(max(_total(slug), 1) / max(size, 1)))
        key = (len(diff), 0 if slug in prefer else 1, 0 if same_context else 1, distance, slug, diff)
        if best is None or key[:5] < best[:5]:
            best = key
    assert best is not None
    slug, diff = best[4], best[5]
    if not diff:
        return slug, f"the architecture options equal catalog model {slug}"
    base = catalog_spec(slug)
    raw = [f for f in ARCH_FIELDS if getattr(base, f) != getattr(spec, f)]
    # Fewest overrides first: the differing fields whose written value differs (an MLA rank left as
    # written when MLA is switched off is no difference), else every written difference.
    label = name or "imported"
    for fields in ([f for f in diff if f in raw], raw):
        ref: dict[str, Any] = {"base": slug, "name": label, **{f: _jsonable(getattr(spec, f)) for f in fields}}
        if spec.max_position_embeddings is not None and base.max_position_embeddings != spec.max_position_embeddings:
            ref["max_position_embeddings"] = spec.max_position_embeddings  # the file's context, not the base's
        if not differences(resolve_model(ref, where, "model"), spec):  # a name it cannot take names the file
            changed = ", ".join(fields)
            return ref, (f"no catalog model has this architecture: named {label!r}, written as {slug} with "
                         f"{changed} changed")
    raise InputError("import", "model", f"cannot express the architecture as {slug} with overrides")  # pragma: no cover


@cache
def _total(slug: str) -> int:
    return count_params(catalog_spec(slug)).total


def catalog_matches(fields: Mapping[str, Any], ignore: tuple[str, ...]) -> list[str]:
    """Catalog slugs whose architecture equals `fields` on everything but `ignore` (e.g. the vocabulary
    a launch line leaves to its tokenizer)."""
    probe = dict(fields)
    for key in ignore:
        probe.pop(key, None)
    probe.setdefault("vocab_size", 1)
    try:
        spec = ModelSpec.model_validate({"name": "probe", **probe})
    except ValueError:
        return []
    target = signature(spec)
    found = []
    for slug, cat, sig_items in _catalog():
        sig = dict(sig_items)
        if all(sig[f] == target[f] for f in ARCH_FIELDS if f not in ignore):
            found.append((cat.max_position_embeddings != spec.max_position_embeddings, slug))
    return [slug for _, slug in sorted(found)]


def build_model(fields: dict[str, Any], where: str, field_name: str = "model") -> ModelSpec:
    """Validate architecture fields (Megatron names) as a ModelSpec; one InputError line on failure."""
    return parse_spec(ModelSpec, {"name": "launch-config", **fields}, where, field_name)


def spec_fields(spec: ModelSpec) -> dict[str, Any]:
    """A catalog spec's architecture fields, as a starting point that launch options override."""
    return {f: getattr(spec, f) for f in ARCH_FIELDS}
