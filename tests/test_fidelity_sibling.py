"""Calibration carried over from a same-die sibling (`primus.fidelity.sibling`): an accelerator without
published runs of its own takes its sibling's fitted factors on its own spec-derived efficiencies; held
out, so does an accelerator no other source ran on."""

from __future__ import annotations

import pytest

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.fidelity import bundled_runs_path, error_bar, read_runs
from primus.fidelity.calibrate import calibrate, ceiling, load_spec_profile
from primus.fidelity.loso import leave_one_source_out
from primus.fidelity.sibling import dimensionless, factors, sibling_of, transfer
from primus.fidelity.validate import Prepared, prepare
from primus.projection import load_profile

#: Same-die pairs, each from the datasheets its hardware entry cites: H200, H800 and the 500 W H100 96GB
#: are GH100 parts like H100 SXM; B200 is the Blackwell GPU of GB200, B300 the Blackwell Ultra of GB300.
SIBLINGS = {"h200": "h100-80gb", "h800": "h100-80gb", "h100-96gb-500w": "h100-80gb", "b200": "gb200",
            "b300": "gb300"}


@pytest.fixture(scope="module")
def prepared() -> list[Prepared]:
    return prepare(read_runs(bundled_runs_path()))[0]


def test_the_catalog_names_same_die_siblings_with_their_source() -> None:
    named = {hw: sibling_of(hw) for hw in catalog_hardware() if sibling_of(hw) is not None}
    assert named == SIBLINGS
    for hw, sib in named.items():
        mine, theirs = resolve_hardware(hw, "t"), resolve_hardware(sib, "t")  # type: ignore[arg-type]
        assert mine.calibration_sibling is not None and mine.calibration_sibling.source
        assert (mine.accelerator.architecture, mine.accelerator.compute_capability) == \
            (theirs.accelerator.architecture, theirs.accelerator.compute_capability)
        assert load_profile(theirs).fitted and sibling_of(sib) is None  # a fitted entry, not a chain
    assert all(sibling_of(hw) is None for hw in ("mi300x", "mi325x", "mi355x", "cpu"))


def test_only_dimensionless_efficiencies_travel() -> None:
    assert dimensionless("gemm.bf16.efficiency") and dimensionless("stacks.pytorch-compile.gemm.bf16.efficiency")
    assert dimensionless("overlap.interference") and dimensionless("hbm.efficiency")
    # collectives belong to the network around the die (B200's 8-GPU HGX vs GB200's NVL72): they stay
    assert not dimensionless("collectives.all_to_all.scaleup")
    assert not dimensionless("host.moe_layer_us") and not dimensionless("gemm.fp8.half_flops")
    assert not dimensionless("stacks.pytorch-eager.hbm.half_bytes")


def test_the_sibling_factor_applies_to_the_targets_own_spec_value() -> None:
    # the 500 W part keeps its scaled spec plateau (0.65 against H100's 0.80) and takes H100's fitted factor
    sib_fit, sib_spec = load_profile(resolve_hardware("h100-80gb", "t")), load_spec_profile("h100-80gb")
    target = load_spec_profile("h100-96gb-500w")
    moved = transfer(target, sib_fit, sib_spec)
    f = factors(sib_fit, sib_spec)
    bf16 = "gemm.bf16.efficiency"
    assert f[bf16] == pytest.approx(sib_fit.value(bf16) / sib_spec.value(bf16)) and f[bf16] != 1.0
    assert moved.value(bf16) == pytest.approx(target.value(bf16) * f[bf16])
    assert moved.value("host.moe_layer_us") == target.value("host.moe_layer_us")
    assert moved.value("gemm.bf16.half_flops") == target.value("gemm.bf16.half_flops")
    assert "host.moe_layer_us" in sib_fit.calibration.parameters  # type: ignore[union-attr]
    for name, value in moved.parameters().items():
        assert value <= max(ceiling(name), target.value(name)) + 1e-12
    assert not moved.fitted and moved.transferred_from == "h100-80gb" and moved.calibration is None
    assert "h100-80gb" in moved.gemm["bf16"].efficiency.source


def test_accelerators_without_runs_ship_their_siblings_factors() -> None:
    for hw, sib in (("b300", "gb300"), ("h800", "h100-80gb")):
        shipped = load_profile(resolve_hardware(hw, "t"))
        expected = transfer(load_spec_profile(hw), load_profile(resolve_hardware(sib, "t")), load_spec_profile(sib))
        assert shipped.transferred_from == sib and not shipped.fitted
        assert shipped.parameters() == pytest.approx(expected.parameters())
        bar = error_bar(hw, False)
        assert not bar.fitted and sib in bar.basis and "same die" in bar.basis


def test_held_out_alone_on_its_accelerator_it_is_predicted_by_the_siblings_refit(prepared: list[Prepared]) -> None:
    # torchtitan is the only source on H200; its H200 runs are predicted with H100's factors fitted on
    # every other source's H100 runs (torchtitan ran none there), applied to H200's spec-derived profile
    rows = [p for p in prepared if p.jobs.project.cluster.name in ("h200", "h100-80gb")]
    held = leave_one_source_out(rows, sources=["torchtitan"])
    assert held and all(h.accelerator == "h200" and h.fitted_on == 0 and h.transferred_from == "h100-80gb"
                        for h in held)
    train = [p for p in rows if p.jobs.project.cluster.name == "h100-80gb"]
    refit = calibrate(load_spec_profile("h100-80gb"), train, date="loso").profile
    profile = transfer(load_spec_profile("h200"), refit, load_spec_profile("h100-80gb"))
    run = next(p for p in rows if p.row.run_id == held[0].run_id)
    pred = run.project(profile.for_stack(run.jobs.rule.kernels)).tokens_per_s_per_gpu
    assert held[0].error_pct == pytest.approx(100 * (pred / (run.row.measured_tokens or 1) - 1))


def test_a_factor_stopped_at_the_fits_limit_does_not_travel() -> None:
    # calibrate.MAX_FACTOR bounds a fit at a factor of 2 either way: H100's hbm.efficiency fitted 0.4 of a
    # spec 0.8 is the limit, not an estimate, so H800 keeps its own spec value (review 40, item 3)
    from primus.fidelity.sibling import settled

    assert settled(0.8) and settled(1.9)
    assert not settled(0.5) and not settled(2.0)
    h800 = load_profile(resolve_hardware("h800", "t"))
    assert h800.parameters()["hbm.efficiency"] == load_spec_profile("h800").parameters()["hbm.efficiency"]
