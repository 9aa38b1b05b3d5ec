"""Enumerate every legal layout at once with numpy: the fast path behind `primus enumerate`.

Candidates are built axis by axis (TP×CP×PP → VP → EP×ETP → MBS → SP → recompute → sharding) and
each rule is applied as soon as every name it reads is bound (the rule structure), so illegal partial
layouts are dropped before they multiply. Memory comes last: the ledger's tables are gathered per
distinct key and combined with the ledger's own `combine`, then the memory rules filter. The same rules
compile into the CP-SAT model; tests check that both engines accept exactly the same layouts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from primus.memory.ledger import BREAKDOWN_KEYS, combine, communicators
from primus.memory.shapes import StageShape
from primus.memory.units import ActUnits, ParamUnits
from primus.parallel import RECOMPUTES, SHARDINGS, Layout
from primus.rules.expr import names
from primus.rules.vector import evaluate_vector
from primus.solver.pins import PIN_AXES, pin_columns, pin_mask
from primus.solver.ruleset import RuleSet
from primus.solver.space import MEMORY_DOCS
from primus.solver.tables import ACT_FIELDS, PARAM_FIELDS, SHAPE_FIELDS, Gathered, LedgerTables, gather

AXIS_ORDER = ("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")


@dataclass
class Candidates:
    """Columns of the surviving layouts (axes, derived sizes and, once computed, memory)."""

    cols: dict[str, np.ndarray]

    @property
    def n(self) -> int:
        return len(next(iter(self.cols.values()))) if self.cols else 0

    def take(self, mask_or_index: np.ndarray) -> Candidates:
        return Candidates({k: v[mask_or_index] for k, v in self.cols.items()})

    def layout(self, i: int) -> Layout:
        c = self.cols
        n = c["recompute_num_layers"].item(i)  # .item: a Python scalar without a numpy one first
        vp = c["vp"].item(i)
        return Layout(
            tp=int(c["tp"].item(i)), pp=int(c["pp"].item(i)), vp=int(vp), cp=int(c["cp"].item(i)),
            ep=int(c["ep"].item(i)), etp=int(c["etp"].item(i)), dp=int(c["dp"].item(i)), mbs=int(c["mbs"].item(i)),
            sp=bool(c["sp"].item(i)), recompute=RECOMPUTES[c["recompute"].item(i)],
            sharding=SHARDINGS[c["sharding"].item(i)], recompute_num_layers=int(n) if n > 0 else None,
            schedule="interleaved" if vp > 1 else "1f1b",
        )

    def parallel_dicts(self) -> list[dict[str, Any]]:
        """Complete `parallel` mappings for every row (fast: columns converted to lists once)."""
        c = self.cols
        cols = {k: c[k].tolist() for k in ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute",
                                           "sharding", "recompute_num_layers")}
        out = []
        for i in range(self.n):
            row = {k: cols[k][i] for k in ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs")}
            row["sp"] = bool(cols["sp"][i])
            row["recompute"] = RECOMPUTES[cols["recompute"][i]]
            row["sharding"] = SHARDINGS[cols["sharding"][i]]
            if cols["recompute_num_layers"][i]:
                row["recompute_num_layers"] = cols["recompute_num_layers"][i]
            out.append(row)
        return out

    def canonical_order(self) -> np.ndarray:
        keys = [self.cols[k] for k in reversed(AXIS_ORDER)]
        return np.lexsort(keys)


def _product(cands: Candidates, name_values: dict[str, np.ndarray]) -> Candidates:
    """Cartesian product of the rows with a small table of new columns (all same length)."""
    k = len(next(iter(name_values.values())))
    n = cands.n
    out = {key: np.repeat(v, k) for key, v in cands.cols.items()}
    for key, v in name_values.items():
        out[key] = np.tile(v, n)
    return Candidates(out)


class Enumerator:
    """Staged vectorised enumeration of one job's legal layouts under a rule set."""

    def __init__(self, tables: LedgerTables, ruleset: RuleSet, pins: dict[str, Any]) -> None:
        self.tables = tables
        self.space = tables.space
        self.job = tables.job
        self.ruleset = ruleset
        self.pins = pins
        self.facts = {k: (np.bool_(v) if isinstance(v, bool) else np.int64(v)) for k, v in self.space.facts.items()}
        self.pending = [(r, e, names(e)) for r, e in ruleset.hard()]
        self.rejected: dict[str, int] = {}
        self.pending_pins = [a for a in PIN_AXES if a in pins]

    # ---- rule application ----

    def _apply_rules(self, cands: Candidates, final: bool = False) -> Candidates:
        bound = set(cands.cols) | set(self.facts)
        keep: list[Any] = []
        mask = np.ones(cands.n, dtype=bool)
        env = {**self.facts, **cands.cols}
        for rule, expr, used in self.pending:
            if used <= bound:
                ok = evaluate_vector(expr, env, cands.n)
                self.rejected[rule.id] = self.rejected.get(rule.id, 0) + int(np.count_nonzero(mask & ~ok))
                mask &= ok
            elif final:
                raise AssertionError(f"rule {rule.id} reads unbound names {sorted(used - bound)}")
            else:
                keep.append((rule, expr, used))
        self.pending = keep
        return cands.take(mask) if not mask.all() else cands

    def _pins(self, cands: Candidates) -> Candidates:
        """Apply every pin whose columns now exist (once each)."""
        mask = np.ones(cands.n, dtype=bool)
        for axis in list(self.pending_pins):
            if all(col in cands.cols for col in pin_columns(axis)):
                mask &= pin_mask(cands.cols, axis, self.pins[axis], self.job.model.is_moe, cands.n)
                self.pending_pins.remove(axis)
        return cands.take(mask) if not mask.all() else cands

    # ---- stages ----

    def run(self, with_memory: bool = True) -> Candidates:
        return self._grow(self._seeds(), with_memory)

    def first(self, with_memory: bool = True) -> Candidates:
        """Some legal layouts if there are any, else none: an existence test that stops early. The
        (TP, CP, PP) seeds are grown in batches of 1, 2, 4, ... (most model parallelism first, the
        likeliest to fit), so a feasible question is answered from a few seeds and an infeasible one
        costs at most about twice a full run. (`rejected` then counts only the batches grown.)"""
        seeds = self._seeds()
        c = seeds.cols
        order = np.argsort(-(c["tp"] * c["cp"] * c["pp"]), kind="stable")
        start, size = 0, 1
        out = seeds
        while start < seeds.n:
            fork = object.__new__(Enumerator)
            fork.__dict__.update(self.__dict__, pending=list(self.pending), pending_pins=list(self.pending_pins))
            out = fork._grow(seeds.take(order[start:start + size]), with_memory)
            if out.n:
                return out
            start, size = start + size, 2 * size
        return out if seeds.n else self._grow(seeds, with_memory)

    def _seeds(self) -> Candidates:
        """(TP, CP, PP, DP) that divide the world, with the pins and rules that read only them applied."""
        s = self.space
        world = s.world
        tp, cp, pp = (a.reshape(-1) for a in np.meshgrid(s.tp_values, s.cp_values, s.pp_values, indexing="ij"))
        ok = world % (tp * cp * pp) == 0
        cands = Candidates({"tp": tp[ok], "cp": cp[ok], "pp": pp[ok]})
        cands.cols["dp"] = world // (cands.cols["tp"] * cands.cols["cp"] * cands.cols["pp"])
        cands = self._pins(cands)
        return self._apply_rules(cands)

    def _grow(self, cands: Candidates, with_memory: bool) -> Candidates:
        """The remaining stages from (TP, CP, PP) seeds to complete layouts."""
        cands = self._stage_vp(cands)
        cands = self._stage_experts(cands)
        cands = self._stage_mbs(cands)
        cands = self._stage_flags(cands)
        if with_memory:
            cands = self._stage_memory(cands)
            cands = self._apply_rules(cands, final=True)
        return cands

    def _stage_vp(self, cands: Candidates) -> Candidates:
        pairs = self.space.split_pairs
        parts = []
        for pp in np.unique(cands.cols["pp"]):
            sub = cands.take(cands.cols["pp"] == pp)
            vps = np.array([vp for (p, vp) in pairs if p == pp], dtype=np.int64)
            oks = np.array([pairs[(int(pp), int(vp))] for vp in vps], dtype=bool)
            if len(vps) == 0:
                continue
            parts.append(_product(sub, {"vp": vps, "pipeline_split_ok": oks}))
        cands = _concat(parts, cands, {"vp": np.int64, "pipeline_split_ok": bool})
        return self._apply_rules(self._pins(cands))

    def _stage_experts(self, cands: Candidates) -> Candidates:
        ep, etp = (a.reshape(-1) for a in np.meshgrid(self.space.ep_values, self.space.etp_values, indexing="ij"))
        cands = _product(cands, {"ep": ep, "etp": etp})
        world = self.space.world
        denom = cands.cols["pp"] * cands.cols["ep"] * cands.cols["etp"]
        cands = cands.take(world % denom == 0)
        cands.cols["edp"] = world // (cands.cols["pp"] * cands.cols["ep"] * cands.cols["etp"])
        return self._apply_rules(self._pins(cands))

    def _stage_mbs(self, cands: Candidates) -> Candidates:
        gbs = self.job.spec.global_batch_size
        cands = _product(cands, {"mbs": np.array(self.space.mbs_values, dtype=np.int64)})
        per_step = cands.cols["mbs"] * cands.cols["dp"]
        cands = cands.take(gbs % per_step == 0)
        cands.cols["num_microbatches"] = gbs // (cands.cols["mbs"] * cands.cols["dp"])
        return self._apply_rules(self._pins(cands))

    def _stage_flags(self, cands: Candidates) -> Candidates:
        cands = _product(cands, {"sp": np.array([False, True])})
        cands = cands.take(~(cands.cols["sp"] & (cands.cols["tp"] == 1)))
        cands = self._apply_rules(self._pins(cands))
        n_values = self.space.recompute_layer_values
        rows: dict[str, list[int]] = {"recompute": [], "recompute_num_layers": []}
        for i, r in enumerate(RECOMPUTES):
            for n in (n_values if (r == "full" and n_values) else [0]):
                rows["recompute"].append(i)
                rows["recompute_num_layers"].append(n)
        cands = _product(cands, {k: np.array(v, dtype=np.int64) for k, v in rows.items()})
        if n_values and "recompute_num_layers" in self.job.spec.free:  # as Space.recompute_layer_values_at
            # one limit per distinct (PP, VP), spread to the rows by index: no Python loop over rows
            pairs, inverse = np.unique(np.stack([cands.cols["pp"], cands.cols["vp"]], axis=1), axis=0,
                                       return_inverse=True)
            top = np.array([max(self.space.recompute_layer_values_at(int(p), int(v)) or [0]) for p, v in pairs],
                           dtype=np.int64)
            cands = cands.take(cands.cols["recompute_num_layers"] <= top[inverse.reshape(-1)])
        for i, r in enumerate(RECOMPUTES):
            cands.cols[f"recompute_{r}"] = cands.cols["recompute"] == i
        cands = self._apply_rules(self._pins(cands))
        cands = _product(cands, {"sharding": np.arange(len(SHARDINGS), dtype=np.int64)})
        for i, sh in enumerate(SHARDINGS):
            cands.cols[f"sharding_{sh}"] = cands.cols["sharding"] == i
        return self._apply_rules(self._pins(cands))

    def _stage_memory(self, cands: Candidates) -> Candidates:
        add_memory_columns(self.tables, cands)
        return cands


def _concat(parts: list[Candidates], like: Candidates, new: dict[str, Any]) -> Candidates:
    if not parts:
        cols = {k: v[:0] for k, v in like.cols.items()}
        for k, dt in new.items():
            cols[k] = np.zeros(0, dtype=dt)
        return Candidates(cols)
    return Candidates({k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols})


def _view(cls: type, names_: tuple[str, ...], table: Gathered, offset: int = 0) -> Any:
    """A dataclass whose fields are contiguous per-candidate columns."""
    return cls(**{name: table.column(offset + i) for i, name in enumerate(names_)})


#: The columns a layout's bytes depend on besides its sharding (`add_memory_columns`): the pipeline
#: shape, the parameter and activation units, the sharding divisors and the communicator count.
MEMORY_KEY_COLUMNS = ("pp", "vp", "num_microbatches", "recompute_num_layers", "recompute", "tp", "ep", "etp",
                      "cp", "sp", "mbs", "dp", "edp")


def _parents(c: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Index of each row's run of consecutive rows that differ at most in sharding (the enumerator's
    last product is over sharding, so a layout's shardings sit side by side). Rows of one run share
    every input of the ledger but the sharding, so each run is evaluated once per sharding."""
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for name in MEMORY_KEY_COLUMNS:
        col = c[name]
        new[1:] |= col[1:] != col[:-1]
    return np.cumsum(new) - 1


def add_memory_columns(tables: LedgerTables, cands: Candidates) -> None:
    """Per-slot ledger bytes for every candidate, then peak/first/last and the breakdown maxima.

    The ledger is evaluated once per run of rows that differ only in sharding (`_parents`) and per
    sharding present, then spread to the rows: the same `combine`, on a quarter of the rows."""
    c = cands.cols
    n = cands.n
    model = tables.model
    if n == 0:
        for name in (*MEMORY_DOCS, "peak_stage"):
            c[name] = np.zeros(0, dtype=np.int64)
        return
    parent = _parents(c, n)
    heads = np.flatnonzero(np.r_[True, parent[1:] != parent[:-1]])
    p = {name: c[name][heads] for name in MEMORY_KEY_COLUMNS}
    full = p["recompute"] == RECOMPUTES.index("full")
    pipe_keys = np.stack([p["pp"], p["vp"], p["num_microbatches"], full.astype(np.int64),
                          p["recompute_num_layers"]], axis=1)
    num_slots = tables.num_slots

    def shape_row(pp: int, vp: int, m: int, is_full: int, nl: int) -> list[int]:
        shapes = tables.shapes(pp, vp, m, "full" if is_full else "none", nl if nl > 0 else None)
        return [getattr(s, f) for s in shapes for f in SHAPE_FIELDS]

    shape_table = gather(pipe_keys, None, shape_row, num_slots * len(SHAPE_FIELDS))
    param_keys = np.stack([p["tp"], p["ep"], p["etp"]], axis=1)
    def param_row(tp: int, ep: int, etp: int) -> list[int]:
        pu_ = tables.params(tp, ep, etp)
        return [getattr(pu_, f) for f in PARAM_FIELDS]

    def act_row(tp: int, cp: int, sp: int, mbs: int, etp: int, r: int) -> list[int]:
        au_ = tables.acts(tp, cp, bool(sp), mbs, etp, RECOMPUTES[r])
        return [getattr(au_, f) for f in ACT_FIELDS]

    pu_table = gather(param_keys, None, param_row, len(PARAM_FIELDS))
    act_keys = np.stack([p["tp"], p["cp"], p["sp"].astype(np.int64), p["mbs"], p["etp"], p["recompute"]], axis=1)
    au_table = gather(act_keys, None, act_row, len(ACT_FIELDS))
    pu = _view(ParamUnits, PARAM_FIELDS, pu_table)
    au = _view(ActUnits, ACT_FIELDS, au_table)
    comm = communicators(p["tp"], p["cp"], p["dp"], p["pp"], p["ep"], p["etp"], p["edp"], model.is_moe) \
        * tables.comm_figure()
    mem = tables.memory
    width = len(SHAPE_FIELDS)
    shapes = [_view(StageShape, SHAPE_FIELDS, shape_table, s * width) for s in range(num_slots)]
    heads_n = len(heads)
    names = ("peak_bytes", "first_stage_bytes", "last_stage_bytes", *(f"{k}_bytes" for k in BREAKDOWN_KEYS),
             "peak_stage")
    # per name, one row of per-head values for each sharding present; every candidate then reads its
    # (sharding, run) entry in one gather
    present = np.unique(c["sharding"]).tolist()
    by_sharding = {name: np.zeros((len(SHARDINGS), heads_n), dtype=np.int64) for name in names}
    for k in present:
        results = [combine(shape, pu, au, mem.widths, mem.numerics, SHARDINGS[k], p["dp"] * p["cp"], p["edp"], comm)
                   for shape in shapes]
        slot_bytes = np.stack([np.broadcast_to(r.bytes, (heads_n,)) for r in results])
        slot = slot_bytes.argmax(axis=0)
        last = slot_bytes[num_slots - 1]  # the last slot is the last stage (`LedgerTables.slot_stages`)
        stage = np.where((slot == num_slots - 1) | (slot >= p["pp"] - 1), p["pp"] - 1, slot)
        per_head = {"peak_bytes": slot_bytes.max(axis=0), "first_stage_bytes": slot_bytes[0],
                    "last_stage_bytes": last, "peak_stage": stage}
        for key in BREAKDOWN_KEYS:
            per_head[f"{key}_bytes"] = np.stack([np.broadcast_to(r.breakdown[key], (heads_n,))
                                                 for r in results]).max(axis=0)
        for name in names:
            by_sharding[name][k] = per_head[name]
    sharding = c["sharding"]
    c.update({name: by_sharding[name][sharding, parent] for name in names})


def field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))
