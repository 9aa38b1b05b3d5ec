"""The allocator reserve: what PyTorch's caching allocator holds beyond the ledger's bytes, as a
property of the stack's allocator configuration (`stacks/allocators.yaml`, derivation in
docs/memory.md). A device without a caching allocator (hardware `allocator_fragmentation` 0, the CPU)
keeps 0: the reserve used is the smaller of the hardware's ceiling and the allocator's figure."""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

from pydantic import Field

from primus.paths import data_dir
from primus.specs.base import Fraction, Spec, parse_spec
from primus.yamlio import load_mapping

AllocatorName = Literal["default", "expandable_segments"]


class AllocatorSpec(Spec):
    reserve_fraction: Fraction
    source: Annotated[str, Field(min_length=20, max_length=4000)]


class AllocatorsFile(Spec):
    default: AllocatorSpec
    expandable_segments: AllocatorSpec


@lru_cache(maxsize=1)
def allocators() -> AllocatorsFile:
    return parse_spec(AllocatorsFile, load_mapping(data_dir("stacks") / "allocators.yaml"), "stacks/allocators.yaml")


def allocator_of(expandable_segments: bool) -> tuple[AllocatorName, AllocatorSpec]:
    """The allocator configuration a stack's `allocator_expandable_segments` setting selects."""
    files = allocators()
    return ("expandable_segments", files.expandable_segments) if expandable_segments else ("default", files.default)
