"""Load and resolve a job file into the model, the cluster and the pins, with every default applied."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus.catalog.hardware import resolve_hardware
from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.specs.base import parse_spec
from primus.specs.hardware import ClusterSpec
from primus.specs.job import JobSpec
from primus.specs.model import ModelSpec
from primus.yamlio import load_mapping


@dataclass(frozen=True)
class Job:
    """A validated job: the spec as written plus what its references resolve to."""

    spec: JobSpec
    model: ModelSpec
    cluster: ClusterSpec
    where: str
    base_dir: Path | None = field(default=None, compare=False)

    @property
    def num_gpus(self) -> int:
        if self.spec.gpus is not None:
            return self.spec.gpus
        assert self.spec.nodes is not None
        return self.spec.nodes * self.cluster.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.cluster.gpus_per_node)

    def with_spec(self, **updates: Any) -> Job:
        """A copy with top-level job fields replaced (re-validated)."""
        data = self.spec.model_dump()
        data.update(updates)
        spec = parse_spec(JobSpec, data, self.where)
        return Job(spec, self.model, self.cluster, self.where, self.base_dir)


def job_from_mapping(data: Mapping[str, Any], where: str, base_dir: Path | None = None) -> Job:
    spec = parse_spec(JobSpec, data, where)
    model = resolve_model(spec.model, where, "model", base_dir)
    cluster = resolve_hardware(spec.hardware, where, "hardware", base_dir)
    job = Job(spec, model, cluster, where, base_dir)
    if spec.gpus is not None and spec.gpus % cluster.gpus_per_node and spec.gpus > cluster.gpus_per_node:
        raise InputError(where, "gpus",
                         f"{spec.gpus} GPUs is not a whole number of {cluster.gpus_per_node}-GPU nodes")
    return job


def load_job(path: str | Path) -> Job:
    p = Path(path)
    data = load_mapping(p)
    return job_from_mapping(data, str(p), p.parent)
