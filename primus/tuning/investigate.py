"""The investigation entered on a stall: ask the LLM (or the hypothesis generator) what to try, check
everything it says with the rule parser and the solver, test it by scoring, and log why each proposal
was adopted or refused. Nothing from the LLM is trusted before the solver has checked it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from primus.errors import InputError
from primus.parallel import Layout, normalise
from primus.rules.expr import RuleError, names
from primus.rules.model import Rule, check_rule
from primus.solver.space import rule_names_doc
from primus.specs.base import exception_reason
from primus.tuning.hypotheses import ideas
from primus.tuning.llm import (
    MAX_REPLY_CHARS,
    LlmClient,
    LlmReply,
    LlmSettings,
    ProposedLayout,
    ReplyRejected,
    build_prompt,
    parse_reply,
)
from primus.tuning.llm_http import excerpt

if TYPE_CHECKING:
    from primus.tuning.agent import Tuner

CONVERGENCE_NAMES = frozenset({"seq_len", "global_batch_size"})
SUBSPACE_SCORE_LIMIT = 5_000
# Refusals listed in each request (the most recent): enough for the model to see what failed and why,
# without the prompt growing with every round.
MAX_REFUSALS_SENT = 20
# Calls that fail in a row (each after its own retries with backoff) before the LLM part stops: by then
# the endpoint is down or misconfigured, and more calls would only spend the wall-time budget.
FAULTS_TO_STOP = 2


@dataclass
class Investigation:
    """The investigations of one search. With an LLM, each asks it in rounds: a round is one call and
    the testing of what it proposed, and the LLM is asked again while the budgets last and the last round
    changed something — adopted a rule, found a better layout, or had a proposal refused for a reason
    not given before (the model can act on it: every request after the first lists what was refused and
    why). A round that changes nothing ends the LLM part; so do FAULTS_TO_STOP failed calls in a row.
    Without the LLM (off, spent, stopped or failing) the deterministic hypothesis generator is used."""

    settings: LlmSettings
    client: LlmClient | None = None
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)  # every refusal so far, sent back each time
    _refusal_keys: set[tuple[str, str]] = field(default_factory=set)
    tried_ideas: set[str] = field(default_factory=set)
    llm_off_reason: str | None = None
    faults: int = 0  # calls that failed (endpoint faults, not rejected replies)
    faults_in_a_row: int = 0
    stopped: str | None = None  # why the LLM part stopped early (faults), if it did
    done: str | None = None  # why the LLM is not asked again (a round changed nothing, or a budget is spent)

    def __post_init__(self) -> None:
        if self.settings.enabled:
            self.client = LlmClient(self.settings)
        else:
            self.llm_off_reason = "no LLM endpoint configured (--llm-base-url): the LLM is off"

    # ---- entry ----

    def run(self, tuner: Tuner) -> bool:
        """One investigation; True when the search should go on: it changed something (a better layout, an
        adopted rule, a new refusal the LLM is told about), or the LLM call failed with a fault that may
        pass (it is asked again at the next stall, within its budgets)."""
        before = tuner.best()
        changed = False
        applied = False
        while self.client is not None and self.stopped is None and self.done is None:
            reply = self._ask_llm(tuner)
            if reply is None:
                if self.faults_in_a_row == 0 and self.done is None:  # rejected: the reason goes back
                    changed = True
                    continue
                break
            applied = True
            if self._round(tuner, reply):
                changed = True
            else:
                self.done = "the last reply changed nothing (no rule adopted, no better layout, no new refusal)"
                tuner.log.event("llm", status="done", call=self.client.calls, reason=self.done)
        if not applied:
            if self.llm_off_reason:
                tuner.log.event("llm", status="off", reason=self.llm_off_reason)
                self.llm_off_reason = None  # said once
            self._hypotheses(tuner)
        after = tuner.best()
        improved = after is not None and (before is None or after.tokens_per_s_per_gpu > before.tokens_per_s_per_gpu)
        ask_again = (self.client is not None and self.faults_in_a_row > 0 and self.stopped is None
                     and self.done is None)
        return improved or changed or ask_again

    def _round(self, tuner: Tuner, reply: LlmReply) -> bool:
        """Test what one reply proposed; True when that changed something."""
        before = tuner.best()
        space, refusals = tuner.space, len(self.refused)
        self._apply(tuner, reply, "llm")
        after = tuner.best()
        better = after is not None and (before is None or after.tokens_per_s_per_gpu > before.tokens_per_s_per_gpu)
        return better or tuner.space is not space or len(self.refused) > refusals

    # ---- LLM ----

    def _context(self, tuner: Tuner) -> dict[str, Any]:
        from primus.tuning.agent import ranked

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
            "refused": self.refused[-MAX_REFUSALS_SENT:],
            "feedback_on_previous_replies": self.feedback[-10:],
        }

    def _ask_llm(self, tuner: Tuner) -> LlmReply | None:
        assert self.client is not None
        spent = self.client.budget_left()
        if spent:
            self.done = spent
            tuner.log.event("llm", status="budget", reason=spent)
            return None
        messages = build_prompt(self._context(tuner))
        outcome = self.client.complete(messages)
        call = self.client.calls
        record: dict[str, Any] = {"call": call, "prompt": messages, "reply": outcome.text,
                                  "error": outcome.error, "attempts": outcome.attempts, "tokens": outcome.tokens}
        if outcome.text is not None and outcome.chars > MAX_REPLY_CHARS:  # kept as an excerpt, its size noted
            record.update(reply=excerpt(outcome.text), reply_chars=outcome.chars)
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
            reply = parse_reply(outcome.text or "", outcome.chars)
        except ReplyRejected as exc:
            tuner.log.event("llm", status="rejected", call=call, reason=exc.reason)
            self.feedback.append(f"your previous reply was rejected: {exc.reason}")
            if not self._note_refusal(f"reply of call {call}", "", f"rejected: {exc.reason}",
                                      key=("reply", exc.reason)):
                self.done = f"the reply was rejected for the same reason as before ({exc.reason})"
                tuner.log.event("llm", status="done", call=call, reason=self.done)
            return None
        tuner.log.event("llm", status="accepted", call=call, hypotheses=[h.text for h in reply.hypotheses],
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
                reason = "world-size: TP x CP x PP does not divide the GPUs"
                tuner.log.event("candidate", proposer=proposer, status="rejected", parallel=cand.model_dump(),
                                reason=reason)
                self.feedback.append(f"candidate {cand.model_dump()}: rejected, world-size")
                self._note_refusal(f"candidate {json.dumps(cand.model_dump(), sort_keys=True)}", "", reason)
                continue
            scored = tuner.consider(layout, proposer)
            if scored is None:
                why = tuner.log.entries[-1].get("violated_rules", [])
                self.feedback.append(f"candidate {layout.as_parallel()}: illegal, breaks {why}")
                self._note_refusal(f"candidate {json.dumps(layout.as_parallel(), sort_keys=True)}", "",
                                   f"illegal: breaks {', '.join(why)}")
            else:
                self.feedback.append(f"candidate {layout.as_parallel()}: {scored.tokens_per_s_per_gpu:,.0f} tok/s/GPU")

    def test_rule(self, tuner: Tuner, rule_id: str, why: str, require: str, severity: str, weight: int,
                  proposer: str) -> str:
        """Parse, check and test one proposed rule; adopt it only if it keeps a legal layout at least as
        fast as the incumbent. Returns the verdict (logged and fed back)."""
        rid = rule_id.lower()
        rid = _bounded_id(rid if rid.startswith(f"{proposer}-") else f"{proposer}-{rid}")  # one prefix, even echoed
        if any(r.id == rid for r in tuner.space.question.ruleset.rules):
            return self._refuse(tuner, rid, require, proposer, f"a rule with id {rid!r} is already in force")
        try:
            rule = Rule(id=rid, why=why[:300], source=f"proposed by {proposer}", severity=severity,  # type: ignore[arg-type]
                        weight=weight if severity == "soft" else 1, require=require, origin="llm")
            parsed = rule.parsed
            check_rule(rule, tuner.space.question.space.name_domains(), f"{proposer} rule {rule_id}")
        except (InputError, RuleError, ValueError) as exc:
            reason = exc.line() if isinstance(exc, InputError) else exception_reason(exc)
            return self._refuse(tuner, rid, require, proposer, f"refused by the rule parser: {reason}")
        if names(parsed) & CONVERGENCE_NAMES:
            return self._refuse(tuner, rid, require, proposer, "touches convergence settings (seq_len, global batch)")
        sub = tuner.space.with_rules([rule.model_copy(update={"severity": "hard"})])
        if sub.count == 0:
            return self._refuse(tuner, rid, require, proposer, "empties the legal set")
        if sub.count == tuner.space.count:  # `tp >= 1`: a rule that removes nothing changes no answer (review 49, L2)
            return self._refuse(tuner, rid, require, proposer,
                                f"removes no legal layout (all {sub.count:,} hold it): nothing to adopt")
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
            detail = (f"{sub.count:,} legal layouts remain; best {best_sub.tokens_per_s_per_gpu:,.0f} "
                      f"tok/s/GPU vs incumbent {inc:,.0f}")
            tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="adopted", detail=detail)
            return f"adopted: {detail}"
        detail = (f"tested on {sub.count:,} legal layouts: best "
                  f"{best_sub.tokens_per_s_per_gpu if best_sub else 0:,.0f} tok/s/GPU vs incumbent {inc:,.0f}")
        tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="not adopted", detail=detail)
        return f"not adopted: {detail}"

    def _refuse(self, tuner: Tuner, rid: str, require: str, proposer: str, reason: str) -> str:
        tuner.log.event("rule", proposer=proposer, id=rid, require=require, status="refused", reason=reason)
        if proposer == "llm":
            self._note_refusal(f"rule {rid}", require, reason)
        return f"refused: {reason}"

    def _note_refusal(self, proposal: str, require: str, reason: str,
                      key: tuple[str, str] | None = None) -> bool:
        """Remember a refusal to send back; True when it is new. The same rule text (or the same
        candidate, or a reply rejected for the same reason) refused for the same reason again teaches
        the model nothing and is not progress."""
        k = key if key is not None else (require or proposal, reason)
        if k in self._refusal_keys:
            return False
        self._refusal_keys.add(k)
        self.refused.append({"proposal": proposal, "require": require, "reason": reason})
        return True

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


#: the longest rule id (the reply schema's bound on what the LLM writes, before the proposer's prefix)
MAX_RULE_ID = 64


def _bounded_id(rid: str) -> str:
    """`rid` within MAX_RULE_ID characters, distinct ids kept distinct: a longer one keeps its start and
    ends in 8 hex digits of its SHA-256 (cutting at 64 made "a"*64 and "a"*63 + "b" the same id, and
    the second was refused as "already in force"; review 49, L2)."""
    if len(rid) <= MAX_RULE_ID:
        return rid
    return f"{rid[:MAX_RULE_ID - 9]}-{hashlib.sha256(rid.encode()).hexdigest()[:8]}"
