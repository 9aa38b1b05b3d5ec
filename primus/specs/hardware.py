"""Accelerators and the clusters built from them.

A cluster is described the way Calculon splits a system: the compute device (dense peaks per dtype,
HBM capacity as torch's allocator sees it, HBM bandwidth), the scale-up domain (NVLink / Infinity
Fabric: its size, which may exceed a node, its topology and per-GPU bandwidth), and the scale-out
network (NICs per node). Every figure that is not a plain datasheet number is a named `Figure` with its
source, because unexplained efficiency constants are what make earlier tools untrustworthy.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from primus.specs.base import Bool, ByteCount, Name, NonNegFloat, PosFloat, PosInt, Spec, Text

DType = Literal["bf16", "fp16", "fp8", "fp4", "fp32", "tf32"]


class Figure(Spec):
    """A named number with its unit and provenance (an efficiency, overhead, latency, reserve...)."""

    value: NonNegFloat
    unit: Text = ""
    source: Text


class AcceleratorSpec(Spec):
    name: Text
    vendor: Literal["nvidia", "amd", "cpu"]
    architecture: Text = ""
    peak_tflops: dict[DType, PosFloat] = Field(description="dense peak TFLOP/s per dtype, never the 2:4 sparse figure")
    peak_tflops_source: Text
    hbm_bytes: ByteCount = Field(description="device memory as torch's allocator reports it (total_memory)")
    hbm_bytes_source: Text
    hbm_bandwidth_gb_s: PosFloat
    hbm_bandwidth_source: Text
    tdp_watts: PosFloat | None = None
    compute_capability: str | None = Field(
        default=None, pattern=r"^\d{1,2}\.\d{1,2}$",
        description="what torch.cuda.get_device_capability() reports (major.minor); frameworks gate options on it")
    compute_capability_source: Text = ""

    @property
    def compute_major(self) -> int | None:
        """The major compute capability (Megatron-LM's get_device_arch_version), None for a CPU."""
        return None if self.compute_capability is None else int(self.compute_capability.split(".")[0])

    @model_validator(mode="after")
    def _has_bf16(self) -> AcceleratorSpec:
        if "bf16" not in self.peak_tflops:
            raise ValueError("peak_tflops needs at least bf16")
        return self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype (fp8 recipes run GEMMs in fp8, nvfp4 in fp4)."""
        if dtype not in self.peak_tflops:
            raise KeyError(f"{self.name} has no {dtype} peak")
        return float(self.peak_tflops[dtype]) * 1e12


class ScaleUpSpec(Spec):
    """The high-bandwidth domain (NVLink / NVSwitch, Infinity Fabric). On GB200/GB300 NVL72 it spans
    18 trays of 4 GPUs, so it is not the node."""

    domain_size: PosInt
    topology: Literal["switched", "full_mesh"]
    bandwidth_gb_s: PosFloat = Field(description="per GPU, per direction, all links together")
    links_per_gpu: PosInt
    latency_us: PosFloat
    in_switch_reduction: Bool = False
    source: Text


class ScaleOutSpec(Spec):
    """The inter-node network: NICs per node, each at nic_bandwidth_gb_s per direction."""

    nics_per_node: PosInt
    nic_bandwidth_gb_s: PosFloat
    latency_us: PosFloat
    source: Text


class MemoryReserves(Spec):
    """Runtime memory outside the byte ledger's model state, each named with its source."""

    runtime_context_bytes: Figure
    allocator_fragmentation: Figure
    communicator_buffer_bytes: Figure


class HostLinkSpec(Spec):
    """The link between a GPU and its host CPU's memory (PCIe, NVLink-C2C): what CPU offloading copies
    over, per GPU and per direction."""

    bandwidth_gb_s: PosFloat
    source: Text


class CalibrationSibling(Spec):
    """Another catalog accelerator built on the same die (same SMs, tensor cores and clocks), differing in
    memory, power cap or packaging: when this one has no published runs of its own, its profile takes the
    sibling's fitted efficiencies as factors on its own spec-derived values (`primus.fidelity.sibling`).
    `source` names the datasheet that says the die is the same."""

    hardware: Name
    source: Text


class ClusterSpec(Spec):
    """A hardware catalog entry: the accelerator plus the node and networks of a typical cluster of it."""

    name: Name
    display_name: Text | None = None
    notes: Text | None = None
    accelerator: AcceleratorSpec
    gpus_per_node: PosInt
    scaleup: ScaleUpSpec
    scaleout: ScaleOutSpec
    reserves: MemoryReserves
    host_link: HostLinkSpec | None = None
    calibration_sibling: CalibrationSibling | None = None
    measured: Bool = False

    @model_validator(mode="after")
    def _domain_fits(self) -> ClusterSpec:
        dom = self.scaleup.domain_size
        if dom % self.gpus_per_node and self.gpus_per_node % dom:
            raise ValueError(
                f"scaleup.domain_size ({dom}) must be a multiple or a divisor of gpus_per_node ({self.gpus_per_node})"
            )
        return self

    @model_validator(mode="after")
    def _memory_left(self) -> ClusterSpec:
        """Capacity is HBM less the runtime context less the allocator's fraction of what remains
        (`primus.memory.ledger.Reserves`): HBM at or below the context, or a fraction of 1 or more,
        leaves no byte (a negative reserve and capacity if read on), so such a device is refused."""
        hbm, context = self.accelerator.hbm_bytes, int(self.reserves.runtime_context_bytes.value)
        if hbm <= context:
            raise ValueError(f"accelerator.hbm_bytes ({hbm:,}) must be above reserves.runtime_context_bytes "
                             f"({context:,} B): the device would have no memory left for the model")
        fraction = float(self.reserves.allocator_fragmentation.value)
        if fraction >= 1:
            raise ValueError(f"reserves.allocator_fragmentation ({fraction:g}) must be a fraction below 1 of the "
                             "memory above the runtime context: the allocator would reserve all of it")
        return self

    @property
    def hbm_bytes(self) -> int:
        return self.accelerator.hbm_bytes
