"""`primus tune`: the fastest legal layout for a job, proved legal, explained, with its search log.

The search space is the rule engine's legal set (the job's pins released; sequence length, global
batch and precision fixed). Small spaces are scored exhaustively and the answer comes with a
certificate; large ones are searched from seeds (the reference and one-axis sweeps around it) through
incumbent neighbourhoods and a throughput proxy, with compute-bound pruning; when K rounds bring no
improvement an investigation asks the LLM (or, without one, the deterministic hypothesis generator) for
hypotheses, candidates and rules, which are checked by the same parser and solver before anything is
trusted. The log is deterministic: the same inputs and the same LLM replies give the same log.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from primus.errors import InputError, shown
from primus.job import Job
from primus.parallel import Layout, normalise
from primus.projection import BREAKDOWN_ORDER, Projector
from primus.projection.complete import RESIMULATE, fastest_first
from primus.projection.profile import Profile, load_profile
from primus.report.audit import Checkpoint, dumps_line
from primus.rules.model import Rule
from primus.tuning.investigate import Investigation
from primus.tuning.llm import MAX_REPLY_CHARS, CallOutcome, LlmClient, LlmSettings
from primus.tuning.reference import Reference, find_reference
from primus.tuning.space import AXES, PARALLEL_MIN, Scored, TuneSpace, layout_key

# Exhaustive scoring is checkpointed this many candidates at a time: a kill loses at most one block.
CHECKPOINT_BLOCK = 2_000


@dataclass(frozen=True)
class TuneSettings:
    exhaustive_limit: int = 200_000
    resimulate_top: int = RESIMULATE
    top_k: int = 10
    stall_rounds: int = 2
    max_rounds: int = 12
    per_round: int = 200
    workers: int = 1
    llm: LlmSettings = field(default_factory=LlmSettings)


@dataclass
class SearchLog:
    """Every candidate in the order it was considered, and the events of the search.

    Each event carries `seq`, the number of candidates logged before it, so that an auditor can tell
    which adopted rules were in force for each candidate. `sink`, when set, receives every entry as it
    is logged (the checkpoint an interrupted run resumes from)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    round: int = 0
    sink: Callable[[dict[str, Any], str], None] | None = None
    lines: list[str] = field(default_factory=list)  # each entry serialised once, for the checkpoint and the file

    def candidate(self, proposer: str, layout: Layout, scored: Scored | None, violated: Sequence[str] = ()) -> None:
        entry: dict[str, Any] = {"seq": len(self.entries), "round": self.round, "proposer": proposer,
                                 "parallel": layout.as_parallel(), "legal": scored is not None}
        if scored is None:
            entry["violated_rules"] = list(violated)
        else:
            entry.update(tokens_per_s_per_gpu=scored.tokens_per_s_per_gpu, step_time_s=scored.step_time_s,
                         peak_bytes=scored.peak_bytes, breakdown=scored.breakdown)
        self.entries.append(entry)
        line = dumps_line(entry)
        self.lines.append(line)
        if self.sink is not None:
            self.sink(entry, line)

    def event(self, kind: str, **info: Any) -> None:
        self.events.append({"round": self.round, "kind": kind, "seq": len(self.entries), **info})


class Tuner:
    def __init__(self, job: Job, settings: TuneSettings, *, profile: Profile | None = None,
                 rule_texts: Sequence[str] = (), rule_files: Sequence[str] = (), without: Sequence[str] = (),
                 progress: Callable[[str], None] | None = None, rules: Sequence[Rule] | None = None) -> None:
        """`rules`: the exact rule set (a recorded run's, `primus audit verify`), instead of assembling it."""
        self.job = job
        self.settings = settings
        self.profile = profile or load_profile(job.cluster).for_stack(job.resolved_stack.kernel_profile)
        self.projector = Projector(job, self.profile)
        self.space = TuneSpace(job, self.projector, rule_texts=rule_texts, rule_files=rule_files, without=without,
                               rules=rules)
        self.base_space = self.space
        self.log = SearchLog()
        self.scores: dict[Layout, Scored] = {}
        self.say = progress or (lambda _msg: None)
        self.adopted_rules: list[Rule] = []
        self.transcripts: list[str] = []
        self.checkpoint: Checkpoint | None = None
        self.replay: dict[Layout, Scored] = {}
        self.recorded_llm: list[dict[str, Any]] = []
        #: answer the LLM only from `recorded_llm`, never the endpoint (`primus audit verify` re-running a guided
        #: search): the record's end is the LLM budget's end, and a prompt it does not hold is `ReplayDiverged`
        self.replay_only_llm = False

    def attach(self, checkpoint: Checkpoint) -> None:
        """Log every candidate to `checkpoint` as the search goes, and replay what it already holds.

        The search is deterministic, so a resumed run proposes the same candidates in the same order;
        those the checkpoint has scores for are taken from it instead of being scored again, and its LLM
        calls are answered from the record instead of asking again. The finished run is therefore the
        one an uninterrupted run would have produced."""
        self.checkpoint = checkpoint
        self.log.sink = checkpoint.append
        for e in checkpoint.entries:
            if not e.get("legal"):
                continue
            where = (str(checkpoint.root / "audit.jsonl"), f"seq {e.get('seq')}")
            try:
                layout = normalise(Layout(**e["parallel"]), is_moe=self.job.model.is_moe)
                bd = e["breakdown"]
                breakdown = {k: bd[k] for k in BREAKDOWN_ORDER if k in bd} | bd
                self.replay[layout] = Scored(layout, e["tokens_per_s_per_gpu"], e["step_time_s"], e["peak_bytes"],
                                             breakdown)
            except (KeyError, TypeError) as exc:
                raise InputError(*where, f"not a candidate line ({exc})") from None
            bad = replay_fault(self.replay[layout])
            if bad is not None:
                raise InputError(*where, f"{bad}: not a score primus tune writes; start the run afresh")
        self.recorded_llm = list(checkpoint.llm_calls)

    def _replayed(self, layout: Layout) -> Scored | None:
        """The checkpoint's score of a layout, if it has one (each is used once)."""
        return self.replay.pop(layout) if layout in self.replay else None

    def _flush(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.flush()

    # ---- scoring ----

    def consider(self, layout: Layout, proposer: str) -> Scored | None:
        """Score a proposed layout if it is legal in the current space; log it either way."""
        layout = normalise(layout, is_moe=self.job.model.is_moe)
        key = layout_key(layout)
        i = self.space.find(layout)
        if i is None:
            self.log.candidate(proposer, layout, None, self.space.why_not(layout))
            return None
        scored = self.scores.get(key)
        if scored is None:
            scored = self.scores[key] = self._replayed(self.space.layouts[i]) or self.space.score(i)
            self.log.candidate(proposer, layout, scored)
        return scored

    def best(self) -> Scored | None:
        legal = [s for s in self.scores.values() if self.space.find(s.layout) is not None]
        if not legal:
            return None
        return ranked(legal)[0]

    # ---- phases ----

    def seeds(self, baseline: Layout | None) -> None:
        """The reference, then one-axis sweeps around it over the values the legal set uses."""
        if baseline is None:
            return
        self.consider(baseline, "seed")
        cols = self.space.question.candidates.cols
        for axis in AXES:
            for value in sorted({v for v in cols[axis].tolist()}):
                self.consider(_with_axis(baseline, axis, value, self.job), f"seed:{axis}")

    def exhaustive(self) -> None:
        self.say(f"exhaustive: scoring all {self.space.count:,} legal layouts ({self.settings.workers} worker(s))")
        if self.settings.llm.enabled:  # the LLM only joins a guided search that stalls (review 49, L4)
            self.say(f"the LLM is not consulted: {self.space.count:,} legal layouts are within --exhaustive-limit "
                     f"{self.settings.exhaustive_limit:,}, so every one is scored (--exhaustive-limit 0 for a guided "
                     "search)")
        todo = [i for i in range(self.space.count) if layout_key(self.space.layouts[i]) not in self.scores]
        for block in self._scored_blocks(todo):
            for s in block:
                self.scores[layout_key(s.layout)] = s
                self.log.candidate("exhaustive", s.layout, s)
            self._flush()

    def _scored_blocks(self, todo: list[int]) -> Iterator[list[Scored]]:
        """Scores of `todo` in order, one checkpoint block at a time. Replayed scores are reused; the rest
        are scored by forked workers (each keeping its warm caches across blocks) when there are enough,
        and the result does not depend on the number of workers."""
        space = self.space
        blocks = [todo[k:k + CHECKPOINT_BLOCK] for k in range(0, len(todo), CHECKPOINT_BLOCK)]
        fresh = [[i for i in b if space.layouts[i] not in self.replay] for b in blocks]
        workers = self.settings.workers
        if workers <= 1 or sum(len(f) for f in fresh) < PARALLEL_MIN:
            for block in blocks:
                yield [self._replayed(space.layouts[i]) or space.score(i) for i in block]
            return
        self._flush()  # forked children must not inherit unwritten checkpoint lines
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_set_stream_space, initargs=(space,)) as pool:
            for block, part in zip(blocks, pool.imap(_score_block, fresh), strict=True):
                scored = iter(part)
                out = []
                for i in block:
                    s = self._replayed(space.layouts[i])
                    if s is None:
                        tok, step, breakdown = next(scored)
                        s = Scored(space.layouts[i], tok, step, space.peaks[i], breakdown)
                    out.append(s)
                yield out

    def guided(self, investigation: Investigation) -> None:
        s = self.settings
        stall = 0
        order = ProxyQueue(self.space)
        for rnd in range(1, s.max_rounds + 1):
            self.log.round = rnd
            order.follow(self.space)
            inc = self.best()
            before = inc.tokens_per_s_per_gpu if inc else 0.0
            batch: list[int] = []
            if inc is not None:
                j = self.space.find(inc.layout)
                batch += self.space.neighbours(j) if j is not None else []
            batch += order.take(s.per_round * 2 - len(batch))
            pruned = 0
            for i in batch[: s.per_round * 2]:
                if layout_key(self.space.layouts[i]) in self.scores:
                    continue
                if inc is not None and self.space.compute_bound_s(i) >= inc.step_time_s:
                    pruned += 1
                    continue
                self.consider(self.space.layouts[i], "guided")
            after = self.best()
            improved = after is not None and after.tokens_per_s_per_gpu > before
            self.log.event("round", scored=len(self.scores), pruned_by_bound=pruned, improved=improved,
                           best=after.tokens_per_s_per_gpu if after else None)
            self._flush()
            stall = 0 if improved else stall + 1
            if stall >= s.stall_rounds:
                if not investigation.run(self):
                    self.log.event("stop", reason=f"stalled {stall} rounds and the investigation found nothing")
                    break
                stall = 0
            order.follow(self.space)
            if order.exhausted() and all(layout_key(x) in self.scores for x in self.space.layouts):
                if self.space is self.base_space:
                    self.log.event("stop", reason="every legal layout has been scored")
                else:  # an adopted rule narrowed the search: say so, not that the whole legal set was scored
                    n = len(self.adopted_rules)
                    self.log.event("stop", reason=f"every layout legal under the {n} adopted rule(s) has been "
                                   f"scored ({self.space.count:,} of {self.base_space.count:,} legal layouts)")
                break

    # ---- the run ----

    def run(self) -> dict[str, Any]:
        from primus.tuning.result import build_result

        self.say(f"{self.space.count:,} legal layouts for {self.job.model.name} on {self.job.num_gpus} x "
                 f"{self.job.cluster.name}")
        reference = find_reference(self.job, self.base_space.question, self.profile)  # the run's rules, profile
        baseline = reference.layout if reference.fit.fits else _nearest(reference)
        self.log.round = 0
        self.seeds(baseline)
        self._flush()
        investigation = Investigation(self.settings.llm)
        if investigation.client is not None:
            investigation.client = RecordingClient(
                self.settings.llm, recorded=self.recorded_llm,
                sink=self.checkpoint.record_llm if self.checkpoint is not None else None,
                replay_only=self.replay_only_llm)
        mode = "exhaustive" if self.space.count <= self.settings.exhaustive_limit else "guided"
        if self.space.count == 0:
            mode = "empty"
        elif mode == "exhaustive":
            self.exhaustive()
            self.log.event("exhaustive", scored=len(self.scores), legal=self.space.count,
                           note="every legal layout scored; no investigation needed")
        else:
            self.say(f"guided search over {self.space.count:,} legal layouts")
            self.guided(investigation)
        self.transcripts = investigation.transcript_json()
        return build_result(self, reference, mode, investigation)


def replay_fault(scored: Scored) -> str | None:
    """What makes a checkpoint's score one `tune` cannot have written (a resumed run reuses it unscored, so a
    string, a NaN or a negative time there would reach the ranking and the report): None when it is sound."""
    def number(v: object) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    for name in ("tokens_per_s_per_gpu", "step_time_s"):
        value = getattr(scored, name)
        if not number(value) or value <= 0:
            return f"{name} {shown(value)} is not a positive number"
    if not isinstance(scored.peak_bytes, int) or isinstance(scored.peak_bytes, bool) or scored.peak_bytes < 0:
        return f"peak_bytes {shown(scored.peak_bytes)} is not a byte count"
    for term, value in scored.breakdown.items():
        if not isinstance(term, str) or not number(value):  # a term can be -0.0000000000005 s of rounding
            return f"breakdown {shown(term)} {shown(value)} is not a number of seconds"
    return None


class ProxyQueue:
    """The layouts guided search has not yet looked at, in proxy order, as indices into one space.

    A rule adopted during the search (the hypothesis generator's or the LLM's) replaces the tuner's
    space with a smaller one whose indices are different; `follow` carries the queue over, keeping the
    order and dropping the layouts the new space no longer holds, so no index outlives its space."""

    def __init__(self, space: TuneSpace) -> None:
        self.space = space
        self.pending = space.proxy_order()
        self.cursor = 0

    def follow(self, space: TuneSpace) -> None:
        if space is self.space:
            return
        old = self.space
        mapped = (space.find(old.layouts[i]) for i in self.pending[self.cursor:])
        self.pending = [j for j in mapped if j is not None]
        self.cursor = 0
        self.space = space

    def take(self, n: int) -> list[int]:
        out = self.pending[self.cursor:self.cursor + max(n, 0)]
        self.cursor += len(out)
        return out

    def exhausted(self) -> bool:
        return self.cursor >= len(self.pending)


class ReplayDiverged(Exception):
    """A search replaying a run's LLM calls asked, as call `call`, what the record does not hold."""

    def __init__(self, call: int) -> None:
        super().__init__(f"LLM call {call}")
        self.call = call


@dataclass
class RecordingClient(LlmClient):
    """The LLM client of a checkpointed run: each new call is written to the checkpoint as soon as it
    returns, and on resume the recorded calls are answered from the record, in order, as long as the
    prompts are the same (a prompt that differs ends the replay: from there on the endpoint is asked)."""

    recorded: list[dict[str, Any]] = field(default_factory=list)
    sink: Callable[[dict[str, Any]], None] | None = None
    replay_only: bool = False  # see Tuner.replay_only_llm

    def budget_left(self) -> str | None:
        if self.replay_only:  # the record is the budget: each call in it was within the run's own
            return None if self.recorded else "the run's record of LLM calls ends here"
        return super().budget_left()

    def complete(self, messages: list[dict[str, str]]) -> CallOutcome:
        if self.replay_only and (not self.recorded or self.recorded[0].get("messages") != messages):
            raise ReplayDiverged(self.calls + 1)
        if self.recorded:
            rec = self.recorded.pop(0)
            if rec.get("messages") == messages:
                self.calls += 1
                self.tokens += int(rec.get("tokens", 0))
                text = rec.get("text")
                return CallOutcome(text, rec.get("error"), int(rec.get("tokens", 0)), int(rec.get("attempts", 1)),
                                   rec.get("fault"), int(rec.get("chars", len(text or ""))))
            self.recorded.clear()
        outcome = super().complete(messages)
        if self.sink is not None:
            # a reply longer than any valid one is kept only as far as its rejection needs
            text = outcome.text[:MAX_REPLY_CHARS + 1] if outcome.text is not None else None
            self.sink({"messages": messages, "text": text, "error": outcome.error, "tokens": outcome.tokens,
                       "attempts": outcome.attempts, "fault": outcome.fault, "chars": outcome.chars})
        return outcome


_STREAM: dict[str, TuneSpace] = {}  # set in forked scoring workers only (see Tuner._scored_blocks)


def _set_stream_space(space: TuneSpace) -> None:
    _STREAM["space"] = space


def _score_block(indices: list[int]) -> list[tuple[float, float, dict[str, float]]]:
    space = _STREAM["space"]
    return [(s.tokens_per_s_per_gpu, s.step_time_s, s.breakdown) for s in map(space.score, indices)]


def ranked(scores: Sequence[Scored]) -> list[Scored]:
    """Fastest first, as project and enumerate --rank order (`primus.projection.complete.fastest_first`)."""
    return fastest_first(scores)


def _with_axis(layout: Layout, axis: str, value: Any, job: Job) -> Layout:
    changes: dict[str, Any] = {axis: value if axis not in ("sp",) else bool(value)}
    if axis == "recompute":
        changes[axis] = ("none", "selective", "full")[int(value)]
    if axis == "sharding":
        changes[axis] = ("none", "dist_opt", "zero2", "fsdp")[int(value)]
    new = replace(layout, **changes)
    world = job.num_gpus
    denom = new.tp * new.cp * new.pp
    dp = world // denom if world % denom == 0 else layout.dp
    return normalise(replace(new, dp=dp), is_moe=job.model.is_moe)


def _nearest(reference: Reference) -> Layout | None:
    alts = reference.fit.alternatives
    return alts[0].layout if alts else None
