"""Load and resolve a job file into the model, the cluster and the pins, with every default applied.

Defaults come from the job's stack (`stack:`, default megatron-lm, newest release; `--stack` on the
command line replaces it): what the framework does for every setting the file leaves out
(`primus.stacks`). The keys the stack supplied are kept on the job (`Job.assumed`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from primus.catalog.hardware import resolve_hardware
from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.framework_asserts import check_framework_asserts
from primus.schedule.layout import build_layout, parse_layout_string
from primus.specs.base import parse_spec
from primus.specs.hardware import ClusterSpec
from primus.specs.job import ACCOUNTING_OPTIONS, STAGE_SIZE_OPTIONS, JobSpec, PipelineOptions, split_conflict
from primus.specs.model import ModelSpec
from primus.stacks.apply import apply_stack, recipe_origin, search_split, stack_split
from primus.stacks.core import Stack, resolve_stack
from primus.yamlio import load_mapping


@dataclass(frozen=True)
class Job:
    """A validated job: the spec as written plus what its references resolve to."""

    spec: JobSpec
    model: ModelSpec
    cluster: ClusterSpec
    where: str
    base_dir: Path | None = field(default=None, compare=False)
    stack: Stack | None = field(default=None, compare=False)
    assumed: tuple[str, ...] = field(default=(), compare=False)
    #: the stack whose recipes split the layers (`pipeline_at`): the job's own when its file gives no
    #: `pipeline` section; kept when a launch file moves the job to its runner's stack, whose file then
    #: states the split (`primus.launch.target.on_target_stack`)
    split_stack: Stack | None = field(default=None, compare=False)

    @property
    def resolved_stack(self) -> Stack:
        """The job's stack (the default stack for a job built without one)."""
        return self.stack if self.stack is not None else resolve_stack(self.spec.stack, self.where)

    @property
    def layout_stack(self) -> Stack:
        """The stack whose recipes name the job's pipeline layouts: the one that split the layers when a
        launch file moved the job to its runner's stack, else the job's own."""
        return self.split_stack if self.split_stack is not None else self.resolved_stack

    def assumptions(self) -> list[str]:
        """The job's assumption list: its stack and release, then every setting the stack supplied."""
        stack = self.resolved_stack
        out = [f"stack {stack.label}" + (f" ({stack.note})" if stack.note else "")]
        out += [f"{key} from {stack.label}" for key in self.assumed]
        return out

    def pipeline_at(self, pp: int, vp: int) -> PipelineOptions:
        """The pipeline split options at PP x VP, the one answer memory, projection, search and export
        read. The job's own when its file gives any (or when its stack gave them for its pinned PP on
        load); else, for a job that leaves the split to its stack, the layout the stack's recipe for the
        model names at that PP x VP (`primus.stacks.apply.search_split`): a search over PP then counts
        Megatron-Bridge's DeepSeek-V3 layouts as legal at the (PP, VP) its recipe names, as the recipe runs
        them, instead of the even split that 61 layers never give above PP 1."""
        split = self._torchtitan_split(pp, vp)
        if split is not None:
            return split
        if self.split_stack is None or self.spec.pipeline != _NO_SPLIT:
            return self.spec.pipeline
        return _stack_pipeline(self.split_stack, self.split_stack.requested, self.model, pp, vp)

    def torchtitan_split_weights(self) -> tuple[str, int, int] | None:
        """How torchtitan splits this job's layers (`primus.schedule.torchtitan_split`): the split and its
        first/last_stage_less_layers, for a job on a torchtitan release that describes its split and gives no
        layout or stage sizes of its own; None otherwise. A job file with a `pipeline` section states the
        weights (its embedding and loss accounting options, 1 each when set, 0 when not), which exist only in
        the weighted split (torchtitan #1416 made them settable); a release with the weighted split has its
        defaults (1 and 1) stated on load (`job_from_mapping`), so only the 2024 split is ever unstated. Export
        writes these weights back."""
        from primus.schedule.torchtitan_split import TORCHTITAN_SPLITS

        if self.spec.framework != "torchtitan":  # every job's pipeline_at asks: answer the rest at once
            return None
        kind = self.resolved_stack.values.get("pipeline_split")
        pipe = self.spec.pipeline
        sized = pipe.decoder_first_pipeline_num_layers is not None or pipe.decoder_last_pipeline_num_layers is not None
        if kind not in TORCHTITAN_SPLITS or pipe.layout is not None or sized:
            return None
        if self.split_stack is not None and pipe == _NO_SPLIT:  # no `pipeline` section on the 2024 split
            return kind, 0, 0
        return ("torchtitan_weighted", int(pipe.account_for_embedding_in_pipeline_split),
                int(pipe.account_for_loss_in_pipeline_split))

    def _torchtitan_split(self, pp: int, vp: int) -> PipelineOptions | None:
        """torchtitan's own split at PP x VP as a layout (`torchtitan_split_weights`); None where it does not
        apply or torchtitan refuses the split (the rule `pipeline-split` then refuses it as Megatron's)."""
        from primus.schedule.torchtitan_split import torchtitan_layout

        how = self.torchtitan_split_weights()
        if pp == 1 or how is None:
            return None
        kind, first, last = how
        text = torchtitan_layout(kind, self.model.num_layers, pp, vp, first, last, self.model.mtp_num_layers)
        return PipelineOptions(layout=text) if text is not None else None

    def as_mapping(self) -> dict[str, Any]:
        """The job as a job file's mapping (JSON types, nothing unset), without a `pipeline` section when
        the stack splits the layers: reloaded, it is the same job (`split_stack` is set again)."""
        data = self.spec.model_dump(mode="json", exclude_none=True)
        if self.split_stack is not None and self.spec.pipeline in (_NO_SPLIT, TORCHTITAN_DEFAULT_SPLIT):
            # nor torchtitan's default weights stated on load: reloaded on torchtitan they are stated again,
            # and moved to another framework's stack (an export to Megatron) they are not its accounting
            data.pop("pipeline", None)
        return data

    @property
    def num_gpus(self) -> int:
        if self.spec.gpus is not None:
            return self.spec.gpus
        assert self.spec.nodes is not None
        return self.spec.nodes * self.cluster.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.cluster.gpus_per_node)

    @property
    def expandable_segments(self) -> bool:
        """Whether PyTorch's allocator runs with expandable segments: the job's `allocator` setting,
        else its stack's."""
        own = self.spec.allocator.expandable_segments
        return bool(self.resolved_stack["allocator_expandable_segments"]) if own is None else own

    def with_spec(self, **updates: Any) -> Job:
        """A copy with top-level job fields replaced (re-validated)."""
        data = self.spec.model_dump()
        data.update(updates)
        spec = parse_spec(JobSpec, data, self.where)
        return Job(spec, self.model, self.cluster, self.where, self.base_dir, self.stack, self.assumed,
                   self.split_stack)


_NO_SPLIT = PipelineOptions()
#: torchtitan's first/last_stage_less_layers defaults (1 and 1), stated on load for a torchtitan job without its own
TORCHTITAN_DEFAULT_SPLIT = PipelineOptions(account_for_embedding_in_pipeline_split=True,
                                      account_for_loss_in_pipeline_split=True)


@lru_cache(maxsize=4096)
def _stack_pipeline(stack: Stack, requested: str | None, model: ModelSpec, pp: int, vp: int) -> PipelineOptions:
    """`search_split` as options, cached; `requested` is in the key because a release the stack does not
    describe resolves to an earlier one (equal as a Stack) yet takes the recipe layouts of its own date."""
    return PipelineOptions(**search_split(stack, model, pp, vp))


def job_from_mapping(data: Mapping[str, Any], where: str, base_dir: Path | None = None,
                     stack: str | None = None) -> Job:
    """A job from its mapping; `stack` (NAME[@RELEASE], from `--stack`) replaces the mapping's `stack:`
    key, and an error in it names the option, not the file's field."""
    if stack is not None:
        resolve_stack(stack, "--stack", None)
        data = {**data, "stack": stack}
    written = parse_spec(JobSpec, data, where)  # the file as written: its own errors first
    resolved = resolve_stack(written.stack, where, "stack")
    model = resolve_model(written.model, where, "model", base_dir)
    cluster = resolve_hardware(written.hardware, where, "hardware", base_dir)
    merged, assumed = apply_stack(resolved, data, scaleup_domain=cluster.scaleup.domain_size)
    pins = written.parallel
    if "pipeline" not in data and merged.get("framework") == "torchtitan" \
            and resolved.values.get("pipeline_split") == "torchtitan_weighted":
        # torchtitan's first/last_stage_less_layers default to 1 (pipeline_parallel.py): stated so, one job
        # whether its file states them or not
        merged["pipeline"] = TORCHTITAN_DEFAULT_SPLIT.model_dump(exclude_defaults=True)
        assumed.append("pipeline (torchtitan's first/last_stage_less_layers, 1 and 1)")
    elif "pipeline" not in data and pins.pp is not None:
        # VP free: only the accounting switches (they hold for any VP); an explicit layout fixes VP
        split, named = stack_split(resolved, model, pins.pp, pins.vp or 1)
        if split and (pins.vp is not None or "layout" not in split):
            merged["pipeline"] = split
            assumed.append("pipeline (" + ", ".join(f"{k}={v}" for k, v in split.items())
                           + (f"; {recipe_origin(named)}" if named else "") + ")")
    spec = parse_spec(JobSpec, merged, where)
    _check_pipeline_options(spec, model, where)
    check_framework_asserts(spec, model, resolved, where)
    if model.is_moe and spec.moe.grouped_gemm == "te_fused" and not (
            cluster.accelerator.vendor == "nvidia" and cluster.accelerator.compute_major == 10):
        raise InputError(where, "moe.grouped_gemm", f"te_fused needs compute capability 10.x (B200, GB200, B300, "
                         f"GB300: TE's CuTe-DSL grouped MLP kernels), not {cluster.name}; use grouped_gemm te")
    job = Job(spec, model, cluster, where, base_dir, resolved, tuple(assumed),
              resolved if "pipeline" not in data else None)
    if spec.gpus is not None and spec.gpus % cluster.gpus_per_node and spec.gpus > cluster.gpus_per_node:
        raise InputError(where, "gpus",
                         f"{spec.gpus} GPUs is not a whole number of {cluster.gpus_per_node}-GPU nodes")
    return job


def _check_pipeline_options(spec: JobSpec, model: ModelSpec, where: str) -> None:
    """A `pipeline.layout` whose layers do not match the model, or first/last stages holding more layers
    than it has, is bad input whatever PP the search would try. Checked once at load (a layout string
    against its own number of stages), so that `fit` and `enumerate` refuse it as `memory` does instead
    of reading it as "no PP splits this way"; which PP x VP a valid one allows is the rule
    `pipeline-split`'s to say."""
    pipe = spec.pipeline
    _check_one_split_mechanism(pipe, where)
    taken = (pipe.decoder_first_pipeline_num_layers or 0) + (pipe.decoder_last_pipeline_num_layers or 0)
    if taken > model.num_layers:
        field = ("pipeline.decoder_first_pipeline_num_layers" if pipe.decoder_first_pipeline_num_layers
                 else "pipeline.decoder_last_pipeline_num_layers")
        raise InputError(where, field, f"the first and last stages would take {taken} decoder layers but the model "
                         f"has {model.num_layers}")
    text = pipe.layout
    if text is None:
        return
    try:
        stages = len(parse_layout_string(text, where))
        build_layout(model.num_layers, stages, 1, mtp_num_layers=model.mtp_num_layers, layout=text, where=where)
    except InputError as exc:  # named as the job file spells it, not as Megatron's argument
        raise InputError(where, "pipeline.layout", exc.reason) from None


def _check_one_split_mechanism(pipe: PipelineOptions, where: str) -> None:
    """At most one way to split the layers over the stages, as Megatron-Core refuses the others on
    construction (`primus.specs.job.split_conflict`): bad input naming the field that brings the second
    mechanism (the layout when it is given), not a pipeline split that no PP satisfies."""
    given = [f for f in ("layout", *STAGE_SIZE_OPTIONS) if getattr(pipe, f) is not None]
    conflict = split_conflict(given + [f for f in ACCOUNTING_OPTIONS if getattr(pipe, f)])
    if conflict is None:
        return
    field, other = conflict
    why = ("refuses a layout beside any other pipeline split option" if field == "layout" else
           "refuses first/last stage sizes beside the embedding/loss accounting")
    raise InputError(where, f"pipeline.{field}",
                     f"cannot be given with pipeline.{other} (Megatron-Core's TransformerConfig {why}): "
                     "give one of them")


def load_job(path: str | Path, stack: str | None = None) -> Job:
    """A job file; `stack` (from --stack) replaces its `stack:` key."""
    p = Path(path)
    data = load_mapping(p)
    return job_from_mapping(data, str(p), p.parent, stack)
