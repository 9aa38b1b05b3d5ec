"""How torchtitan splits a model's layers over its pipeline stages when the job names no split points.

torchtitan builds `pp x stages_per_rank` stages (2 per rank under a multi-stage schedule such as
Interleaved1F1B, stage s on rank s % pp, the order of Megatron's layout string) and needs no divisibility:

- `layers` (pytorch/torchtitan 9dec370, 2024-12-26, torchtitan/parallelisms/pipelining_utils.py
  `generate_split_points`, in force until #1072/#1103 in April 2025): the decoder layers alone; every stage
  gets L // S, the middle stages (not the first) one more while L % S lasts, the last stage the rest;
- `weighted` (#1103, f64cf3c18, 2025-04-15; at b5bcd76 torchtitan/distributed/pipeline_parallel.py
  `_generate_llm_fqn_per_model_part` lines 357-468): the embedding and the output count as
  `pipeline_parallel_first_stage_less_layers` and `..._last_stage_less_layers` layers (default 1 each,
  configurable since #1416, 2025-07-30) in L + first + last "effective" layers; every stage gets
  (L + first + last) // S of them, the first ones one more while the remainder lasts, and the first stage
  holds that many less `first` layers, the last stage less `last`. It refuses more stages than effective
  layers, and a weight above the per-stage share.
"""

from __future__ import annotations

from typing import Literal

TorchtitanSplit = Literal["torchtitan_layers", "torchtitan_weighted"]
TORCHTITAN_SPLITS: tuple[str, ...] = ("torchtitan_layers", "torchtitan_weighted")


def torchtitan_counts(kind: str, num_layers: int, stages: int, first: int = 1, last: int = 1) -> list[int] | None:
    """Decoder layers per stage, in stage order; None where torchtitan refuses the split."""
    if stages < 1:
        return None
    if kind == "torchtitan_layers":
        if stages > num_layers:
            return None  # "Total stages cannot be greater than the number of layers"
        base, extra = divmod(num_layers, stages)
        counts = []
        for i in range(stages - 1):
            grow = i > 0 and extra > 0
            extra -= grow
            counts.append(base + grow)
        return [*counts, num_layers - sum(counts)]
    effective = num_layers + first + last
    if stages > effective:
        return None
    base, extra = divmod(effective, stages)
    if base == 0 or first > base or last > base:
        return None
    shares = [base + (s < extra) for s in range(stages)]
    if stages == 1:
        return [num_layers]
    return [shares[0] - first, *shares[1:-1], shares[-1] - last]


def torchtitan_layout(kind: str, num_layers: int, pp: int, vp: int, first: int = 1, last: int = 1,
                      mtp_layers: int = 0) -> str | None:
    """The split as a layout string (`pipeline.layout`: the embedding on the first stage, the output layer
    and the loss, after any multi-token prediction layers, on the last); None where torchtitan refuses it."""
    counts = torchtitan_counts(kind, num_layers, pp * vp, first, last)
    if counts is None:
        return None
    parts = []
    for s, n in enumerate(counts):
        text = ("E" if s == 0 else "") + ("" if n == 0 else "t" if n == 1 else f"t*{n}")
        if s == len(counts) - 1:
            text += "m" * mtp_layers + "L"
        parts.append(text)
    return "|".join(parts)


def layers_per_stage(effective_layers: int, stages: int) -> int | None:
    """The `pipeline_parallel_layers_per_stage` that makes torchtitan build `stages` stages of these effective
    layers (it builds ceil(effective / layers_per_stage): b5bcd76 distributed/pipeline_parallel.py
    `_get_pipeline_metadata`), None when no value does."""
    per_stage = -(-effective_layers // stages)
    return per_stage if -(-effective_layers // per_stage) == stages else None
