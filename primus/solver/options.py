"""Fixes that keep the user's layout: job options that make the pinned axes legal.

When a pinned layout breaks a structural rule that a job option satisfies (61 DeepSeek-V3 layers over
PP8 × VP4 chunks: `pipeline-split`), the first suggestion should be that option, not a different
layout. Candidates, each a mapping of option paths to new values (Megatron-Core's pipeline options):

- counting the embedding and/or the loss as a layer in the split
  (`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`);
- first and last stage layer counts (`decoder_first_pipeline_num_layers`,
  `decoder_last_pipeline_num_layers`), the most balanced pair Megatron accepts;
- an explicit layout string (`pipeline_model_parallel_layout`): the most even split of the decoder
  layers over the PP × VP chunks, the embedding on the first chunk, MTP and the loss on the last.

Each candidate is checked by building Megatron's split for the pinned (PP, VP); the solver then
answers the same question (same rules, same pins) for the job with the option set.

When the pinned layout is over memory with recompute none or selective, partial full recompute keeps
every parallel axis: Megatron's `--recompute-granularity full --recompute-method block
--recompute-num-layers N` re-runs the first N decoder layers of each virtual stage from their inputs
and keeps the rest (`primus.memory.recompute`). The fix names the fewest N that fits.
"""

from __future__ import annotations

from typing import Any

from primus.errors import InputError
from primus.job import Job
from primus.memory.shapes import layout_for
from primus.specs.job import PIPELINE_FIELDS, PipelineOptions
from primus.stacks.apply import model_pipeline_layout

#: The pipeline options no option set: Megatron's default split, and all that survives at PP 1.
ONE_STAGE = PipelineOptions()
_DEFAULTS = ONE_STAGE.model_dump()


def _splits(job: Job, options: PipelineOptions, pp: int, vps: list[int]) -> bool:
    try:
        for vp in vps:
            layout_for(job.model, options, pp, vp)
    except InputError:
        return False
    return True


def _run_length(chunks: list[str]) -> str:
    """Chunk strings joined by '|', runs of equal chunks written '(c|)*n' (Megatron's layout grammar)."""
    out: list[str] = []
    i = 0
    while i < len(chunks):
        j = i
        while j + 1 < len(chunks) and chunks[j + 1] == chunks[i]:
            j += 1
        run = j - i + 1
        last = j == len(chunks) - 1
        if run > 2 and not last:
            out.append(f"({chunks[i]}|)*{run}")
        else:
            out.append("|".join(chunks[i:j + 1]) + ("" if last else "|"))
        i = j + 1
    return "".join(out)


def layout_string(num_layers: int, pp: int, vp: int, mtp: int) -> str:
    """The most even split of `num_layers` over PP × VP chunks, lighter chunks at the two ends (the
    first also builds the embedding, the last the MTP block and the loss)."""
    chunks = pp * vp
    base, extra = divmod(num_layers, chunks)
    counts = [base] * chunks
    middle = list(range(1, chunks - 1)) or list(range(chunks))
    for k in range(min(extra, len(middle))):  # the extra layers go to the middle chunks first
        counts[middle[k]] += 1
    for k in range(extra - min(extra, len(middle))):  # more than the middle holds: the ends take the rest
        counts[0 if k % 2 == 0 else chunks - 1] += 1
    parts = [("t" * c) if c <= 2 else f"t*{c}" for c in counts]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * mtp + "L"
    return _run_length([p if p else "" for p in parts])


def pipeline_difference(job: Job, options: PipelineOptions) -> dict[str, Any]:
    """Exactly what setting the pipeline options to `options` changes in the job: every field whose value
    differs, by path, with its new value, None where the fix removes the job's own setting (back to the
    default: first-stage sizes go when the fix is a last-stage size, the accounting goes under a layout
    string, as Megatron takes one split mechanism), which `primus.solver.suggest.option_text` spells
    `unset`. A field the fix leaves as the job has it is not named."""
    mine = job.spec.pipeline
    return {f"pipeline.{k}": None if getattr(options, k) == _DEFAULTS[k] else getattr(options, k)
            for k in PIPELINE_FIELDS if getattr(options, k) != getattr(mine, k)}


def unset_at_pp(job: Job, pp: int) -> dict[str, Any]:
    """The pipeline options a layout at PP `pp` drops from the job (`pipeline_difference`: path -> None),
    the one place that decides which survive at PP 1: none does. One stage builds the embedding, every
    layer and the loss, so a layout at PP 1 is the job with every pipeline option it set unset, named so
    and sized and projected so (`primus.solver.fit`), and exported without them
    (`primus.launch.megatron_export`). Above PP 1 the job's options are what split the layers: all survive.

    NVIDIA/Megatron-LM d98e8a6 refuses first/last stage sizes and a layout of more than one stage at PP 1
    (`_pipeline_options`) and builds the same one stage with or without the rest: with the embedding and
    loss accounting (k of them set), transformer_config.py lines 2370-2385 and training/arguments.py
    lines 988-998 check N + k layers over PP 1 (always whole), transformer_block.py lines 147-159 and
    191-201 build those N + k less the k slots, N layers, and transformer_layer.py lines 74 and 217-218
    give the one stage offset 0; a one-stage layout string places what the default does."""
    return pipeline_difference(job, ONE_STAGE) if pp == 1 else {}


def pipeline_candidates(job: Job, pp: int, vps: list[int]) -> list[dict[str, Any]]:
    """Pipeline option changes (`pipeline_difference`: option path -> new value) under which Megatron splits
    the layers over the pinned PP and every VP in `vps`, least intrusive first. At PP 1 the one candidate
    is every pipeline option unset (`_pipeline_options`); a split the job already has is no fix and is not
    offered."""
    return [changes for opts in _pipeline_options(job, pp, vps) if (changes := pipeline_difference(job, opts))]


def _pipeline_options(job: Job, pp: int, vps: list[int]) -> list[PipelineOptions]:
    """Whole pipeline option sets (one split mechanism each) that split the layers at PP x each VP.

    At PP 1 one stage builds the embedding, every layer and the loss, and no pipeline option means
    anything there, so the only set offered is none at all (Megatron's default split). NVIDIA/Megatron-LM
    d98e8a6 refuses first/last stage sizes at PP 1 (transformer_config.py lines 2341-2345: layers left
    with no middle stage), reads a layout string of n stages as VP n and asserts PP > 1 under VP
    (training/arguments.py lines 941-950 and 1000-1009), and ignores the embedding and loss accounting
    (transformer_block.py lines 148-198: N + 2 units on one stage less the embedding's and the loss's
    slots is N). An option the job set is named
    unset, never carried to a layout where it does nothing; where the job's own options split one stage
    (the accounting), every split of it is the same stage and none is offered."""
    blank = ONE_STAGE
    if pp == 1:  # nothing survives at PP 1 (`unset_at_pp`)
        own = _splits(job, job.spec.pipeline, pp, vps)
        return [blank] if not own and _splits(job, blank, pp, vps) else []
    model = job.model
    out: list[PipelineOptions] = []
    for vp in vps[:1]:  # the layout the stack's recipe for this model names at this PP x VP, first
        named = model_pipeline_layout(job.resolved_stack, model, pp, vp)
        if named is not None:
            out.append(blank.model_copy(update={"layout": named.layout}))
    for emb, loss in ((True, True), (True, False), (False, True)):
        opts = blank.model_copy(update={"account_for_embedding_in_pipeline_split": emb,
                                        "account_for_loss_in_pipeline_split": loss})
        if _splits(job, opts, pp, vps):
            out.append(opts)
    even = model.num_layers / pp
    pairs = []
    for first in range(0, model.num_layers + 1):
        for last in range(0, model.num_layers + 1 - first):
            if first == last == 0:
                continue
            opts = blank.model_copy(update={"decoder_first_pipeline_num_layers": first or None,
                                            "decoder_last_pipeline_num_layers": last or None})
            if abs(first - even) + abs(last - even) > 2 * even:
                continue
            if _splits(job, opts, pp, vps):
                pairs.append((max(abs(first - even) if first else 0, abs(last - even) if last else 0), first, last))
    if pairs:
        _, first, last = min(pairs)
        out.append(blank.model_copy(update={"decoder_first_pipeline_num_layers": first or None,
                                            "decoder_last_pipeline_num_layers": last or None}))
    for vp in vps[:1]:
        text = layout_string(model.num_layers, pp, vp, model.mtp_num_layers)
        opts = blank.model_copy(update={"layout": text})
        if _splits(job, opts, pp, [vp]) and opts not in out:
            out.append(opts)
    return out


def apply_options(job: Job, options: dict[str, Any]) -> Job:
    """The job with option paths set, each to its value and nothing else (`pipeline.X`: one pipeline
    option, a fix names every one it changes, `pipeline_difference`, None for one it unsets; `parallel.X`:
    one pin; `allocator.X`: one allocator setting)."""
    if not options:
        return job
    spec = job.spec.model_dump()
    sections = {"pipeline", "parallel"}
    for path, value in options.items():
        section, _, name = path.partition(".")
        spec[section][name] = _DEFAULTS[name] if section == "pipeline" and value is None else value
        sections.add(section)
    return job.with_spec(**{section: spec[section] for section in sorted(sections)})


#: Pinned recompute settings a partial full recompute can relieve (full recompute already re-runs
#: every layer under the uniform method, the least memory there is).
PARTIAL_RECOMPUTE_FROM = ("none", "selective")


def partial_recompute(n: int) -> dict[str, Any]:
    """The option paths for full recompute of the first `n` layers of each virtual stage (block method)."""
    return {"parallel.recompute": "full", "parallel.recompute_method": "block", "parallel.recompute_num_layers": n}


def recompute_search_job(job: Job) -> Job:
    """The job with full recompute by the block method and `recompute_num_layers` searched (every count
    up to the widest virtual stage, `Space.recompute_layer_values_at`), so one enumeration answers for every N."""
    parallel = {**job.spec.parallel.model_dump(), "recompute": "full", "recompute_method": "block",
                "recompute_num_layers": None}
    return job.with_spec(parallel=parallel, free=sorted({*job.spec.free, "recompute_num_layers"}))


#: The allocator option fix: PyTorch's expandable segments, which PyTorch documents for CUDA
#: (PYTORCH_CUDA_ALLOC_CONF); offered on NVIDIA devices only, where the reserve figure was measured.
EXPANDABLE_SEGMENTS = {"allocator.expandable_segments": True}
ALLOCATOR_FIX_VENDORS = ("nvidia",)
