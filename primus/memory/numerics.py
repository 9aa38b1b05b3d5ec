"""Bytes per element of what a training step stores, by precision and FP8 recipe.

These are format definitions, not tuning constants: bf16/fp16 are 2 bytes; FP8 (E4M3/E5M2) 1 byte
plus its scales: per tensor for delayed/tensorwise (negligible), one fp32 scale per 128×128 block for
DeepSeek-style blockwise weights and per 1×128 tile for activations, one E8M0 byte per 32 elements for
MXFP8 (OCP Microscaling Formats spec v1.0), and for NVFP4 4-bit values with one FP8 E4M3 scale per 16
elements (NVIDIA Blackwell NVFP4 format). Fractions keep the ledger exact.

What FP8 changes (Transformer Engine semantics): GEMMs run in FP8, so the *inputs a linear layer saves
for its weight gradient* are stored in FP8; norm inputs, attention q/k/v/output and the MLP activation
input stay in bf16. Weights keep their bf16 copy and gain an FP8 cache — on Hopper-style per-tensor
recipes a row-wise copy and its transpose (2 bytes per weight); with MXFP8/NVFP4/blockwise both a
row-wise and a column-wise quantised copy with scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Numerics:
    """Element widths for one precision setting."""

    name: str
    activation: Fraction  # saved activations that are not GEMM inputs
    gemm_input: Fraction  # activations saved as GEMM inputs for the weight gradient
    weight: Fraction  # the model's working weights (bf16/fp16 copy)
    weight_cache: Fraction  # extra low-precision copies of GEMM weights kept across the step
    description: str

    def __hash__(self) -> int:
        """The name identifies the widths (one Numerics per precision/recipe); hashing Fractions is slow."""
        return hash(self.name)


def numerics_for(precision: str, fp8_recipe: str | None) -> Numerics:
    two = Fraction(2)
    if precision in ("bf16", "fp16"):
        return Numerics(precision, two, two, two, Fraction(0), f"{precision} weights and activations")
    if precision == "fp8":
        recipe = fp8_recipe or "delayed"
        if recipe in ("delayed", "tensorwise"):
            act = Fraction(1)
            cache = Fraction(2)  # FP8 weight and its FP8 transpose (Hopper wgmma needs K-major operands)
        elif recipe == "blockwise":
            act = Fraction(1) + Fraction(4, 128)  # fp32 scale per 1x128 activation tile
            cache = 2 * (Fraction(1) + Fraction(4, 128 * 128))  # rowwise + colwise, fp32 scale per 128x128 block
        elif recipe == "mxfp8":
            act = Fraction(1) + Fraction(1, 32)  # E8M0 scale per 32 elements
            cache = 2 * (Fraction(1) + Fraction(1, 32))  # rowwise and columnwise MXFP8 copies
        else:
            raise ValueError(f"unknown fp8 recipe {recipe!r}")
        return Numerics(f"fp8-{recipe}", two, act, two, cache,
                        f"FP8 ({recipe}) GEMMs: GEMM inputs saved in FP8, bf16 weights plus an FP8 weight cache")
    if precision == "nvfp4":
        act = Fraction(1, 2) + Fraction(1, 16)  # 4-bit values, E4M3 scale per 16 elements
        cache = 2 * (Fraction(1, 2) + Fraction(1, 16))
        return Numerics("nvfp4", two, act, two, cache,
                        "NVFP4 GEMMs: GEMM inputs saved in NVFP4, bf16 weights plus row- and column-wise NVFP4 caches")
    raise ValueError(f"unknown precision {precision!r}")


def nbytes(elements: int, width: Fraction) -> int:
    """Exact bytes of `elements` values of `width` bytes each (rounded up to a whole byte)."""
    return -(-(elements * width.numerator) // width.denominator)
