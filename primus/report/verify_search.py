"""A guided search, re-run: the log of a guided run must be the search's own, candidate for candidate.

`audit verify` re-checks every logged candidate (its verdict and its projection) and every claim of
result.json against the log; for an exhaustive run it also checks that the log holds every legal layout.
A guided run scores a subset, chosen by the search, so a log cut short, or a search steered past the
fastest layout, would pass those checks. The search is deterministic given its inputs and its LLM
replies (the same candidates in the same order for any worker count, as `tune --resume` relies on), so
verify runs it again from the recorded inputs, answering each LLM call from its transcript in llm/ and
never asking an endpoint, and compares the candidates it proposes with the log: layout, proposer and
verdict, seq by seq. Scores are compared by the projection check, not here.
"""

from __future__ import annotations

from typing import Any

from primus.errors import InputError
from primus.parallel import parallel_text
from primus.report.rundir import RunDir, layout_of
from primus.report.verify_types import Difference

#: Where a replayed search's LLM client points. It is never contacted (`Tuner.replay_only_llm`); an address
#: in the reserved `.invalid` domain (RFC 2606) makes sure of it should that ever change.
REPLAY_URL = "http://replay.invalid/v1"
#: Differing seqs named one by one before the rest are counted.
SHOWN = 5


def check_guided_search(run: RunDir, workers: int) -> list[Difference]:
    """The re-run guided search against the logged candidates (nothing for another mode)."""
    from primus.parallel import normalise
    from primus.tuning.agent import ReplayDiverged, Tuner, TuneSettings
    from primus.tuning.llm import LlmSettings
    from primus.tuning.result import SEARCH_SETTINGS

    doc = run.result
    limit = doc.get("exhaustive_limit")
    if doc.get("mode") != "guided" or type(limit) is not int:  # a bad limit is check_mode's difference
        return []
    try:
        calls = recorded_calls(run)
    except ValueError as exc:
        return [Difference(f"llm/: {exc}: the guided search cannot be re-run")]
    search = doc.get("search")
    if not isinstance(search, dict) or set(search) != set(SEARCH_SETTINGS) or not all(
            type(search[k]) is int and search[k] >= 1 for k in SEARCH_SETTINGS):
        return [Difference(f"result.json: search recorded {search!r}, not the guided search's settings "
                           f"({', '.join(SEARCH_SETTINGS)}; a run written before primus recorded them): the guided "
                           "search cannot be re-run")]
    llm = doc.get("llm")
    enabled = isinstance(llm, dict) and llm.get("enabled") is True
    settings = TuneSettings(exhaustive_limit=limit, workers=workers, **search,
                            llm=LlmSettings(base_url=REPLAY_URL if enabled else None))
    try:
        tuner = Tuner(run.job, settings, profile=run.profile, rules=run.rules)
    except InputError as exc:
        return [Difference(f"the guided search cannot be re-run: {exc.reason}")]
    held = len(calls)  # the replaying client takes the calls off this list as it answers them
    tuner.recorded_llm = calls
    tuner.replay_only_llm = True
    try:
        tuner.run()
    except ReplayDiverged as exc:
        return [Difference(f"the guided search re-run asks LLM call {exc.call} a prompt that llm/ does not hold "
                           f"(llm/ holds {held} call(s)): the log is not this search's")]
    is_moe = run.job.model.is_moe
    diffs: list[Difference] = []
    adopted = [(e["seq"], e["id"], e["require"]) for e in tuner.log.events
               if e.get("kind") == "rule" and e.get("status") == "adopted"]
    try:
        recorded = [(seq, r.id, r.require) for seq, r in run.adoptions()]
    except InputError as exc:
        recorded = [(-1, "", exc.reason)]
    if adopted != recorded:
        diffs.append(Difference(f"result.json: events record the adopted rules {_rules_text(recorded)}, but the "
                                f"guided search re-run adopts {_rules_text(adopted)}"))
    logged = run.entries
    redone = tuner.log.entries
    for seq in range(min(len(logged), len(redone))):
        old, new = logged[seq], redone[seq]
        try:
            same_layout = normalise(layout_of(old.get("parallel")), is_moe=is_moe) == \
                normalise(layout_of(new["parallel"]), is_moe=is_moe)
        except ValueError:
            same_layout = False  # the legality check names the bad layout
        if not same_layout or old.get("proposer") != new["proposer"] or old.get("legal") != new["legal"]:
            diffs.append(Difference(f"the guided search re-run proposes {parallel_text(new['parallel'])} here "
                                    f"({new['proposer']}, {'legal' if new['legal'] else 'illegal'})", seq,
                                    old.get("parallel") if isinstance(old.get("parallel"), dict) else None))
    if len(redone) != len(logged):
        diffs.append(Difference(f"audit.jsonl: {len(logged):,} candidates logged, but the guided search re-run "
                                f"considers {len(redone):,}"))
    if len(diffs) > SHOWN + 1:
        diffs = [*diffs[:SHOWN], Difference(f"... and {len(diffs) - SHOWN:,} more differences from the guided "
                                            "search re-run")]
    return diffs


def recorded_calls(run: RunDir) -> list[dict[str, Any]]:
    """The LLM calls of llm/ in the form a replaying client answers from (`RecordingClient`), in call order
    (ValueError naming a file that is not a transcript `tune` writes)."""
    import json

    out = []
    for name in run.llm_calls:
        try:
            t = json.loads((run.root / "llm" / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            raise ValueError(f"{name} is not a JSON transcript") from None
        if not isinstance(t, dict) or not isinstance(t.get("prompt"), list):
            raise ValueError(f"{name} holds no prompt")
        reply = t.get("reply")
        tokens, attempts = t.get("tokens", 0), t.get("attempts", 1)
        if not (reply is None or isinstance(reply, str)) or type(tokens) is not int or type(attempts) is not int:
            raise ValueError(f"{name}: reply, tokens or attempts is not of the type tune writes")
        chars = t.get("reply_chars", len(reply or ""))
        out.append({"messages": t["prompt"], "text": reply, "error": t.get("error"), "tokens": tokens,
                    "attempts": attempts, "fault": t.get("fault"), "chars": chars if type(chars) is int else 0})
    return out


def _rules_text(rules: list[tuple[int, str, str]]) -> str:
    if not rules:
        return "none"
    return "; ".join(f"{rid!r} ({require}) from seq {seq}" for seq, rid, require in rules)

