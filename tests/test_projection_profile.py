"""Specification of the calibration profiles: every hardware entry has one, every number has a source,
and every named parameter moves the projection the way its meaning says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.errors import InputError
from primus.job import Job, job_from_mapping
from primus.parallel import Layout
from primus.projection import Projector, load_profile, profile_from_mapping
from primus.projection.profile import bounds, profile_path


@pytest.mark.parametrize("slug", catalog_hardware())
def test_every_hardware_entry_has_a_profile_that_says_what_it_rests_on(slug: str) -> None:
    """Shipped profiles are fitted to published runs (and record which, when and the residuals), carry the
    fitted factors of a same-die sibling (and name it), or are the spec-derived starting point, marked as
    such; every accelerator has a spec-derived one."""
    cluster = resolve_hardware(slug, "test")
    prof = load_profile(cluster)
    assert prof.hardware == slug
    assert prof.source and prof.provenance
    spec_path = Path(profile_path(slug)).parent / "spec" / f"{slug}.yaml"
    spec = profile_from_mapping(yaml.safe_load(spec_path.read_text()))
    assert spec.fitted is False and spec.calibration is None
    if prof.fitted:
        rec = prof.calibration
        assert rec is not None and rec.runs and rec.date and set(rec.residuals_pct) == set(rec.runs)
        assert set(rec.parameters) <= set(prof.parameters())
        assert all("fitted by primus calibrate" in src for src in _sources(prof, rec.parameters))
    elif prof.transferred_from:
        assert prof.calibration is None and prof.transferred_from == cluster.calibration_sibling.hardware  # type: ignore[union-attr]
        moved = {k for k, v in prof.parameters().items() if v != spec.parameters()[k]}
        assert moved and all(prof.transferred_from in src for src in _sources(prof, sorted(moved)))
    else:
        assert prof.calibration is None and prof.parameters() == spec.parameters()
    data = yaml.safe_load(Path(profile_path(slug)).read_text())

    def leaves(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, dict) and "value" in node:
            return [node]
        if isinstance(node, dict):
            return [x for v in node.values() for x in leaves(v)]
        return []

    params = leaves(data)
    assert len(params) == len(prof.parameters())
    assert all(len(p["source"]) > 20 for p in params)
    for fmt in prof.gemm:  # a format is only listed where the accelerator has that peak
        from primus.projection.profile import PEAK_DTYPE

        assert PEAK_DTYPE[fmt] in cluster.accelerator.peak_tflops


def _sources(prof: Any, names: list[str]) -> list[str]:
    data = prof.model_dump()
    out = []
    for name in names:
        if name.startswith("stacks."):
            _, stack, rest = name.split(".", 2)
            out.append(data["stacks"][stack]["values"][rest]["source"])
            continue
        node = data
        for part in name.split("."):
            node = node[part]
        out.append(node["source"])
    return out


def test_parameters_round_trip_and_stay_in_bounds() -> None:
    prof = load_profile(resolve_hardware("mi300x", "test"))
    names = prof.parameters()
    assert "gemm.bf16.efficiency" in names and "collectives.all_to_all.scaleout" in names
    changed = prof.with_parameters({"gemm.bf16.efficiency": 0.5}, source="fit 2026")
    assert changed.value("gemm.bf16.efficiency") == 0.5
    assert changed.gemm["bf16"].efficiency.source == "fit 2026"
    assert prof.value("gemm.bf16.efficiency") != 0.5  # frozen: the original is untouched
    with pytest.raises(KeyError):
        prof.with_parameters({"gemm.bf16.eficiency": 0.5})
    with pytest.raises(ValueError):
        prof.with_parameters({"hbm.efficiency": 1.5})
    assert bounds("overlap.tp_comm") == (0.0, 1.0)
    assert bounds("gemm.fp8.half_flops")[0] == 0.0


def test_a_profile_for_other_hardware_is_refused(tmp_path: Path) -> None:
    src = Path(profile_path("mi300x"))
    other = tmp_path / "p.yaml"
    other.write_text(src.read_text())
    with pytest.raises(InputError, match="profile is for 'mi300x'"):
        load_profile(resolve_hardware("h100-80gb", "test"), other)
    with pytest.raises(InputError, match="does not exist"):
        load_profile(resolve_hardware("h100-80gb", "test"), tmp_path / "missing.yaml")
    bad = yaml.safe_load(src.read_text())
    bad["gemm"].pop("bf16")
    with pytest.raises(InputError, match="bf16"):
        profile_from_mapping(bad)


# ---- every named parameter moves the projection in the expected direction ---------------------------


# A 2-layer toy whose kernels are shorter than their host dispatch (the launch floor binds).
TINY = {"base": "llama3.1-8b", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 256, "num_attention_heads": 2,
        "num_query_groups": 2, "kv_channels": 32, "vocab_size": 1024}


def _job(model: str | dict[str, Any] = "llama3.1-8b", hw: str = "h100-80gb", gpus: int = 8, seq: int = 4096,
         gbs: int = 8, precision: str = "bf16", **extra: Any) -> Job:
    data: dict[str, Any] = {"model": model, "hardware": hw, "gpus": gpus, "seq_len": seq,
                            "global_batch_size": gbs, "precision": precision, **extra}
    return job_from_mapping(data, "test")


def _lay(tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, dp: int = 1, mbs: int = 1, sharding: str = "dist_opt",
         vp: int = 1, sp: bool = True) -> Layout:
    return Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=1, dp=dp, mbs=mbs, sp=sp and tp > 1, recompute="none",
                  sharding=sharding)


NO_OVERLAP = {"overlap": {"grad_reduce": False, "param_gather": False}}
# A job and a complete layout in which each parameter is on the step's critical path.
CASES: dict[str, tuple[Job, Layout]] = {
    "gemm.bf16": (_job(), _lay(dp=8)),
    "gemm.fp16": (_job(precision="fp16"), _lay(dp=8)),
    "gemm.fp8": (_job(precision="fp8"), _lay(dp=8)),
    "gemm.fp8_block": (_job(precision="fp8", fp8_recipe="blockwise"), _lay(dp=8)),
    "gemm.mxfp8": (_job(hw="b200", precision="fp8", fp8_recipe="mxfp8"), _lay(dp=8)),
    "gemm.nvfp4": (_job(hw="b200", precision="nvfp4"), _lay(dp=8)),
    "attention": (_job(seq=16384), _lay(dp=8)),
    "hbm": (_job(), _lay(dp=8)),
    "collectives.all_reduce.scaleup": (_job(), _lay(tp=8, sp=False)),
    "collectives.all_reduce.scaleout": (_job(gpus=16, gbs=16, seq=1024, **NO_OVERLAP), _lay(dp=16, sharding="none")),
    "collectives.all_gather.scaleup": (_job(), _lay(tp=8)),
    "collectives.all_gather.scaleout": (_job(gpus=16, gbs=16, seq=1024, **NO_OVERLAP), _lay(dp=16)),
    "collectives.reduce_scatter.scaleup": (_job(), _lay(tp=8)),
    "collectives.reduce_scatter.scaleout": (_job(gpus=16, gbs=16, seq=1024, **NO_OVERLAP), _lay(dp=16)),
    "collectives.all_to_all.scaleup": (_job("mixtral-8x7b", gbs=8), _lay(tp=1, ep=8, dp=8)),
    "collectives.all_to_all.scaleout": (_job("qwen3-30b-a3b", gpus=16, gbs=16), _lay(ep=16, dp=16)),
    "collectives.p2p.scaleup": (_job(gbs=4), _lay(tp=2, pp=4)),
    "collectives.p2p.scaleout": (_job(gpus=16, gbs=4), _lay(tp=8, pp=2)),
    "overlap.grad_reduce": (_job(gpus=16, gbs=16, seq=1024), _lay(dp=16)),
    "overlap.param_gather": (_job(gpus=16, gbs=16, seq=1024), _lay(dp=16)),
    "overlap.fsdp_prefetch": (_job(gpus=16, gbs=16, seq=1024), _lay(dp=16, sharding="fsdp")),
    "overlap.tp_comm": (_job(gpus=16, gbs=1, seq=1024, overlap={"tp_comm": True}), _lay(tp=16)),
    "overlap.moe_a2a": (_job("qwen3-30b-a3b", gpus=16, gbs=16, overlap={"moe_a2a": True}), _lay(ep=16, dp=16)),
    "overlap.interference": (_job(gpus=16, gbs=16, seq=1024), _lay(dp=16)),
    "host.moe_layer_us": (_job("qwen3-30b-a3b", gpus=16, gbs=16), _lay(ep=16, dp=16)),
    "host.kernel_launch_us": (_job(TINY, gpus=1, gbs=1, seq=128), _lay()),
    "host.step_us": (_job(TINY, gpus=1, gbs=1, seq=128), _lay()),
}


def _case(name: str) -> tuple[Job, Layout]:
    if name.startswith("stacks."):  # a stack's override moves the projection as the parameter it overrides
        name = name.split(".", 2)[2]
    for key in sorted(CASES, key=len, reverse=True):
        if name == key or name.startswith(key + "."):
            return CASES[key]
    raise KeyError(name)


def _all_parameter_names() -> list[str]:
    names: set[str] = set()
    for slug in catalog_hardware():
        names |= set(load_profile(resolve_hardware(slug, "test")).parameters())
    return sorted(names)


@pytest.mark.parametrize("name", _all_parameter_names())
def test_each_named_parameter_moves_the_step_time_the_expected_way(name: str) -> None:
    """Lower efficiency or overlap → slower; larger fixed-cost sizes (half_flops, half_bytes), host time or
    interference → slower; a software stack's override moves the projection of a run on that stack."""
    job, layout = _case(name)
    prof = load_profile(job.cluster)
    if name not in prof.parameters():  # a stack another accelerator's profile lists: use one that has it
        prof = next(p for p in (load_profile(resolve_hardware(s, "t")) for s in catalog_hardware())
                    if name in p.parameters())
        job = job_from_mapping({**job.spec.model_dump(exclude_none=True), "hardware": prof.hardware}, "test")
    stack = name.split(".")[1] if name.startswith("stacks.") else None
    base = Projector(job, prof.for_stack(stack)).project(layout)
    value = prof.value(name)
    if name.startswith("host."):
        worse = value * 2 + 100.0
    elif name.endswith("interference"):
        worse = min(1.0, value + 0.3)
    elif name.endswith(("half_flops", "half_bytes")):
        worse = value * 2 + 1e9
    else:
        worse = value * 0.7
    changed = Projector(job, prof.with_parameters({name: worse}).for_stack(stack)).project(layout)
    assert changed.step_time_s > base.step_time_s * (1 + 1e-9), (name, base.breakdown, changed.breakdown)


@pytest.mark.parametrize(("kind", "bus_gb_s"), [("all_reduce", 390.0), ("all_gather", 380.0),
                                                ("reduce_scatter", 400.0), ("all_to_all", 340.0)])
def test_mi355x_scaleup_collectives_are_the_bus_bandwidths_amd_expects_on_one_node(kind: str, bus_gb_s: float) -> None:
    # ROCm/cvs e241bd47 input/config_file/rccl/single_node_mi355_rccl.json: rccl-tests bus bandwidth expected at
    # 8 GiB on one 8 x MI355X node; the profile holds it as a fraction of the 7 x 76.8 GB/s Infinity Fabric mesh
    cluster = resolve_hardware("mi355x", "test")
    coll = getattr(load_profile(cluster).collectives, kind).scaleup
    assert cluster.scaleup.bandwidth_gb_s == 537.6
    assert round(coll.value * cluster.scaleup.bandwidth_gb_s) == pytest.approx(bus_gb_s, abs=1.0)
    assert "ROCm/cvs" in coll.source


def test_a_number_yaml_reads_as_text_gets_the_way_to_write_it() -> None:
    """`1.25e9` is text to YAML 1.1 (no sign in the exponent): the field is named as the file spells it
    (no union-member tag such as `.float`) and the message says to write `1.25e+9`."""
    data = yaml.safe_load(profile_path("h100-80gb").read_text())
    data["gemm"]["bf16"]["half_flops"]["value"] = "1.25e9"
    with pytest.raises(InputError) as err:
        profile_from_mapping(data, "p.yaml")
    assert err.value.line() == ("p.yaml: gemm.bf16.half_flops.value: must be a number or an integer, got '1.25e9' "
                                "(YAML reads 1.25e9 as text: write 1.25e+9)")
