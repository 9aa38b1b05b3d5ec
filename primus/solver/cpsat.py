"""The CP-SAT model of one job: axes, derived sizes, the byte ledger to the byte, and the rules.

Every ledger piece is a table over the few axes it depends on (`tables`), linked with
AddAllowedAssignments; products of counts and units use AddMultiplicationEquality; sharded
parameters use AddDivisionEquality for ceil(P / D). `stage_bytes` mirrors `ledger.combine` line for
line, and a property test checks the two agree. Rules are compiled to fully reified literals and
enforced under assumption literals, so an infeasible question yields a core of rule ids and pins.
Solves are deterministic: one worker, a fixed seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from primus.memory.ledger import BREAKDOWN_KEYS
from primus.parallel import RECOMPUTES, SHARDINGS, Layout
from primus.rules.cpsat import compile_bool
from primus.rules.expr import Domain
from primus.solver.ruleset import RuleSet
from primus.solver.space import Space
from primus.solver.tables import ACT_FIELDS, PARAM_FIELDS, SHAPE_FIELDS, LedgerTables

EXPERT_PARAM_FIELDS = ("moe_layer_expert", "mtp_expert", "gemm_moe_expert", "gemm_mtp_expert")
DENSE_PARAM_FIELDS = tuple(f for f in PARAM_FIELDS if f not in EXPERT_PARAM_FIELDS and f != "max_layer")
PIN_AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")
BIG = 2**50


@dataclass
class Built:
    """A built model with handles to its variables, rule literals and pin literals."""

    model: cp_model.CpModel
    axes: dict[str, Any]
    memory: dict[str, Any]
    slot_bytes: list[Any]
    slot_parts: list[dict[str, Any]]
    rule_lits: dict[str, Any] = field(default_factory=dict)
    soft_lits: dict[str, tuple[Any, int]] = field(default_factory=dict)
    pin_lits: dict[str, Any] = field(default_factory=dict)

    def layout(self, solver: cp_model.CpSolver) -> Layout:
        a = self.axes
        v = solver.Value
        rec = next(r for r in RECOMPUTES if solver.BooleanValue(a[f"recompute_{r}"]))
        sh = next(s for s in SHARDINGS if solver.BooleanValue(a[f"sharding_{s}"]))
        n = v(a["recompute_num_layers"])
        vp = v(a["vp"])
        return Layout(tp=v(a["tp"]), pp=v(a["pp"]), vp=vp, cp=v(a["cp"]), ep=v(a["ep"]), etp=v(a["etp"]),
                      dp=v(a["dp"]), mbs=v(a["mbs"]), sp=solver.BooleanValue(a["sp"]), recompute=rec, sharding=sh,
                      recompute_num_layers=n if n > 0 else None, schedule="interleaved" if vp > 1 else "1f1b")


def new_solver(time_limit_s: float = 30.0) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    return solver


class ModelBuilder:
    """Builds the CP-SAT model for a job and a rule set."""

    def __init__(self, tables: LedgerTables, ruleset: RuleSet, pins: dict[str, Any]) -> None:
        self.tables = tables
        self.space: Space = tables.space
        self.ruleset = ruleset
        self.pins = pins
        self.m = cp_model.CpModel()

    # ---------------------------------------------------------------- helpers

    def _var(self, values: list[int], name: str) -> cp_model.IntVar:
        return self.m.new_int_var_from_domain(cp_model.Domain.from_values(sorted(set(values))), name)

    def _int(self, lo: int, hi: int, name: str) -> cp_model.IntVar:
        return self.m.new_int_var(lo, hi, name)

    def _prod(self, a: Any, b: Any, name: str) -> Any:
        if isinstance(a, int) or isinstance(b, int):
            return a * b
        lo_a, hi_a = _bounds(a)
        lo_b, hi_b = _bounds(b)
        corners = [lo_a * lo_b, lo_a * hi_b, hi_a * lo_b, hi_a * hi_b]
        target = self._int(min(corners), max(corners), name)
        self.m.add_multiplication_equality(target, [a, b])
        return target

    def _sum(self, terms: list[Any], name: str) -> Any:
        """An IntVar equal to a sum of IntVars/ints (so it can enter a product)."""
        lo = sum(_bounds(t)[0] for t in terms)
        hi = sum(_bounds(t)[1] for t in terms)
        target = self._int(lo, hi, name)
        self.m.add(target == sum(terms))
        return target

    def _ceil_div(self, num: Any, den: Any, hi: int, name: str) -> Any:
        target = self._int(0, hi, name)
        self.m.add_division_equality(target, num + den - 1, den)
        return target

    def _table(self, key_vars: list[Any], rows: list[tuple[int, ...]], columns: list[str], prefix: str
               ) -> dict[str, Any]:
        """Allowed (key..., value...) rows; returns one IntVar per value column. (A row-index variable
        with one element constraint per column was measured slower.)"""
        n_keys = len(key_vars)
        out: dict[str, Any] = {}
        for j, col in enumerate(columns):
            values = [r[n_keys + j] for r in rows] or [0]
            out[col] = self._var(values, f"{prefix}.{col}")
        self.m.add_allowed_assignments([*key_vars, *out.values()], rows)
        return out

    # ---------------------------------------------------------------- build

    def build(self) -> Built:
        s = self.space
        m = self.m
        world = s.world
        gbs = self.tables.job.spec.global_batch_size
        ax: dict[str, Any] = {}
        for name, values in (("tp", s.tp_values), ("pp", s.pp_values), ("vp", s.vp_values), ("cp", s.cp_values),
                             ("ep", s.ep_values), ("etp", s.etp_values), ("mbs", s.mbs_values)):
            ax[name] = self._var(values, name)
        ax["dp"] = self._int(1, world, "dp")
        ax["edp"] = self._int(1, world, "edp")
        ax["num_microbatches"] = self._var(s.microbatch_values, "num_microbatches")
        tc = self._prod(ax["tp"], ax["cp"], "tp*cp")
        tcp = self._prod(tc, ax["pp"], "tp*cp*pp")
        m.add_multiplication_equality(world, [tcp, ax["dp"]])
        pe = self._prod(ax["pp"], ax["ep"], "pp*ep")
        pee = self._prod(pe, ax["etp"], "pp*ep*etp")
        m.add_multiplication_equality(world, [pee, ax["edp"]])
        md = self._prod(ax["mbs"], ax["dp"], "mbs*dp")
        m.add_multiplication_equality(gbs, [md, ax["num_microbatches"]])
        ax["sp"] = m.new_bool_var("sp")
        tp_is_1 = m.new_bool_var("tp==1")
        m.add(ax["tp"] == 1).only_enforce_if(tp_is_1)
        m.add(ax["tp"] != 1).only_enforce_if(~tp_is_1)
        m.add_implication(tp_is_1, ~ax["sp"])  # SP at TP 1 means nothing (normalised off)
        rec_lits = [m.new_bool_var(f"recompute_{r}") for r in RECOMPUTES]
        m.add_exactly_one(rec_lits)
        for r, lit in zip(RECOMPUTES, rec_lits, strict=True):
            ax[f"recompute_{r}"] = lit
        ax["recompute"] = self._int(0, len(RECOMPUTES) - 1, "recompute")
        m.add(ax["recompute"] == sum(i * lit for i, lit in enumerate(rec_lits)))
        sh_lits = [m.new_bool_var(f"sharding_{x}") for x in SHARDINGS]
        m.add_exactly_one(sh_lits)
        for x, lit in zip(SHARDINGS, sh_lits, strict=True):
            ax[f"sharding_{x}"] = lit
        n_values = s.recompute_layer_values
        searched = "recompute_num_layers" in self.tables.job.spec.free
        if n_values is None:
            ax["recompute_num_layers"] = 0
        elif searched:
            ax["recompute_num_layers"] = self._var([0, *n_values], "recompute_num_layers")
            is_full = ax["recompute_full"]
            m.add(ax["recompute_num_layers"] == 0).only_enforce_if(~is_full)
            m.add(ax["recompute_num_layers"] >= 1).only_enforce_if(is_full)
        else:
            ax["recompute_num_layers"] = self._var([0, n_values[0]], "recompute_num_layers")
            m.add(ax["recompute_num_layers"] == n_values[0]).only_enforce_if(ax["recompute_full"])
            m.add(ax["recompute_num_layers"] == 0).only_enforce_if(~ax["recompute_full"])
        built = Built(m, ax, {}, [], [])
        self._memory(built)
        self._rules(built)
        self._pins(built)
        return built

    def _pipeline_rows(self) -> tuple[list[tuple[int, ...]], int]:
        s = self.space
        t = self.tables
        world = s.world
        gbs = t.job.spec.global_batch_size
        reachable: dict[int, set[int]] = {}
        for pp in s.pp_values:
            ms: set[int] = set()
            for tp in s.tp_values:
                for cp in s.cp_values:
                    if world % (tp * cp * pp):
                        continue
                    dp = world // (tp * cp * pp)
                    for mbs in s.mbs_values:
                        if gbs % (mbs * dp) == 0:
                            ms.add(gbs // (mbs * dp))
            reachable[pp] = ms
        rows: list[tuple[int, ...]] = []
        for (pp, vp), ok in sorted(s.split_pairs.items()):
            n_values = s.recompute_layer_values_at(pp, vp)
            for mb in sorted(reachable.get(pp, ())):
                for full in (0, 1):
                    for n in (n_values if (full and n_values) else [0]):
                        shapes = t.shapes(pp, vp, mb, "full" if full else "none", n if n > 0 else None)
                        values = [getattr(sh, f) for sh in shapes for f in SHAPE_FIELDS]
                        rows.append((pp, vp, mb, full, n, int(ok), *values))
        return rows, t.num_slots

    def _memory(self, built: Built) -> None:
        t = self.tables
        s = self.space
        m = self.m
        ax = built.axes
        full_int = self._int(0, 1, "full")
        m.add(full_int == 1).only_enforce_if(ax["recompute_full"])
        m.add(full_int == 0).only_enforce_if(~ax["recompute_full"])
        n_var = ax["recompute_num_layers"]
        n_key = n_var if not isinstance(n_var, int) else m.new_constant(n_var)
        rows, num_slots = self._pipeline_rows()
        cols = ["split_ok"] + [f"s{i}.{f}" for i in range(num_slots) for f in SHAPE_FIELDS]
        shape = self._table([ax["pp"], ax["vp"], ax["num_microbatches"], full_int, n_key], rows, cols, "pipe")
        split_ok = m.new_bool_var("pipeline_split_ok")
        m.add(shape["split_ok"] == 1).only_enforce_if(split_ok)
        m.add(shape["split_ok"] == 0).only_enforce_if(~split_ok)
        ax["pipeline_split_ok"] = split_ok
        # parameter units: dense part by TP, expert part by (EP, ETP)
        d_rows = []
        for tp in s.tp_values:
            units = t.params(tp, 1, 1)
            d_rows.append((tp, *[getattr(units, f) for f in DENSE_PARAM_FIELDS]))
        pdense = self._table([ax["tp"]], d_rows, list(DENSE_PARAM_FIELDS), "pu")
        e_rows = []
        for ep in s.ep_values:
            for etp in s.etp_values:
                units = t.params(1, ep, etp)
                e_rows.append((ep, etp, *[getattr(units, f) for f in EXPERT_PARAM_FIELDS]))
        pexp = self._table([ax["ep"], ax["etp"]], e_rows, list(EXPERT_PARAM_FIELDS), "pu")
        pu = {**pdense, **pexp}
        moe_layer = self._sum([pu["moe_layer_dense"], pu["moe_layer_expert"]], "pu.moe_layer")
        max_layer = self._int(0, BIG, "pu.max_layer")
        m.add_max_equality(max_layer, [pu["dense_layer"], moe_layer])
        pu["max_layer"] = max_layer
        # activation units
        a_rows = []
        world = s.world
        for tp in s.tp_values:
            for cp in s.cp_values:
                if world % (tp * cp):
                    continue
                for sp in ((False,) if tp == 1 else (False, True)):
                    for mbs in s.mbs_values:
                        for etp in s.etp_values:
                            for ri, r in enumerate(RECOMPUTES):
                                au = t.acts(tp, cp, sp, mbs, etp, r)
                                a_rows.append((tp, cp, int(sp), mbs, etp, ri, *[getattr(au, f) for f in ACT_FIELDS]))
        au_vars = self._table([ax["tp"], ax["cp"], ax["sp"], ax["mbs"], ax["etp"], ax["recompute"]], a_rows,
                              list(ACT_FIELDS), "au")
        comm = self._communicators(built)
        for i in range(num_slots):
            sh = {f: shape[f"s{i}.{f}"] for f in SHAPE_FIELDS}
            total, parts = self._stage_bytes(built, sh, pu, au_vars, comm, f"s{i}")
            built.slot_bytes.append(total)
            built.slot_parts.append(parts)
        mem = built.memory
        mem["peak_bytes"] = self._int(0, BIG, "peak_bytes")
        m.add_max_equality(mem["peak_bytes"], built.slot_bytes)
        mem["first_stage_bytes"] = built.slot_bytes[0]
        mem["last_stage_bytes"] = built.slot_bytes[-1]  # the last slot is the last stage (`slot_stages`)
        for key in BREAKDOWN_KEYS:
            v = self._int(0, BIG, f"{key}_bytes")
            m.add_max_equality(v, [p[key] for p in built.slot_parts])
            mem[f"{key}_bytes"] = v

    def _communicators(self, built: Built) -> Any:
        m = self.m
        ax = built.axes
        figure = self.tables.comm_figure()
        dpcp = self._prod(ax["dp"], ax["cp"], "dp*cp")
        terms = [(ax["tp"], "tp"), (ax["cp"], "cp"), (dpcp, "dpcp"), (ax["pp"], "pp")]
        if self.tables.model.is_moe:
            terms += [(ax["ep"], "ep"), (ax["etp"], "etp"), (ax["edp"], "edp")]
        lits = []
        for var, name in terms:
            b = m.new_bool_var(f"{name}>1")
            m.add(var >= 2).only_enforce_if(b)
            m.add(var <= 1).only_enforce_if(~b)
            lits.append(b)
        return figure * sum(lits)

    def _stage_bytes(self, built: Built, sh: dict[str, Any], pu: dict[str, Any], au: dict[str, Any], comm: Any,
                     p: str) -> tuple[Any, dict[str, Any]]:
        """Mirror of `primus.memory.ledger.combine` for one stage slot."""
        m = self.m
        ax = built.axes
        mem = self.tables.memory
        w = mem.widths
        prod = self._prod
        p_dense = (prod(sh["n_dense"], pu["dense_layer"], f"{p}.pd1")
                   + prod(sh["n_moe"], pu["moe_layer_dense"], f"{p}.pd2")
                   + prod(sh["n_mtp"], pu["mtp_dense"], f"{p}.pd3")
                   + prod(sh["embedding"], pu["embedding"], f"{p}.pd4")
                   + prod(sh["embedding_copy"], pu["word_embedding"], f"{p}.pd5")
                   + prod(sh["output"], pu["output"], f"{p}.pd6"))
        p_expert = (prod(sh["n_moe"], pu["moe_layer_expert"], f"{p}.pe1")
                    + prod(sh["n_mtp"], pu["mtp_expert"], f"{p}.pe2"))
        gemm = (prod(sh["n_dense"], pu["gemm_dense_layer"], f"{p}.g1")
                + prod(sh["n_moe"], self._sum([pu["gemm_moe_dense"], pu["gemm_moe_expert"]], f"{p}.gm"), f"{p}.g2")
                + prod(sh["n_mtp"], self._sum([pu["gemm_mtp_dense"], pu["gemm_mtp_expert"]], f"{p}.gt"), f"{p}.g3"))
        dpcp = self._prod(ax["dp"], ax["cp"], f"{p}.dpcp")
        s_dense = self._ceil_div(p_dense, dpcp, BIG, f"{p}.s_dense")
        s_expert = self._ceil_div(p_expert, ax["edp"], BIG, f"{p}.s_expert")
        held = p_dense + p_expert
        shards = s_dense + s_expert
        has_layers = m.new_bool_var(f"{p}.has_layers")
        m.add(sh["n_dense"] + sh["n_moe"] + sh["n_mtp"] >= 1).only_enforce_if(has_layers)
        m.add(sh["n_dense"] + sh["n_moe"] + sh["n_mtp"] == 0).only_enforce_if(~has_layers)
        layer_copy = self._int(0, BIG, f"{p}.layer_copy")
        m.add(layer_copy == pu["max_layer"]).only_enforce_if(has_layers)
        m.add(layer_copy == 0).only_enforce_if(~has_layers)
        cw = mem.numerics.weight_cache
        cache = self._int(0, BIG, f"{p}.cache")
        m.add_division_equality(cache, gemm * cw.numerator + cw.denominator - 1, cw.denominator)
        fsdp = ax["sharding_fsdp"]
        weights = self._int(0, BIG, f"{p}.weights")
        m.add(weights == w.fsdp_param * shards + 2 * w.weight * layer_copy).only_enforce_if(fsdp)
        m.add(weights == w.weight * held - (w.weight - w.gemm_weight_copy) * gemm + cache).only_enforce_if(~fsdp)
        grads = self._int(0, BIG, f"{p}.gradients")
        m.add(grads == w.grad * shards + w.weight * layer_copy).only_enforce_if(fsdp)
        m.add(grads == w.grad * shards).only_enforce_if(ax["sharding_zero2"])
        m.add(grads == w.grad * held).only_enforce_if(ax["sharding_none"])
        m.add(grads == w.grad * held).only_enforce_if(ax["sharding_dist_opt"])
        opt = self._int(0, BIG, f"{p}.optimizer")
        m.add(opt == w.fsdp_optimizer * shards).only_enforce_if(fsdp)
        m.add(opt == w.optimizer * held).only_enforce_if(ax["sharding_none"])
        m.add(opt == w.optimizer * shards).only_enforce_if(ax["sharding_dist_opt"])
        m.add(opt == w.optimizer * shards).only_enforce_if(ax["sharding_zero2"])
        work_terms = []
        for count, unit, name in ((sh["n_dense"], au["work_dense"], "wd"), (sh["n_moe"], au["work_moe"], "wm"),
                                  (sh["output"], au["work_loss"], "wl")):
            present = m.new_bool_var(f"{p}.{name}.present")
            m.add(count >= 1).only_enforce_if(present)
            m.add(count == 0).only_enforce_if(~present)
            term = self._int(0, BIG, f"{p}.{name}")
            m.add(term == unit).only_enforce_if(present)
            m.add(term == 0).only_enforce_if(~present)
            work_terms.append(term)
        layer_work = self._int(0, BIG, f"{p}.layer_work")
        m.add_max_equality(layer_work, work_terms[:2])
        # the two backward moments of `primus.memory.ledger.backward_moments`, ties to the layer moment
        loss_all = prod(sh["if_loss"], au["loss"], f"{p}.o1")
        loss_own = prod(sh["output"], au["loss"], f"{p}.o2")
        at_loss = self._int(0, BIG, f"{p}.at_loss")
        m.add(at_loss == loss_all + work_terms[2])
        at_layer = self._int(-BIG, BIG, f"{p}.at_layer")
        m.add(at_layer == loss_all - loss_own + prod(sh["remat_dense"], au["dense_full"], f"{p}.a6")
              + prod(sh["remat_moe"], au["moe_full"], f"{p}.a7") + layer_work
              + prod(sh["reload_dense"], au["dense"], f"{p}.r1") + prod(sh["reload_moe"], au["moe"], f"{p}.r2"))
        layer_side = m.new_bool_var(f"{p}.layer_side")
        m.add(at_layer >= at_loss).only_enforce_if(layer_side)
        m.add(at_layer <= at_loss - 1).only_enforce_if(~layer_side)
        transient = self._int(0, BIG, f"{p}.transient")
        m.add_max_equality(transient, [at_loss, at_layer])
        loss = self._int(0, BIG, f"{p}.loss")
        m.add(loss == loss_all - loss_own).only_enforce_if(layer_side)
        m.add(loss == loss_all).only_enforce_if(~layer_side)
        act = (prod(sh["if_dense"], au["dense"], f"{p}.a1") + prod(sh["if_moe"], au["moe"], f"{p}.a2")
               + prod(sh["if_ckpt"], au["checkpoint"], f"{p}.a3") + prod(sh["if_embedding"], au["embedding"], f"{p}.a4")
               + prod(sh["if_mtp"], au["mtp"], f"{p}.a5") + transient - loss)
        other = loss + comm
        act_v = self._int(0, BIG, f"{p}.activations")
        m.add(act_v == act)
        if w.step_grad_copy:
            # the optimizer step's moment (`ledger.combine`): fp32 copies of 16-bit main gradients beyond
            # what the backward moment holds (with FSDP, its gathered layer copies and gradients too)
            copies = self._int(0, BIG, f"{p}.step_copies")
            m.add(copies == w.step_grad_copy * shards).only_enforce_if(fsdp)
            m.add(copies == w.step_grad_copy * held).only_enforce_if(ax["sharding_none"])
            m.add(copies == w.step_grad_copy * shards).only_enforce_if(ax["sharding_dist_opt"])
            m.add(copies == w.step_grad_copy * shards).only_enforce_if(ax["sharding_zero2"])
            gathered = self._int(0, BIG, f"{p}.step_gathered")  # FSDP's layer copies and gradients, freed too
            m.add(gathered == 3 * w.weight * layer_copy).only_enforce_if(fsdp)
            m.add(gathered == 0).only_enforce_if(~fsdp)
            step = self._int(0, BIG, f"{p}.step_excess")
            m.add_max_equality(step, [0, copies - act_v - loss - gathered])
            opt_all = self._int(0, BIG, f"{p}.optimizer_with_step")
            m.add(opt_all == opt + step)
            opt = opt_all
        parts = {"weights": weights, "gradients": grads, "optimizer": opt}
        other_v = self._int(0, BIG, f"{p}.other")
        m.add(other_v == other)
        parts["activations"] = act_v
        parts["other"] = other_v
        total = self._int(0, BIG, f"{p}.bytes")
        m.add(total == weights + grads + opt + act_v + other_v)
        return total, parts

    # ---------------------------------------------------------------- rules and pins

    def env(self, built: Built) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.space.facts)
        env.update({k: v for k, v in built.axes.items() if k not in ("recompute",)})
        env.update(built.memory)
        env["schedule_ok"] = True
        return env

    def _rules(self, built: Built) -> None:
        env = self.env(built)
        domains = self.space.name_domains()
        for rule, expr in self.ruleset.hard():
            lit = compile_bool(expr, self.m, env, domains)
            a = self.m.new_bool_var(f"rule:{rule.id}")
            self.m.add_implication(a, lit)
            built.rule_lits[rule.id] = a
        for rule, expr in self.ruleset.soft():
            lit = compile_bool(expr, self.m, env, domains)
            built.soft_lits[rule.id] = (lit, rule.weight)

    def _pins(self, built: Built) -> None:
        m = self.m
        ax = built.axes
        for axis, value in self.pins.items():
            if axis not in PIN_AXES:
                continue
            lit = m.new_bool_var(f"pin:{axis}")
            built.pin_lits[f"pin:{axis}"] = lit
            if axis == "sp":
                # SP pinned on means "on wherever TP > 1" (normalisation, not refusal)
                if value:
                    tp_gt = m.new_bool_var("pin:sp.tp>1")
                    m.add(ax["tp"] >= 2).only_enforce_if(tp_gt)
                    m.add(ax["tp"] <= 1).only_enforce_if(~tp_gt)
                    m.add_bool_or([~lit, ~tp_gt, ax["sp"]])
                else:
                    m.add_implication(lit, ~ax["sp"])
            elif axis == "recompute":
                m.add_implication(lit, ax[f"recompute_{value}"])
            elif axis == "sharding":
                key = "dist_opt" if value == "zero1" else value
                m.add_implication(lit, ax[f"sharding_{key}"])
            elif axis == "etp" and not self.tables.model.is_moe:
                continue
            elif axis == "recompute_num_layers":
                m.add(ax["recompute_num_layers"] == value).only_enforce_if([lit, ax["recompute_full"]])
            else:
                target = ax[axis]
                if value not in _domain_values(target):
                    m.add_bool_or([~lit])  # a pinned value outside the axis' possible values
                else:
                    m.add(target == value).only_enforce_if(lit)


def _domain_values(var: Any) -> list[int]:
    dom = list(var.proto.domain)
    out: list[int] = []
    for lo, hi in zip(dom[::2], dom[1::2], strict=True):
        if hi - lo > 100_000:
            return list(range(lo, lo + 1))
        out.extend(range(lo, hi + 1))
    return out


def _bounds(x: Any) -> tuple[int, int]:
    if isinstance(x, int):
        return x, x
    dom = list(x.proto.domain)  # the proto's repeated field does not support negative indexing
    return dom[0], dom[-1]


def domain_of(values: list[int]) -> Domain:
    return Domain(min(values), max(values))
