"""The measured profile: kernel and collective times taken on a real device, in the projection's terms.

A measured profile is a JSON file written by `primus measure` and read by `primus project --profile`.
It never imports torch, so a projection can use a profile on a machine without the measure extra.

Format (`"format": "primus-measured-profile"`, `"version": 1`):

- `device`: what was measured (`kind` cpu | cuda, torch's device `name`, the hardware entry it stands
  for, torch version, measurement dtype, threads per process, processes for collectives);
- `entries`: one per projection call (`GemmCall`, `AttentionCall`, `MemoryCall`, `CollectiveCall` of
  `primus.projection.timer`), keyed by the call's canonical text plus the measurement dtype. Each holds
  the call's fields, the `seconds` the projection uses, and how they were obtained: every torch recipe
  run for it, with its raw samples, the median, the occurrence weight and any linear scale (bounded
  buffers). Calls that stand for several kernels (one `MemoryCall` size shared by a norm backward and a
  residual add) hold the occurrence-weighted mean, so the projection's sum over occurrences is exact;
- `runs`: one record per `primus measure` invocation (job, layout, downscale, budget, what was
  measured, reused and left modelled, and why);
- `memory`: measured activation bytes of reference layers against the ledger.

Entries are keyed by shape + dtype and the device is the file's, so a profile is reused: a second
`primus measure` into the same file measures only calls it does not hold. Loading builds the
projection's own `MeasuredTimer`, which answers the calls held here and defers every other call (inter-
node collectives, the pipeline schedule, formats torch has no kernel for) to the analytic model.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus.errors import InputError
from primus.projection.ops import Attention
from primus.projection.placement import GroupShape
from primus.projection.profile import Profile, load_profile
from primus.projection.timer import (
    AnalyticTimer,
    AttentionCall,
    CollectiveCall,
    GemmCall,
    KernelTimer,
    MeasuredTimer,
    MemoryCall,
)
from primus.specs.hardware import ClusterSpec
from primus.yamlio import bounded_json_int

FORMAT = "primus-measured-profile"
VERSION = 1
MAX_BYTES = 64 * 2**20  # a profile holds a few thousand entries with their samples, not data

Call = GemmCall | AttentionCall | MemoryCall | CollectiveCall


# ---- calls <-> plain data -------------------------------------------------------------------------

def call_to_dict(call: Call) -> dict[str, Any]:
    """The call's fields as JSON-ready data (floats survive a JSON round trip exactly)."""
    if isinstance(call, GemmCall):
        return {"type": "gemm", "fmt": call.fmt, "m": call.m, "n": call.n, "k": call.k, "count": call.count,
                "in_bytes": call.in_bytes, "out_bytes": call.out_bytes}
    if isinstance(call, AttentionCall):
        op = call.op
        return {"type": "attention", "backward": call.backward, "name": op.name, "batch_heads": op.batch_heads,
                "sq": op.sq, "keys": op.keys, "d_qk": op.d_qk, "d_v": op.d_v}
    if isinstance(call, MemoryCall):
        return {"type": "memory", "nbytes": call.nbytes}
    return {"type": "collective", "kind": call.kind, "nbytes": call.nbytes, "size": call.group.size,
            "per_domain": call.group.per_domain, "fanout": call.fanout}


def _num(data: Mapping[str, Any], key: str, where: str, integer: bool = True) -> Any:
    """A non-negative integer (or, with integer=False, number) field; InputError naming it otherwise."""
    value = data.get(key)
    allowed: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed) or float(value) < 0:  # type: ignore[arg-type]
        raise InputError(where, key, f"must be a non-negative {'integer' if integer else 'number'}")
    return value


def call_from_dict(data: Mapping[str, Any], where: str) -> Call:
    """Rebuild a call record; InputError naming the field when the data is malformed."""
    kind = data.get("type")
    if kind == "gemm":
        fmt = data.get("fmt")
        if not isinstance(fmt, str):
            raise InputError(where, "fmt", "must be a GEMM format name")
        return GemmCall(fmt, _num(data, "m", where), _num(data, "n", where), _num(data, "k", where),
                        _num(data, "count", where), _num(data, "in_bytes", where, integer=False),
                        _num(data, "out_bytes", where, integer=False))
    if kind == "attention":
        name = data.get("name")
        if not isinstance(name, str) or not isinstance(data.get("backward"), bool):
            raise InputError(where, "attention", "needs a name and a boolean backward")
        op = Attention(name, _num(data, "batch_heads", where), _num(data, "sq", where),
                       _num(data, "keys", where, integer=False), _num(data, "d_qk", where), _num(data, "d_v", where))
        return AttentionCall(op, bool(data["backward"]))
    if kind == "memory":
        return MemoryCall(_num(data, "nbytes", where, integer=False))
    if kind == "collective":
        ckind = data.get("kind")
        if not isinstance(ckind, str):
            raise InputError(where, "kind", "must be a collective name")
        group = GroupShape(_num(data, "size", where), _num(data, "per_domain", where))
        return CollectiveCall(ckind, _num(data, "nbytes", where, integer=False), group, _num(data, "fanout", where))
    raise InputError(where, "type", f"unknown call type {kind!r}; expected gemm, attention, memory or collective")


def _text(value: Any) -> str:
    """A field as key text; equal numbers give equal text (calls compare 2 == 2.0, so must their keys)."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def call_key(call: Call, dtype: str) -> str:
    """A stable, readable key: the call's fields in a fixed order, and the dtype it was measured in."""
    d = call_to_dict(call)
    body = " ".join(f"{k}={_text(d[k])}" for k in d if k != "type")
    return f"{d['type']} {body} dtype={dtype}"


# ---- the profile ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceInfo:
    """The device a profile was measured on: a profile holds one device's numbers only."""

    kind: str  # cpu | cuda
    name: str  # torch's device name (CPU model string on CPU)
    hardware: str  # the hardware entry it stands for (e.g. h200, cpu)
    torch: str
    dtype: str  # torch dtype the kernels ran in (float32 on CPU, see docs/measurement.md)
    threads: int | None  # torch threads per process on CPU (one "device" = one process, one thread)
    procs: int  # processes the collectives ran across
    colocated: int = 1  # processes that ran every kernel at once (CPU ranks sharing this host), else 1

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "hardware": self.hardware, "torch": self.torch,
                "dtype": self.dtype, "threads": self.threads, "procs": self.procs, "colocated": self.colocated}

    @staticmethod
    def from_json(data: Any, where: str) -> DeviceInfo:
        if not isinstance(data, Mapping):
            raise InputError(where, "device", "must be a mapping")
        for key in ("kind", "name", "hardware", "torch", "dtype"):
            if not isinstance(data.get(key), str) or not data.get(key):
                raise InputError(where, f"device.{key}", "must be a non-empty string")
        threads = data.get("threads")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(where, "device.threads", "must be a positive integer or null")
        counts: dict[str, int] = {}
        for key, default in (("procs", None), ("colocated", 1)):
            value = data.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(where, f"device.{key}", "must be a positive integer")
            counts[key] = value
        return DeviceInfo(data["kind"], data["name"], data["hardware"], data["torch"], data["dtype"], threads,
                          counts["procs"], counts["colocated"])

    def same_device(self, other: DeviceInfo) -> bool:
        """Whether numbers from `other` may be merged with these (processes may differ: they only
        bound which collective groups could be measured; co-location changes every kernel's time)."""
        return (self.kind, self.name, self.hardware, self.dtype, self.threads, self.colocated) == \
            (other.kind, other.name, other.hardware, other.dtype, other.threads, other.colocated)


@dataclass(frozen=True)
class Entry:
    """One measured call: the seconds the projection uses and the raw material behind them."""

    call: Call
    seconds: float
    recipes: tuple[dict[str, Any], ...]
    measured_at: str

    def to_json(self) -> dict[str, Any]:
        return {"call": call_to_dict(self.call), "seconds": self.seconds, "recipes": list(self.recipes),
                "measured_at": self.measured_at}


@dataclass
class MeasuredProfile:
    """A loaded (or growing) measured profile."""

    device: DeviceInfo
    created: str
    entries: dict[str, Entry] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    path: str | None = None

    def table(self) -> dict[object, float]:
        return {e.call: e.seconds for e in self.entries.values()}

    def timer(self, cluster: ClusterSpec, profile: Profile) -> MeasuredTimer:
        """The projection's MeasuredTimer: these entries, the analytic model for every other call."""
        return MeasuredTimer(AnalyticTimer(cluster, profile), self.table())

    def has(self, call: Call) -> bool:
        return call_key(call, self.device.dtype) in self.entries

    def add(self, entry: Entry) -> None:
        self.entries[call_key(entry.call, self.device.dtype)] = entry

    def summary(self) -> dict[str, Any]:
        """What a projection report says about the profile it used."""
        kinds: dict[str, int] = {}
        for e in self.entries.values():
            t = call_to_dict(e.call)["type"]
            kinds[t] = kinds.get(t, 0) + 1
        return {"path": self.path, "device": self.device.to_json(), "created": self.created,
                "entries": len(self.entries), "by_type": kinds,
                "complete": all(r.get("complete", False) for r in self.runs) if self.runs else False}

    def mismatch(self, cluster: ClusterSpec) -> str | None:
        """A warning line when this profile was measured on another device than `cluster`'s, else None."""
        want = base_hardware(cluster.name)
        if self.device.hardware == want:
            return None
        return (f"measured profile is from {self.device.name} ({self.device.hardware}) but the job runs on {want}: "
                "its measured times describe the other device")

    def bar_note(self, cluster: ClusterSpec) -> str:
        """What the error bar's basis says of this profile (`primus.fidelity.errorbars`): the device it
        stands for, and that it is another than the job's when it is."""
        want = base_hardware(cluster.name)
        other = "" if self.device.hardware == want else f", not the job's {want}: its times describe the other device"
        return f"measured on {self.device.kind} as {self.device.hardware}{other}"

    def describe(self) -> str:
        s = self.summary()
        d = self.device
        parts = ", ".join(f"{n} {t}" for t, n in sorted(s["by_type"].items()))
        where = f", kernels timed with {d.colocated} processes at once" if d.colocated > 1 else ""
        return (f"measured profile {self.path or '(in memory)'}: {d.name} as {d.hardware}, torch {d.torch}, "
                f"{d.dtype}{where}, {s['entries']} calls ({parts}); calls it does not hold are modelled")

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "device": self.device.to_json(), "created": self.created,
                "updated": now(), "entries": {k: e.to_json() for k, e in sorted(self.entries.items())},
                "runs": self.runs, "memory": self.memory}

    def save(self, path: str | Path) -> None:
        """Write atomically (a crash mid-write must not destroy measurements already taken)."""
        p = Path(path)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")  # never a user's file
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, p)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.path = str(p)


def now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(str(path), None, "profile file does not exist")
    if path.stat().st_size > MAX_BYTES:
        raise InputError(str(path), None, f"profile is larger than {MAX_BYTES // 2**20} MiB")
    try:
        return json.loads(path.read_text(encoding="utf-8"), parse_int=bounded_json_int)
    except ValueError as exc:  # bad UTF-8, bad JSON, or an integer of more than MAX_INT_DIGITS digits
        raise InputError(str(path), None, f"not a JSON measured profile ({exc})") from None


def is_measured_profile(path: str | Path) -> bool:
    """Whether `path` is a measured profile (JSON with the format marker) rather than a calibration
    profile YAML; cheap enough for `primus project --profile` to decide which one it was given."""
    p = Path(path)
    if not p.is_file() or p.stat().st_size > MAX_BYTES:
        return False
    try:
        with p.open("rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return False
    # a JSON file with a `format` key is read as a measured profile, so a wrong format value is named as
    # such (a calibration profile has no `format` key)
    return head.lstrip().startswith("{") and (FORMAT in head or '"format"' in head)


def load_measured_profile(path: str | Path) -> MeasuredProfile:
    """Read and validate a measured profile; InputError (exit 2) naming the field when malformed."""
    p = Path(path)
    where = str(p)
    data = _read_json(p)
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise InputError(where, "format", f"not a measured profile (expected \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise InputError(where, "version", f"unsupported version {data.get('version')!r}; this primus reads {VERSION}")
    device = DeviceInfo.from_json(data.get("device"), where)
    entries_raw = data.get("entries")
    if not isinstance(entries_raw, Mapping):
        raise InputError(where, "entries", "must be a mapping of call key to entry")
    prof = MeasuredProfile(device, str(data.get("created", "")), path=where)
    for key, raw in entries_raw.items():
        at = f"entries[{key!r}]"
        if not isinstance(raw, Mapping):
            raise InputError(where, at, "must be a mapping")
        call = call_from_dict(raw.get("call") or {}, f"{where}: {at}")
        if key != call_key(call, device.dtype):  # the timer looks calls up by key: a wrong one is never used
            raise InputError(where, at, f"key does not match its call (expected {call_key(call, device.dtype)!r})")
        seconds = raw.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 <= seconds < 1e6:
            raise InputError(where, f"{at}.seconds", "must be a number of seconds in [0, 1e6)")
        recipes = raw.get("recipes") or []
        if not isinstance(recipes, list):
            raise InputError(where, f"{at}.recipes", "must be a list")
        prof.add(Entry(call, float(seconds), tuple(r for r in recipes if isinstance(r, dict)),
                       str(raw.get("measured_at", ""))))
    for name in ("runs", "memory"):
        value = data.get(name, [])
        if not isinstance(value, list):
            raise InputError(where, name, "must be a list")
        setattr(prof, name, [v for v in value if isinstance(v, dict)])
    return prof


# ---- device identity ------------------------------------------------------------------------------

def base_hardware(name: str) -> str:
    """A hardware entry with overrides is '<base>+custom': it is still that device."""
    return name.split("+", 1)[0]


def check_device(prof: MeasuredProfile, cluster: ClusterSpec, allow_mismatch: bool, where: str) -> None:
    """Refuse a profile measured on another device than the job's accelerator (exit 2): its kernel
    times describe another machine. `allow_mismatch` lets it through (the caller says so in its output)."""
    have, want = prof.device.hardware, base_hardware(cluster.name)
    if have != want and not allow_mismatch:
        raise InputError(where, "device",
                         f"measured on {prof.device.name} ({have}) but the job runs on {want}; measure on a "
                         f"{want}, rescale it (primus.measure.measured_profile.rescale), or pass "
                         "--allow-device-mismatch")


def resolve_profile_option(cluster: ClusterSpec, path: str | None, allow_mismatch: bool = False
                           ) -> tuple[Profile, KernelTimer | None, MeasuredProfile | None]:
    """What `primus project --profile PATH` means: a calibration profile YAML (returned as the profile,
    no timer), or a measured profile (the hardware's calibration profile, a MeasuredTimer over it, and
    the measured profile for the report)."""
    if path is None or not is_measured_profile(path):
        return load_profile(cluster, path), None, None
    prof = load_measured_profile(path)
    check_device(prof, cluster, allow_mismatch, path)
    calib = load_profile(cluster)
    return calib, prof.timer(cluster, calib), prof


# ---- moving a profile between devices of one family -----------------------------------------------

def rescale(prof: MeasuredProfile, source: ClusterSpec, target: ClusterSpec, calibration: Profile) -> MeasuredProfile:
    """The profile carried to another hardware entry by the analytic model's ratio, call by call.

    Both analytic timers use the same calibration profile, so the ratio holds datasheet figures only:
    a compute-bound GEMM or attention call keeps its time when the peaks match (H100 SXM and H200: the
    same GH100 die, 132 SMs, clocks and 989 dense bf16 TFLOP/s), an HBM-bound call scales by the
    bandwidth ratio (H200 4.8 TB/s → H100 3.35 TB/s: × 1.43), a GEMM between the two by its roofline,
    and collectives by the link figures. Raw samples are kept; `scaled_from` says what was done.
    """
    src = AnalyticTimer(source, calibration)
    dst = AnalyticTimer(target, calibration)
    device = DeviceInfo(**{**prof.device.__dict__, "hardware": base_hardware(target.name)})
    out = MeasuredProfile(device, prof.created, runs=list(prof.runs), memory=list(prof.memory))
    note = {"from": base_hardware(source.name), "to": base_hardware(target.name),
            "rule": "× analytic(target) / analytic(source), same calibration profile (datasheet ratio)"}
    for entry in prof.entries.values():
        a, b = _analytic(src, entry.call), _analytic(dst, entry.call)
        ratio = b / a if a > 0 else 1.0
        recipes = tuple({**r, "scaled_from": {**note, "ratio": ratio}} for r in entry.recipes)
        out.add(Entry(entry.call, entry.seconds * ratio, recipes, entry.measured_at))
    out.runs.append({"rescaled": note, "date": now()})
    return out


def _analytic(timer: AnalyticTimer, call: Call) -> float:
    if isinstance(call, GemmCall):
        return timer.gemm(call).seconds if timer.supports(call.fmt) else 0.0
    if isinstance(call, AttentionCall):
        return timer.attention(call).seconds
    if isinstance(call, MemoryCall):
        return timer.memory(call).seconds
    return timer.collective(call).seconds
