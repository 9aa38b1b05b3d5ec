"""Stacks: a framework and its release, as data (`stacks/NAME.yaml`).

`resolve_stack("megatron-bridge@26.04")` gives the settings that release uses for everything a job
file may leave unsaid, each with its source. RELEASE is the framework's own version string, or
YYYY.MM for a framework without releases. A bare name means the newest release; an unknown release
resolves to the newest release not after it, and the resolved stack says so (`note`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from primus.errors import InputError, did_you_mean
from primus.paths import data_dir
from primus.specs.base import parse_spec
from primus.stacks.schema import (
    LAYOUT_AXES,
    PARTITION_AXES,
    ModelPipelineLayout,
    Recipe,
    RecipeLayout,
    StackFile,
)
from primus.yamlio import load_mapping

DEFAULT_STACK = "megatron-lm"
ALLOCATORS = "allocators"  # stacks/allocators.yaml: the allocator reserves, not a stack
_REF = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:@([A-Za-z0-9][A-Za-z0-9._-]*))?$")
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_MONTH = re.compile(r"^\d{4}\.(\d{2})$")  # YYYY.MM: the label of a framework without releases
_CONTAINER = re.compile(r"^\d{2}\.(\d{2})(\.\d+)*$")  # YY.MM[.PATCH]: NVIDIA container versions (NeMo, Bridge)


def catalog_stacks() -> list[str]:
    """Names of the shipped stacks."""
    return sorted(p.stem for p in data_dir("stacks").glob("*.yaml") if p.stem != ALLOCATORS)


@lru_cache(maxsize=64)
def load_stack_file(name: str) -> StackFile:
    path = data_dir("stacks") / f"{name}.yaml"
    where = f"stacks/{name}.yaml"
    spec = parse_spec(StackFile, load_mapping(path), where)
    if spec.name != name:
        raise InputError(where, "name", f"{spec.name!r} does not match the file name {name!r}")
    missing = [k for k in type(spec.releases[0].settings).model_fields
               if getattr(spec.releases[0].settings, k) is None]
    if missing:
        raise InputError(where, "releases[0].settings", "the first release must set every field; missing "
                         + ", ".join(missing))
    labels = [r.release for r in spec.releases]
    if len(set(labels)) != len(labels):
        raise InputError(where, "releases", "release labels repeat")
    keys = [_key(x) for x in labels]
    if all(k is not None for k in keys) and keys != sorted(keys):  # type: ignore[type-var]
        raise InputError(where, "releases", "releases must be listed oldest first")
    return spec


def _key(label: str) -> tuple[int, ...] | None:
    return tuple(int(p) for p in label.split(".")) if _VERSION.match(label) else None


@dataclass(frozen=True)
class Stack:
    """One resolved release of a framework: every setting's value and source."""

    name: str
    release: str
    title: str
    values: dict[str, Any] = field(compare=False)
    sources: dict[str, str] = field(compare=False)
    release_source: str = field(compare=False, default="")
    note: str | None = field(compare=False, default=None)
    recipes: tuple[Recipe, ...] = field(compare=False, default=())
    requested: str | None = field(compare=False, default=None)  # the release asked for, when not described
    #: the framework's own release name the job gave (``core_v0.16.1``), which the month above rounds
    release_name: str | None = field(compare=False, default=None)
    #: the Megatron-LM release this one runs, and its source (`stacks.schema.MegatronPin`)
    megatron_lm: tuple[str, str] | None = field(compare=False, default=None)
    #: layouts a model recipe names per (PP, VP) (`stacks.schema.ModelPipelineLayout`)
    pipeline_layouts: tuple[ModelPipelineLayout, ...] = field(compare=False, default=())

    @property
    def label(self) -> str:
        return f"{self.name}@{self.release}"

    @property
    def asked(self) -> str:
        """The stack as the job named it (``megatron-lm@core_v0.16.1``, ``megatron-lm@2026.03``), which
        resolves to this same stack; `label` is the release described, which would lose the asked one."""
        return f"{self.name}@{self.release_name or self.requested or self.release}"

    @property
    def kernel_profile(self) -> str | None:
        """The profile section (`stacks.<name>`) for this stack's kernels; None: Megatron-Core + TE."""
        kernels = str(self.values["kernels"])
        return None if kernels == "megatron-core-te" else kernels

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "release": self.release, "title": self.title,
                               "release_source": self.release_source,
                               "settings": {k: {"value": v, "source": self.sources[k]} for k, v in self.values.items()},
                               "recipes": [r.model_dump(exclude_none=True) for r in self.recipes],
                               "pipeline_layouts": [r.model_dump(exclude_none=True) for r in self.pipeline_layouts]}
        if self.note:
            out["note"] = self.note
        return out

    def before(self, label: str) -> bool:
        """Whether the release asked for is older than `label` (False where either is not a version)."""
        mine, other = _key(self.requested or self.release), _key(label)
        return mine is not None and other is not None and mine < other

    def recipe_for(self, model: str, gpu: str, precision: str,
                   layout: Mapping[str, int | None] | None = None) -> Recipe | None:
        """The framework's recipe for this model, GPU and precision, if it ships one for this release (the
        release asked for: presets change in releases whose stack-wide settings do not).

        `layout` is what the run or job states (`LAYOUT_AXES`, and `gpus`, `gbs`; None or a missing key:
        not stated). A recipe with a `layout` holds only for a run that splits the model as it does
        (`PARTITION_AXES`: TP, PP, CP, where both state them); published runs scale a preset (more GPUs,
        another EP or batch) without becoming another one. Of several that hold (a preset's variants), the
        run gets the one whose other axes it contradicts least, then the one at its global batch per GPU,
        then the first listed (the framework's default variant)."""
        mine = _key(self.requested or self.release)
        found: list[Recipe] = []
        for r in self.recipes:
            if (r.model, r.gpu, r.precision) != (model, gpu, precision):
                continue
            since = _key(r.since) if r.since else None
            if since is not None and mine is not None and mine < since:
                continue
            until = _key(r.until) if r.until else None
            if until is not None and mine is not None and mine > until:
                continue
            found.append(r)
        if layout is None:
            return found[0] if found else None
        stated = layout
        holding = [r for r in found if _contradicted(r.layout, stated, PARTITION_AXES) == 0]
        return min(holding, key=lambda r: (_contradicted(r.layout, stated, LAYOUT_AXES),
                                           not _same_batch(r.layout, stated), holding.index(r)), default=None)


    def pipeline_layout_for(self, model: str, pp: int, vp: int) -> ModelPipelineLayout | None:
        """The layout the framework's recipe for `model` names at PP x VP in the release asked for, if any."""
        mine = _key(self.requested or self.release)
        for r in self.pipeline_layouts:
            if (r.model, r.pp, r.vp) != (model, pp, vp):
                continue
            since = _key(r.since) if r.since else None
            until = _key(r.until) if r.until else None
            if (since is not None and mine is not None and mine < since) or (
                    until is not None and mine is not None and mine > until):
                continue
            return r
        return None


def _contradicted(preset: RecipeLayout | None, stated: Mapping[str, int | None], axes: tuple[str, ...]) -> int:
    """How many of `axes` the run states otherwise than the preset (an axis either leaves open agrees)."""
    if preset is None:
        return 0
    return sum(1 for axis in axes if stated.get(axis) is not None and getattr(preset, axis) is not None
               and stated[axis] != getattr(preset, axis))


def _same_batch(preset: RecipeLayout | None, stated: Mapping[str, int | None]) -> bool:
    """Whether the run's global batch per GPU is the preset's (both stated)."""
    gpus, gbs = stated.get("gpus"), stated.get("gbs")
    return preset is not None and gpus is not None and gbs is not None and gbs * preset.gpus == preset.gbs * gpus


@lru_cache(maxsize=256)
def resolve_stack(ref: str | None, where: str = "stack", field_name: str | None = "stack") -> Stack:
    """The stack `NAME[@RELEASE]` names (None: the default stack, newest release)."""
    if ref is not None and not ref.strip():
        raise InputError(where, field_name, "is empty: give NAME or NAME@RELEASE (primus stacks list)")
    text = (ref or DEFAULT_STACK).strip()
    m = _REF.match(text)
    if not m:
        raise InputError(where, field_name, f"{text!r} is not NAME or NAME@RELEASE")
    name, release = m.group(1), m.group(2)
    names = catalog_stacks()
    if name not in names:
        same = [n for n in names if n.lower() == name.lower()]  # names are lowercase: say which one
        hint = f" (did you mean {same[0]!r}? stack names are lowercase)" if same else did_you_mean(name, names)
        raise InputError(where, field_name, f"unknown stack {name!r}{hint}; known: {', '.join(names)}")
    spec = load_stack_file(name)
    labels = [r.release for r in spec.releases]
    note: str | None = None
    named = _release_name(spec, release) if release is not None and release not in labels else None
    own_name = release if named is not None else None
    if named is not None:
        release, note = named
    if release is None:
        chosen = len(labels) - 1
    elif release in labels:
        chosen = labels.index(release)
    else:
        _check_month(name, release, labels, where, field_name)
        _check_container(name, release, labels, where, field_name)
        want = _key(release)
        keys = [_key(x) for x in labels]
        if want is None or any(k is None for k in keys):
            raise InputError(where, field_name, f"release {release!r} of {name} is not described and cannot be "
                             f"ordered against its releases ({', '.join(labels)})")
        before = [i for i, k in enumerate(keys) if k is not None and k <= want]
        if before:
            chosen = before[-1]
            resolved = (f"{name}@{release} is not described; using {name}@{labels[chosen]}, the newest release "
                        "not after it")
            caveat = spec.releases[chosen].caveat
            if caveat and want != keys[chosen]:
                resolved += f" ({caveat})"
        else:
            chosen = 0
            resolved = (f"{name}@{release} is older than every described release; using the oldest, "
                        f"{name}@{labels[0]}")
        note = f"{note}; {resolved}" if note else resolved
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for rel in spec.releases[:chosen + 1]:
        for key, setting in rel.settings.given().items():
            values[key] = setting.value
            sources[key] = setting.source
    rel = spec.releases[chosen]
    pins = [r.megatron_lm for r in spec.releases[:chosen + 1] if r.megatron_lm is not None]
    pin = (pins[-1].release, pins[-1].source) if pins else None
    return Stack(name, rel.release, spec.title, values, sources, rel.source, note, tuple(spec.recipes),
                 release if note else None, own_name, pin, tuple(spec.pipeline_layouts))


def _release_name(spec: StackFile, release: str) -> tuple[str, str] | None:
    """A framework's own release name (`StackFile.release_names`; ``core_r0.14`` is ``core_r0.14.0``) as
    the month of its day, with a note saying so; None when the stack does not know the name."""
    by_lower = {k.lower(): k for k in spec.release_names}  # Megatron-LM's tags are lowercase; CORE_V0.8.0 is one
    for candidate in (release, f"{release}.0"):
        candidate = by_lower.get(candidate.lower(), candidate)
        known = spec.release_names.get(candidate)
        if known is not None:
            month = known.date[:7].replace("-", ".")
            return month, f"{spec.name}@{release} is {candidate} of {known.date} ({known.source}): read as {month}"
    return None


def _is_month(label: str) -> bool:
    m = _MONTH.match(label)
    return m is not None and 1 <= int(m.group(1)) <= 12


def _check_month(name: str, release: str, labels: list[str], where: str, field_name: str | None) -> None:
    """A stack labelled by months (every described release YYYY.MM, e.g. torchtitan) takes only a
    real month: `2024.13` or `2024` would otherwise order silently against its releases."""
    if not all(_is_month(x) for x in labels) or _is_month(release):
        return
    m = _MONTH.match(release)
    why = f"month {m.group(1)} is not 01 to 12" if m else "it is not YYYY.MM"
    own = load_stack_file(name).release_names
    by_day = sorted(own, key=lambda k: (own[k].date, k))
    near = [k for k in own if _same_series(release, k)]  # a suggestion only within the release's own series
    also = (f"; or one of its own {len(own)} release names{did_you_mean(release, near) if near else ''}, "
            f"{by_day[0]} to {by_day[-1]}" if own else "")
    raise InputError(where, field_name, f"release {release!r} of {name}: {why} (its releases are months: "
                     f"{', '.join(labels)}{also})")


def _same_series(release: str, name: str) -> bool:
    """Whether a release name is in the same major.minor series as what was typed (core_v0.8 and
    core_r0.8.0): a did-you-mean across series (core_v0.3.0 -> core_v0.13.0) would name a release years off."""
    typed = re.findall(r"\d+", release)[:2]
    return bool(typed) and re.findall(r"\d+", name)[:2] == typed


def _check_container(name: str, release: str, labels: list[str], where: str, field_name: str | None) -> None:
    """A stack whose releases are container versions (YY.MM[.PATCH]: NeMo, Megatron-Bridge) takes only
    one: `2024.01` would order after `25.04` and `25.13` would read as a month."""
    if not all(_CONTAINER.match(x) for x in labels):
        return
    m = _CONTAINER.match(release)
    if m is not None and 1 <= int(m.group(1)) <= 12:
        return
    why = f"month {m.group(1)} is not 01 to 12" if m else "it is not YY.MM (a container version)"
    raise InputError(where, field_name, f"release {release!r} of {name}: {why} (its releases: {', '.join(labels)})")


def stack_of_source(source: str, published: str | None = None, flags: frozenset[str] = frozenset()) -> Stack:
    """The stack a published run's `source` ran on: the stack whose `validate_flags` names one of the
    row's flags (a collection's recipe on another framework, e.g. DGX Cloud's MaxText recipe, flag
    `maxtext_jax`), else the stack whose `validate_sources` names the source's prefix; the release is
    the one the stack file pins for that flag or prefix, else the version at the end of the source name
    (`megatron-bridge-26.04.01`), else the month it was published, else the newest. A source no stack
    names gets the default stack."""
    s = source.lower()
    for name in catalog_stacks():
        spec = load_stack_file(name)
        for flag, pinned in spec.validate_flags.items():
            if flag in flags:
                return _lenient(name, pinned or _release_in(s, published))
    for name in catalog_stacks():
        spec = load_stack_file(name)
        for prefix, pinned in spec.validate_sources.items():
            if s == prefix or s.startswith(prefix):
                release = pinned or _release_in(s, published)
                return _lenient(name, release)
    return resolve_stack(DEFAULT_STACK)


def _release_in(source: str, published: str | None) -> str | None:
    m = re.search(r"-(\d+(?:\.\d+)+)$", source)
    if m:
        return m.group(1)
    if published:
        return published.replace("-", ".")
    return None


def _lenient(name: str, release: str | None) -> Stack:
    """A source's release: described, or ordered against the described ones, else the newest."""
    try:
        return resolve_stack(f"{name}@{release}" if release else name)
    except InputError:
        if release and _MONTH.match(release):  # a publication month against container versions: 2025.04 is 25.04
            try:
                return resolve_stack(f"{name}@{release[2:]}")
            except InputError:
                pass
        return resolve_stack(name)
