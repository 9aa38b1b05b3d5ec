"""The reference a tuned layout is compared with: the user's pinned config, or a published recipe for
that model and hardware. With neither there is no reference (origin `none`): the legal completion of
the job's pins with the most headroom then seeds the search, but nothing is compared with it, since a
ratio against an arbitrary layout (244x for gpt-oss-120b) says nothing.

A job whose pins are exactly a published recipe's layout is that recipe: the reference names its source,
and carries what a publication claims a tuned layout gains over it (`claim`), so a report can put the
claim beside the gain primus projects."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from primus.errors import InputError
from primus.job import Job
from primus.memory.evaluate import pinned_layout
from primus.parallel import Layout, normalise
from primus.paths import data_dir
from primus.projection.complete import speed_of
from primus.projection.profile import Profile
from primus.solver.api import Question
from primus.solver.fit import FitResult, fit
from primus.yamlio import load_mapping


@dataclass(frozen=True)
class Reference:
    layout: Layout | None
    origin: str  # "job", "job = recipe: <source>", "recipe: <source>", or NO_REFERENCE
    fit: FitResult
    claim: dict[str, Any] | None = None  # {"gain_pct": ..., "source": ...} of a published recipe
    #: the pins `fit` was asked about (the job's, or the recipe's layout): recorded, so that `primus audit
    #: verify` recomputes the fit (its nearest legal fix) from the run directory alone, without the catalog
    pins: dict[str, Any] = field(default_factory=dict)

    @property
    def compared(self) -> bool:
        """Whether the best is compared with this layout (False: it only seeds the search)."""
        return self.origin != NO_REFERENCE


NO_REFERENCE = "none"
NO_REFERENCE_NOTE = ("the job pins no complete layout and no published recipe matches it, so there is nothing to "
                     "compare the best with and no speedup is claimed")


@lru_cache(maxsize=1)
def recipes() -> tuple[dict[str, Any], ...]:
    path = data_dir("models") / "recipes" / "published.yaml"
    if not path.exists():
        return ()
    data = load_mapping(path)
    return tuple(data.get("recipes", []))


def recipe_entry(job: Job) -> dict[str, Any] | None:
    """The published recipe for this model, hardware, GPU count and convergence settings, if any."""
    for r in recipes():
        if (r["model"] == job.model.name and r["hardware"] == job.cluster.name and r.get("gpus", job.num_gpus)
                == job.num_gpus and r["seq_len"] == job.spec.seq_len
                and r["global_batch_size"] == job.spec.global_batch_size
                and r.get("precision", "bf16") == job.spec.precision):
            return r
    return None


def find_reference(job: Job, question: Question | None = None, profile: Profile | None = None) -> Reference:
    """The reference of `job`, its pins asked of `fit` under the rules of `question` (the job without pins;
    the tuner's, with the run's rules) and ranked with `profile` (the run's): the same fit `primus audit
    verify` recomputes from the recorded pins, rules and profile (`reference_fit`). Defaults: the job's
    rules and its stack's profile."""
    try:
        layout: Layout | None = pinned_layout(job)
        origin = "job"
    except InputError:
        layout = None
        origin = NO_REFERENCE
    pins = dict(job.spec.parallel.pinned())
    entry = recipe_entry(job)
    claim = None
    if layout is None and entry is not None:
        pins = dict(entry["parallel"])
        origin = f"recipe: {entry['source']}"
        claim = entry.get("claim")
    elif layout is not None and entry is not None and pins == dict(entry["parallel"]):
        origin = f"job = recipe: {entry['source']}"
        claim = entry.get("claim")
    result = reference_fit(question or Question(job, pins={}), pins, profile)
    if layout is None and result.layout is not None and (result.fits or origin.startswith("recipe")):
        layout = normalise(result.layout, is_moe=job.model.is_moe)
    return Reference(layout, origin, result, claim, pins)


def reference_fit(question: Question, pins: dict[str, Any], profile: Profile | None = None) -> FitResult:
    """`fit` of the reference's pins under the rules of `question` (its job without pins), its completions
    ranked by projected throughput under `profile`: `tune` and `audit verify` both call this."""
    return fit(question.with_pins(pins), speed=speed_of(question.job, profile))
