"""Calibration carried over from a sibling accelerator: the same die, no published runs of its own.

A hardware entry may name a `calibration_sibling` (`hardware/<name>.yaml`): another catalog entry built on
the same die (H200, H800 and the 500 W H100 96GB on H100 SXM's GH100; B200 on GB200's Blackwell GPU;
B300 on GB300's Blackwell Ultra), with the datasheet that says so. What a fit learns about the die's
kernels — how far the spec-derived efficiencies sit from what published runs reach — then holds for
the sibling too, so an accelerator without runs of its own (in the shipped product: none at all; held
out: none from any other source) takes, for every parameter its sibling's fit moved, the same factor on
its own spec-derived value:

    value = own spec value × (sibling's fitted value / sibling's spec value)

Only dimensionless efficiencies and fractions of the die travel (GEMM plateaus, attention, HBM
efficiency, overlap fractions), and only where the fit settled inside its limits; collective efficiencies
stay the target's own (they belong to the network). Peaks, bandwidths and capacities are each entry's own datasheet
figures and never move; half sizes are not fitted anyway; host times (`host.*`) belong to the host CPU
and the software around the GPU (Grace on GB200, x86 on B200), not to the die. Factors apply to the
target's own spec values, so the documented differences between the two spec-derived profiles (the
500 W part's scaled plateaus) are kept. A transferred value never rises above the published ceiling a
fit respects (`calibrate.ceiling`). The result is not a fitted profile: `fitted` stays false and
`transferred_from` names the sibling.
"""

from __future__ import annotations

import math

from primus.errors import InputError
from primus.fidelity.calibrate import MAX_FACTOR, ceiling
from primus.projection.profile import Profile, bounds, profile_from_mapping


def dimensionless(name: str) -> bool:
    """Whether a profile parameter is an efficiency or fraction of the die that may travel to a sibling:
    not host times (the host CPU's), not half sizes (not fitted), and not collective efficiencies, which
    belong to the network around the die (B200's 8-GPU HGX NVLink vs GB200's 72-GPU NVL72 domain,
    H800's cut NVLink), not to the die (review 40, item 3)."""
    base = name.split(".", 2)[2] if name.startswith("stacks.") else name
    return (not base.startswith(("host.", "collectives.")) and not base.endswith(("half_flops", "half_bytes")))


def settled(factor: float) -> bool:
    """Whether a fitted factor is an estimate rather than the fit's own limit (`calibrate.MAX_FACTOR`, a
    factor of 2 either way): a parameter stopped at the limit says only that the fit wanted to go further,
    which is no factor to carry to another accelerator."""
    return abs(math.log(factor)) < MAX_FACTOR - 1e-9


def sibling_of(hardware: str) -> str | None:
    """The `calibration_sibling` a hardware catalog entry names (None: none, or not in the catalog)."""
    from primus.catalog.hardware import resolve_hardware

    try:
        sib = resolve_hardware(hardware.split("+", 1)[0], "calibration sibling").calibration_sibling
    except InputError:
        return None
    return None if sib is None else sib.hardware


def factors(fitted: Profile, spec: Profile) -> dict[str, float]:
    """Per parameter a fit moved: fitted / spec-derived value (dimensionless parameters only)."""
    if not fitted.fitted or fitted.calibration is None:
        raise ValueError(f"{fitted.hardware}'s profile is not fitted: nothing to transfer")
    now, start = fitted.parameters(), spec.parameters()
    out = {n: now[n] / start[n] for n in fitted.calibration.parameters
           if dimensionless(n) and start.get(n, 0.0) > 0.0 and n in now}
    return {n: f for n, f in out.items() if f > 0.0 and settled(f)}


def transfer(target_spec: Profile, sibling_fitted: Profile, sibling_spec: Profile) -> Profile:
    """`target_spec` (a spec-derived profile) with its sibling's fitted factors applied (module docstring)."""
    sib = sibling_fitted.hardware
    own = target_spec.parameters()
    new: dict[str, float] = {}
    for name, f in factors(sibling_fitted, sibling_spec).items():
        if name not in own:
            continue
        lo, hi = bounds(name)
        new[name] = min(hi, max(ceiling(name), own[name]), max(lo, own[name] * f))
    note = (f"spec-derived value times the factor primus calibrate fitted for the same parameter on {sib} "
            f"(same die: hardware/{target_spec.hardware}.yaml calibration_sibling)")
    moved = target_spec.with_parameters(new, source=note)
    data = moved.model_dump()
    when = sibling_fitted.calibration.date if sibling_fitted.calibration is not None else "?"
    data.update(
        fitted=False, transferred_from=sib, calibration=None,
        source=(f"spec-derived profile of {target_spec.hardware} with the fitted factors of its same-die sibling "
                f"{sib} ({when}); starting point: {target_spec.source}")[:2000],
        provenance=(f"no published runs of {target_spec.hardware} to fit: {len(new)} dimensionless efficiencies take "
                    f"the factors primus calibrate fitted on {sib} ({when}), applied to this accelerator's own "
                    "spec-derived values (primus.fidelity.sibling); peaks, bandwidths, capacities and host times "
                    "are its own.")[:2000])
    return profile_from_mapping(data, f"{target_spec.hardware} (transferred from {sib})")
