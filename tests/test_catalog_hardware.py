"""Specification of the shipped hardware catalog (hardware/*.yaml) against published figures.

Every number below was published by the vendor (datasheet) or read from a public log of the device;
the source is given next to it. Peaks are *dense* TFLOP/s: NVIDIA quotes H100/H200/Blackwell tensor
rates with 2:4 sparsity, so the catalog holds half of the datasheet's headline number.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.errors import InputError
from primus.specs.hardware import ClusterSpec, Figure

REPO = Path(__file__).resolve().parents[1]
# CI clones the repository next to a copy of shared/; the file may be absent elsewhere.
# the copy of shared/ground_truth/runs_dev.csv that ships with primus (validate reads the same file)
RUNS_DEV_CSV = REPO / "primus" / "fidelity" / "data" / "runs_dev.csv"

# The `gpu` slugs of the GPU rows of runs_dev.csv (as of 2026-12-02), kept as literals so the test
# runs where shared/ is absent. The one TPU row (PaLM, flagged not_gpu) and the four rows whose GPU
# the source does not state (gpu empty, flagged gpu_unknown) have no catalog entry by design.
GROUND_TRUTH_GPUS = (
    "a100-80gb",
    "b200",
    "gb200",
    "gb300",
    "h100-80gb",
    "h100-96gb-500w",
    "h200",
    "h800",
    "mi300x",
    "mi325x",
    "mi355x",
)

ENTRIES = (*GROUND_TRUTH_GPUS, "b300", "cpu")
NVIDIA = ("a100-80gb", "h100-80gb", "h100-96gb-500w", "h200", "h800", "b200", "b300", "gb200", "gb300")
AMD = ("mi300x", "mi325x", "mi355x")


def hw(slug: str) -> ClusterSpec:
    return resolve_hardware(slug, "test")


def figures(node: Any) -> list[tuple[str, Figure]]:
    """Every `Figure` inside a spec, with its dotted path."""
    found: list[tuple[str, Figure]] = []

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, Figure):
            found.append((path, obj))
        elif isinstance(obj, BaseModel):
            for name in type(obj).model_fields:
                walk(getattr(obj, name), f"{path}.{name}" if path else name)

    walk(node, "")
    return found


# ---- the catalog as files ---------------------------------------------------------------------------


def test_catalog_holds_exactly_the_planned_entries() -> None:
    assert sorted(catalog_hardware()) == sorted(ENTRIES)


@pytest.mark.parametrize("slug", ENTRIES)
def test_every_entry_loads_through_resolve_hardware(slug: str) -> None:
    spec = hw(slug)
    assert spec.name == slug
    assert spec.hbm_bytes == spec.accelerator.hbm_bytes > 0


@pytest.mark.parametrize("slug", ENTRIES)
def test_every_figure_and_every_source_string_is_filled(slug: str) -> None:
    spec = hw(slug)
    figs = figures(spec)
    assert {path for path, _ in figs} == {
        "reserves.runtime_context_bytes",
        "reserves.allocator_fragmentation",
        "reserves.communicator_buffer_bytes",
    }
    for path, fig in figs:
        assert fig.source.strip(), f"{slug}: {path} has no source"
        assert fig.unit in ("bytes", "fraction"), f"{slug}: {path} unit {fig.unit!r}"
    acc = spec.accelerator
    for text in (acc.peak_tflops_source, acc.hbm_bytes_source, acc.hbm_bandwidth_source):
        assert text.strip()
    assert spec.scaleup.source.strip() and spec.scaleout.source.strip()
    assert spec.notes and spec.notes.strip()


@pytest.mark.parametrize("slug", ENTRIES)
def test_reserve_units_and_ranges(slug: str) -> None:
    res = hw(slug).reserves
    assert res.runtime_context_bytes.unit == "bytes"
    assert res.communicator_buffer_bytes.unit == "bytes"
    assert res.allocator_fragmentation.unit == "fraction"
    assert 0.0 <= res.allocator_fragmentation.value < 0.5


def test_only_the_cpu_entry_is_measured() -> None:
    assert [slug for slug in ENTRIES if hw(slug).measured] == ["cpu"]


# ---- dense peaks ------------------------------------------------------------------------------------

# (slug, dense bf16, dense fp8 or None): NVIDIA A100 datasheet (312, no FP8); H100/H800 SXM datasheet
# (1,979 / 3,958 sparse -> 989.4 / 1978.9); H200 datasheet (same compute as H100); HGX B200 and HGX
# B300 datasheets (36 PF BF16 / 72 PF FP8 sparse per 8 GPUs -> 2,250 / 4,500); GB200 and GB300 NVL72
# datasheets (360 PF BF16 / 720 PF FP8 sparse per 72 GPUs -> 2,500 / 5,000); AMD MI300X and MI325X data
# sheets (1,307.4 / 2,614.9 dense); AMD MI355X data sheet (2,516.6 / 5,033.2 dense).
DENSE_PEAKS = [
    ("a100-80gb", 312.0, None),
    ("h100-80gb", 989.4, 1978.9),
    ("h100-96gb-500w", 989.4, 1978.9),
    ("h200", 989.4, 1978.9),
    ("h800", 989.4, 1978.9),
    ("b200", 2250.0, 4500.0),
    ("b300", 2250.0, 4500.0),
    ("gb200", 2500.0, 5000.0),
    ("gb300", 2500.0, 5000.0),
    ("mi300x", 1307.4, 2614.9),
    ("mi325x", 1307.4, 2614.9),
    ("mi355x", 2516.6, 5033.2),
]


@pytest.mark.parametrize(("slug", "bf16", "fp8"), DENSE_PEAKS)
def test_dense_bf16_and_fp8_peaks_match_the_datasheets(slug: str, bf16: float, fp8: float | None) -> None:
    peaks = hw(slug).accelerator.peak_tflops
    assert peaks["bf16"] == pytest.approx(bf16, abs=0.05)
    if fp8 is None:
        assert "fp8" not in peaks
    else:
        assert peaks["fp8"] == pytest.approx(fp8, abs=0.05)


# The headline BF16 figures NVIDIA prints *with* 2:4 sparsity, per GPU: A100 624 (A100 datasheet),
# H100/H800/H200 1,979 (H100/H200 datasheets), B200/B300 4,500 (HGX 36 PF / 8), GB200/GB300 5,000
# (NVL72 360 PF / 72).
SPARSE_BF16 = {
    "a100-80gb": 624.0,
    "h100-80gb": 1979.0,
    "h100-96gb-500w": 1979.0,
    "h200": 1979.0,
    "h800": 1979.0,
    "b200": 4500.0,
    "b300": 4500.0,
    "gb200": 5000.0,
    "gb300": 5000.0,
}


@pytest.mark.parametrize("slug", NVIDIA)
def test_no_nvidia_bf16_peak_is_the_sparse_figure(slug: str) -> None:
    bf16 = hw(slug).accelerator.peak_tflops["bf16"]
    sparse = SPARSE_BF16[slug]
    assert bf16 != pytest.approx(sparse, rel=0.01)
    assert bf16 == pytest.approx(sparse / 2, rel=0.001)


@pytest.mark.parametrize("slug", (*NVIDIA, *AMD))
def test_fp16_peak_equals_bf16_peak(slug: str) -> None:
    peaks = hw(slug).accelerator.peak_tflops
    assert peaks["fp16"] == peaks["bf16"]


def test_fp4_peaks_are_dense() -> None:
    """HGX B200 72 PF / 8; HGX B300 105 PF / 8; GB200 NVL72 1,440 PF sparse / 72 / 2; GB300 NVL72
    1,080 PF dense / 72; MI355X data sheet MXFP4 10,066.3 dense."""
    expected = {"b200": 9000.0, "b300": 13125.0, "gb200": 10000.0, "gb300": 15000.0, "mi355x": 10066.3}
    for slug, fp4 in expected.items():
        assert hw(slug).accelerator.peak_tflops["fp4"] == pytest.approx(fp4, abs=0.05), slug


def test_peak_flops_converts_tflops_and_rejects_missing_dtypes() -> None:
    acc = hw("h100-80gb").accelerator
    assert acc.peak_flops("bf16") == pytest.approx(989.4e12)
    with pytest.raises(KeyError):
        hw("a100-80gb").accelerator.peak_flops("fp8")


# ---- memory as torch sees it -----------------------------------------------------------------------


def test_h100_hbm_is_torch_total_memory() -> None:
    """cudaDeviceProp.totalGlobalMem of 'NVIDIA H100 80GB HBM3' (torch prints total_memory=81090MB)."""
    assert hw("h100-80gb").hbm_bytes == 85029158912
    assert hw("h800").hbm_bytes == 85029158912


def test_mi300x_hbm_is_torch_total_memory() -> None:
    """hipDeviceProp.totalGlobalMem 196592 MiB; rocm-smi 'VRAM Total Memory (B): 206141652992'; torch
    OOM messages 'total capacity of 191.98 GiB'."""
    assert hw("mi300x").hbm_bytes == 206141652992 == 196592 * 2**20


# torch-reported capacity in GiB (two decimals, as torch's OOM message prints it) from public logs:
# A100 deviceQuery 85100068864 B; H200 'total capacity of 139.80 GiB'; B200 total_memory=182631MB;
# B300 267.69 GiB; GB200 184.31 GiB; GB300 276.50 GiB; MI325X 255.98 GiB; MI355X 287.98 GiB.
TORCH_GIB = [
    ("a100-80gb", 79.26),
    ("h200", 139.80),
    ("b200", 178.35),
    ("b300", 267.69),
    ("gb200", 184.31),
    ("gb300", 276.50),
    ("mi325x", 255.98),
    ("mi355x", 287.98),
]


@pytest.mark.parametrize(("slug", "gib"), TORCH_GIB)
def test_hbm_matches_the_published_torch_capacity(slug: str, gib: float) -> None:
    assert hw(slug).hbm_bytes / 2**30 == pytest.approx(gib, abs=0.005)


def test_torch_sees_less_than_nvidia_smi() -> None:
    """nvidia-smi memory.total (H100 81559 MiB, H200 143771, B200 183359, GB200 189471, GB300 284208,
    B300 275040) includes the driver's reservation, which torch's total_memory excludes."""
    smi_mib = {
        "h100-80gb": 81559,
        "h200": 143771,
        "b200": 183359,
        "gb200": 189471,
        "gb300": 284208,
        "b300": 275040,
    }
    for slug, mib in smi_mib.items():
        assert hw(slug).hbm_bytes < mib * 2**20, slug


# ---- fabrics -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", AMD)
def test_amd_nodes_are_a_full_mesh_of_seven_links(slug: str) -> None:
    up = hw(slug).scaleup
    assert up.topology == "full_mesh"
    assert up.links_per_gpu == 7
    assert up.domain_size == hw(slug).gpus_per_node == 8
    assert not up.in_switch_reduction


def test_infinity_fabric_bandwidth_is_all_seven_links_per_direction() -> None:
    """MI300X/MI325X data sheets: 128 GB/s bidirectional per link -> 7 x 64 = 448 GB/s per direction;
    MI355X data sheet: 153.6 GB/s bidirectional per link -> 7 x 76.8 = 537.6 GB/s."""
    assert hw("mi300x").scaleup.bandwidth_gb_s == pytest.approx(7 * 64)
    assert hw("mi325x").scaleup.bandwidth_gb_s == pytest.approx(7 * 64)
    assert hw("mi355x").scaleup.bandwidth_gb_s == pytest.approx(7 * 76.8)


@pytest.mark.parametrize("slug", ("gb200", "gb300"))
def test_nvl72_is_a_72_gpu_domain_of_four_gpu_trays(slug: str) -> None:
    spec = hw(slug)
    assert spec.gpus_per_node == 4
    assert spec.scaleup.domain_size == 72
    assert spec.scaleout.nics_per_node == 4  # one NIC per GPU on each compute tray


# (slug, NVLink GB/s per direction per GPU, links, in-switch reduction): NVLink 3 = 12 x 25;
# NVLink 4 = 18 x 25; H800 = 8 links, 400 GB/s bidirectional; NVLink 5 = 18 links, 1.8 TB/s bidir.
NVLINK = [
    ("a100-80gb", 300, 12, False),
    ("h100-80gb", 450, 18, True),
    ("h100-96gb-500w", 450, 18, True),
    ("h200", 450, 18, True),
    ("h800", 200, 8, True),
    ("b200", 900, 18, True),
    ("b300", 900, 18, True),
    ("gb200", 900, 18, True),
    ("gb300", 900, 18, True),
]


@pytest.mark.parametrize(("slug", "gb_s", "links", "sharp"), NVLINK)
def test_nvlink_generations(slug: str, gb_s: float, links: int, sharp: bool) -> None:
    up = hw(slug).scaleup
    assert up.topology == "switched"
    assert up.bandwidth_gb_s == gb_s
    assert up.links_per_gpu == links
    assert up.in_switch_reduction is sharp


# (slug, NICs per node, GB/s per NIC): DGX A100 8 x 200 Gb/s HDR; DGX H100/H200, H800 (DeepSeek-V3:
# IB 50 GB/s), torchtitan's Grand Teton (400 Gb/s per GPU), DGX B200 8 x 400 Gb/s; DGX B300 8 x 800 Gb/s
# ConnectX-8; GB200 tray 4 x 400 Gb/s; GB300 tray 4 x 800 Gb/s; AMD 8 x 400 Gb/s.
SCALEOUT = [
    ("a100-80gb", 8, 25),
    ("h100-80gb", 8, 50),
    ("h100-96gb-500w", 8, 50),
    ("h200", 8, 50),
    ("h800", 8, 50),
    ("b200", 8, 50),
    ("b300", 8, 100),
    ("gb200", 4, 50),
    ("gb300", 4, 100),
    ("mi300x", 8, 50),
    ("mi325x", 8, 50),
    ("mi355x", 8, 50),
]


@pytest.mark.parametrize(("slug", "nics", "gb_s"), SCALEOUT)
def test_scaleout_nics(slug: str, nics: int, gb_s: float) -> None:
    out = hw(slug).scaleout
    assert (out.nics_per_node, out.nic_bandwidth_gb_s) == (nics, gb_s)


def test_cpu_entry_is_one_device() -> None:
    spec = hw("cpu")
    assert spec.accelerator.vendor == "cpu"
    assert spec.gpus_per_node == 1 and spec.scaleup.domain_size == 1
    peaks = spec.accelerator.peak_tflops
    assert peaks["bf16"] == peaks["fp32"]  # measured fp32 matmul, stated as the bf16 peak too
    assert "measured on the development machine" in spec.accelerator.peak_tflops_source


# ---- the ground truth's GPUs ------------------------------------------------------------------------


def _ground_truth_gpus() -> list[str]:
    with RUNS_DEV_CSV.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return sorted({r["gpu"] for r in rows if r["gpu"] and "not_gpu" not in r.get("flags", "")})


@pytest.mark.parametrize("slug", _ground_truth_gpus())
def test_every_ground_truth_gpu_resolves(slug: str) -> None:
    assert hw(slug).name == slug


def test_the_literal_ground_truth_list_matches_the_csv() -> None:
    assert sorted(GROUND_TRUTH_GPUS) == _ground_truth_gpus()


# ---- overrides ---------------------------------------------------------------------------------------


def test_override_by_leaf_name_replaces_only_that_field() -> None:
    base = hw("mi300x")
    custom = resolve_hardware({"base": "mi300x", "hbm_bytes": 200_000_000_000}, "test")
    assert custom.hbm_bytes == 200_000_000_000
    assert custom.name == "mi300x+custom"
    assert custom.accelerator.peak_tflops == base.accelerator.peak_tflops
    assert custom.scaleup == base.scaleup and custom.reserves == base.reserves


def test_override_of_a_nested_section_is_merged() -> None:
    custom = resolve_hardware({"base": "h100-80gb", "scaleout": {"nics_per_node": 4}}, "test")
    assert custom.scaleout.nics_per_node == 4
    assert custom.scaleout.nic_bandwidth_gb_s == 50


def test_unknown_override_key_is_an_input_error_with_did_you_mean() -> None:
    with pytest.raises(InputError) as err:
        resolve_hardware({"base": "mi300x", "hbm_byte": 1}, "job.yaml")
    assert err.value.field == "hardware.hbm_byte"
    assert "did you mean 'hbm_bytes'" in err.value.reason


def test_unknown_catalog_name_suggests_the_closest() -> None:
    with pytest.raises(InputError) as err:
        resolve_hardware("mi300", "job.yaml")
    assert "mi300x" in err.value.reason


def test_override_that_breaks_the_schema_is_an_input_error() -> None:
    with pytest.raises(InputError):
        resolve_hardware({"base": "h100-80gb", "gpus_per_node": 3}, "job.yaml")  # 8 % 3 and 3 % 8


# ---- the measurement script ------------------------------------------------------------------------


@functools.cache
def _measure_module() -> Any:
    """hardware/measure_cpu.py is a script, not part of the package: load it by path."""
    path = REPO / "hardware" / "measure_cpu.py"
    spec = importlib.util.spec_from_file_location("primus_test_measure_cpu", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_measure_cpu_snippet_states_every_figure_with_its_provenance() -> None:
    mod = _measure_module()
    m = mod.Measurement(
        date="2026-12-02",
        cpu_model="AMD EPYC",
        logical_cpus=2,
        mem_total_bytes=25275990016,
        numpy_version="2.4.6",
        rss_bytes=29077504,
        matmul_tflops=0.0903,
        copy_gb_s=22.44,
        pipe_latency_us=17.21,
        tcp_gb_s=4.02,
        tcp_latency_us=12.61,
    )
    text = mod.snippet(m)
    assert "peak_tflops: {bf16: 0.0903, fp32: 0.0903}" in text
    assert "hbm_bytes: 25275990016" in text
    assert "measured on the development machine (2 cores, AMD EPYC) on 2026-12-02 with numpy 2.4.6" in text


def test_measure_cpu_reads_proc_files() -> None:
    mod = _measure_module()
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc on this platform")
    assert mod._proc_field("/proc/meminfo", "MemTotal") > 0
    assert mod.logical_cpus() >= 1


@pytest.mark.parametrize(("slug", "capability"), [
    ("a100-80gb", "8.0"), ("h100-80gb", "9.0"), ("h200", "9.0"), ("b200", "10.0"), ("gb300", "10.3"),
    # ROCm reports the gfx target's digits: MI300X/MI325X gfx942, MI355X gfx950
    ("mi300x", "9.4"), ("mi325x", "9.4"), ("mi355x", "9.5"),
])
def test_compute_capability_is_what_torch_reports(slug: str, capability: str) -> None:
    acc = resolve_hardware(slug, "test").accelerator
    assert acc.compute_capability == capability and acc.compute_capability_source
    assert acc.compute_major == int(capability.split(".")[0])


def test_every_gpu_states_its_compute_capability_and_the_cpu_none() -> None:
    for slug in catalog_hardware():
        acc = resolve_hardware(slug, "test").accelerator
        assert (acc.compute_capability is None) == (acc.vendor == "cpu"), slug


def test_a_calibration_profile_given_as_hardware_is_named_as_one() -> None:
    """Review 48 low 12: `hardware show hardware/profiles/a100-80gb.yaml` said `hardware: unknown key`."""
    from primus.catalog.hardware import PROFILE_KEYS
    from primus.projection.profile import Profile, profile_path

    assert {k for k, f in Profile.model_fields.items() if f.is_required()} >= PROFILE_KEYS
    path = profile_path("a100-80gb")
    with pytest.raises(InputError) as err:
        resolve_hardware(str(path), "job.yaml")
    assert err.value.line() == f"{path}: this is a calibration profile (for `--profile`), not a hardware entry " \
                               "(hardware/*.yaml)"


def test_a_measured_profile_given_as_hardware_is_named_as_one(tmp_path: Path) -> None:
    from primus.catalog.hardware import MEASURED_FORMAT
    from primus.measure.measured_profile import FORMAT

    assert MEASURED_FORMAT == FORMAT
    path = tmp_path / "prof.json"
    path.write_text('{"format": "primus-measured-profile", "version": 1, "entries": {}}')
    with pytest.raises(InputError, match="this is a measured profile"):
        resolve_hardware(str(path), "job.yaml")
