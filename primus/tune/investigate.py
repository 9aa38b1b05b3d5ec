"""The investigation entered on a stall: ask the LLM (or the hypothesis generator) what to try, check
everything it says with the rule parser and the solver, test it by scoring, and log why each proposal
was adopted or refused. Nothing from the LLM is trusted before the solver has checked it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from primus.errors import InputError
from primus.parallel import Layout, normalise
from primus.rules.expr import RuleError, names
from primus.rules.model import Rule, check_rule
from primus.solver.space import rule_names_doc
from primus.tune.hypotheses import ideas
from primus.tune.llm import LlmClient, LlmReply, LlmSettings, ProposedLayout, ReplyRejected, build_prompt, parse_reply

if TYPE_CHECKING:
    from primus.tune.agent import Tuner

CONVERGENCE_NAMES = frozenset({"seq_len", "global_batch_size"})
SUBSPACE_SCORE_LIMIT = 5_000
# Calls that fail in a row (each after its own retries with backoff) before the LLM part stops: by then
# the endpoint is down or misconfigured, and more calls would only spend the wall-time budget.
FAULTS_TO_STOP = 2


@dataclass
class Investigation:
    settings: LlmSettings
    client: LlmClient | None = None
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    tried_ideas: set[str] = field(default_factory=set)
    llm_off_reason: str | None = None
    faults: int = 0  # calls that failed (endpoint faults, not rejected replies)
    faults_in_a_row: int = 0
    stopped: str | None = None  # why the LLM part stopped early, if it did

    def __post_init__(self) -> None:
        if self.settings.enabled:
            self.client = LlmClient(self.settings)
        else:
            self.llm_off_reason = "no LLM endpoint configured (--llm-base-url): the LLM is off"

    # ---- entry ----

    def run(self, tuner: Tuner) -> bool:
        """One investigation; True when the search should go on: the incumbent improved, or the LLM call
        failed with a fault that may pass (it is asked again at the next stall, within its budgets,
        until FAULTS_TO_STOP calls in a row have failed)."""
        before = tuner.best()
        asked = self.client is not None and self.stopped is None
        reply = self._ask_llm(tuner) if asked else None
        if reply is not None:
            self._apply(tuner, reply, "llm")
        else:
            if self.llm_off_reason:
                tuner.log.event("llm", status="off", reason=self.llm_off_reason)
                self.llm_off_reason = None  # said once
            self._hypotheses(tuner)
        after = tuner.best()
        improved = after is not None and (before is None or after.tokens_per_s_per_gpu > before.tokens_per_s_per_gpu)
        ask_again = (asked and reply is None and self.faults_in_a_row > 0 and self.stopped is None
                     and self.client is not None and self.client.budget_left() is None)
        return improved or ask_again

    # ---- LLM ----

    def _context(self, tuner: Tuner) -> dict[str, Any]:
        from primus.tune.agent import ranked

        space = tuner.space
        cols = space.question.candidates.cols
        top = ranked(list(tuner.scores.values()))[:5]
        spec = tuner.job.spec
        return {
            "job": {"model": tuner.job.model.name, "hardware": tuner.job.cluster.name, "gpus": tuner.job.num_gpus,
                    "seq_len": spec.seq_len, "global_batch_size": spec.global_batch_size,
                    "precision": spec.precision},
            "legal_axes": {a: sorted({int(v) for v in cols[a].tolist()}) for a in
                           ("tp", "pp", "vp", "cp", "ep", "etp", "mbs")},
            "legal_count": space.count,
            "incumbent_and_top": [{**s.to_json(), "breakdown": s.breakdown} for s in top],
            "tried": {"scored": len(tuner.scores), "rejected": sum(1 for e in tuner.log.entries if not e["legal"])},
            "active_rules": [{"id": r.id, "require": r.require} for r in space.question.ruleset.rules],
            "rule_names": rule_names_doc(),
            "feedback_on_previous_replies": self.feedback[-10:],
        }

    def _ask_llm(self, tuner: Tuner) -> LlmReply | None:
        assert self.client is not None
        spent = self.client.budget_left()
        if spent:
            tuner.log.event("llm", status="budget", reason=spent)
            return None
        messages = build_prompt(self._context(tuner))
        outcome = self.client.complete(messages)
        call = self.client.calls
        record: dict[str, Any] = {"call": call, "prompt": messages, "reply": outcome.text,
                                  "error": outcome.error, "attempts": outcome.attempts, "tokens": outcome.tokens}
        if outcome.fault is not None:
            record["fault"] = outcome.fault
        self.transcripts.append(record)
        if outcome.error is not None:
            self.faults += 1
            self.faults_in_a_row += 1
            tuner.log.event("llm", status="failed", call=call, reason=outcome.error,
                            fallback="deterministic hypothesis generator")
            if self.faults_in_a_row >= FAULTS_TO_STOP:
                self.stopped = (f"{self.faults_in_a_row} calls in a row failed (the last: {outcome.error}); the LLM "
                                "is not asked again and the search goes on with the hypothesis generator")
                tuner.log.event("llm", status="stopped", call=call, reason=self.stopped)
            return None
        self.faults_in_a_row = 0
        try:
            reply = parse_reply(outcome.text or "")
        except ReplyRejected as exc:
            tuner.log.event("llm", status="rejected", reason=exc.reason)
            self.feedback.append(f"your previous reply was rejected: {exc.reason}")
            return None
        tuner.log.event("llm", status="accepted", hypotheses=[h.text for h in reply.hypotheses],
                        rules=len(reply.rules), candidates=len(reply.candidates))
        return reply

    # ---- applying proposals ----

    def _apply(self, tuner: Tuner, reply: LlmReply, proposer: str) -> None:
        for proposed in reply.rules:
            verdict = self.test_rule(tuner, proposed.id, proposed.why, proposed.require, proposed.severity,
                                     proposed.weight, proposer)
            self.feedback.append(f"rule {proposed.id!r}: {verdict}")
        for cand in reply.candidates:
            layout = _to_layout(cand, tuner)
            if layout is None:
                tuner.log.event("candidate", proposer=proposer, status="rejected", parallel=cand.model_dump(),
                                reason="world-size: TP x CP x PP does not divide the GPUs")
                self.feedback.append(f"candidate {cand.model_dump()}: rejected, world-size")
                continue
            scored = tuner.consider(layout, proposer)
            if scored is None:
                why = tuner.log.entries[-1].get("violated_rules", [])
                self.feedback.append(f"candidate {layout.as_parallel()}: illegal, breaks {why}")
            else:
                self.feedback.append(f"candidate {layout.as_parallel()}: {scored.tokens_per_s_per_gpu:,.0f} tok/s/GPU")

    def test_rule(self, tuner: Tuner, rule_id: str, why: str, require: str, severity: str, weight: int,
                  proposer: str) -> str:
        """Parse, check and test one proposed rule; adopt it only if it keeps a legal layout at least as
        fast as the incumbent. Returns the verdict (logged and fed back)."""
        rid = f"{proposer}-{rule_id}"[:64].lower()
        try:
            rule = Rule(id=rid, why=why[:300], source=f"proposed by {proposer}", severity=severity,  # type: ignore[arg-type]
                        weight=weight if severity == "soft" else 1, require=require, origin="llm")
            parsed = rule.parsed
            check_rule(rule, tuner.space.question.space.name_domains(), f"{proposer} rule {rule_id}")
        except (InputError, RuleError, ValueError) as exc:
            reason = exc.line() if isinstance(exc, InputError) else str(exc)
            return self._refuse(tuner, rid, require, proposer, f"refused by the rule parser: {reason}")
        if names(parsed) & CONVERGENCE_NAMES:
            return self._refuse(tuner, rid, require, proposer, "touches convergence settings (seq_len, global batch)")
        sub = tuner.space.with_rules([rule.model_copy(update={"severity": "hard"})])
        if sub.count == 0:
            return self._refuse(tuner, rid, require, proposer, "empties the legal set")
        before = tuner.best()
        order = range(sub.count) if sub.count <= SUBSPACE_SCORE_LIMIT else sub.proxy_order()[:SUBSPACE_SCORE_LIMIT]
        best_sub = None
        for i in order:
            s = tuner.consider(sub.layouts[i], f"{proposer}:{rid}")
            if s is not None and (best_sub is None or s.tokens_per_s_per_gpu > best_sub.tokens_per_s_per_gpu):
                best_sub = s
        inc = before.tokens_per_s_per_gpu if before else 0.0
        if best_sub is not None and best_sub.tokens_per_s_per_gpu >= inc and severity == "hard":
            tuner.space = sub
            tuner.adopted_rules.append(rule)
            verdict = (f"adopted: {sub.count:,} legal layouts remain; best {best_sub.tokens_per_s_per_gpu:,.0f} "
                       f"tok/s/GPU vs incumbent {inc:,.0f}")
            tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="adopted", detail=verdict)
            return verdict
        detail = (f"tested on {sub.count:,} legal layouts: best "
                  f"{best_sub.tokens_per_s_per_gpu if best_sub else 0:,.0f} tok/s/GPU vs incumbent {inc:,.0f}")
        tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="not adopted", detail=detail)
        return f"not adopted: {detail}"

    def _refuse(self, tuner: Tuner, rid: str, require: str, proposer: str, reason: str) -> str:
        tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="refused", reason=reason)
        return f"refused: {reason}"

    # ---- without an LLM ----

    def _hypotheses(self, tuner: Tuner) -> None:
        inc = tuner.best()
        if inc is None:
            return
        capacity = tuner.job.cluster.accelerator.hbm_bytes
        for idea in ideas(inc, capacity, tuner.job.cluster.scaleup.domain_size, self.tried_ideas)[:2]:
            self.tried_ideas.add(idea.rule_id)
            tuner.log.event("hypothesis", proposer="hypothesis-generator", text=idea.text,
                            predicted_effect=idea.predicted_effect, rule=idea.require)
            self.test_rule(tuner, idea.rule_id, idea.text, idea.require, "hard", 1, "hypothesis")
            for lay in idea.candidates:
                tuner.consider(lay, "hypothesis")

    def transcript_json(self) -> list[str]:
        return [json.dumps(t, indent=1, sort_keys=True) for t in self.transcripts]


def _to_layout(c: ProposedLayout, tuner: Tuner) -> Layout | None:
    world = tuner.job.num_gpus
    denom = c.tp * c.cp * c.pp
    if world % denom:
        return None
    layout = Layout(tp=c.tp, pp=c.pp, vp=c.vp, cp=c.cp, ep=c.ep, etp=c.etp, dp=world // denom, mbs=c.mbs, sp=c.sp,
                    recompute=c.recompute, sharding=c.sharding)
    return normalise(layout, is_moe=tuner.job.model.is_moe)
