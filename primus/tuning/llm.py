"""The LLM side of the investigation loop: an OpenAI-compatible client (the HTTP side, and every way it
can fail, is `primus.tuning.llm_http`), the prompt, and the reply schema. Replies are untrusted input:
they are parsed as JSON, validated with pydantic (unknown keys, oversized lists and texts refused), and
every rule they carry goes through the same whitelist parser as any other rule before the solver sees
it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from primus.specs.base import error_reason
from primus.tuning.llm_http import MAX_BODY_BYTES, Fault, FaultError, chat_completion

MAX_REPLY_CHARS = 64_000


class Hypothesis(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    text: Annotated[str, Field(max_length=1000)]
    predicted_effect: Annotated[str, Field(max_length=500)] = ""


class ProposedRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: Annotated[str, Field(max_length=64)]
    why: Annotated[str, Field(max_length=300)] = ""
    require: Annotated[str, Field(max_length=1000)]
    severity: Literal["hard", "soft"] = "hard"
    weight: Annotated[int, Field(ge=1, le=1000)] = 1


class ProposedLayout(BaseModel):
    """A candidate: parallel axes only — convergence settings cannot even be expressed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tp: Annotated[StrictInt, Field(ge=1, le=1 << 20)]
    pp: Annotated[StrictInt, Field(ge=1, le=1 << 20)]
    vp: Annotated[StrictInt, Field(ge=1, le=1 << 20)] = 1
    cp: Annotated[StrictInt, Field(ge=1, le=1 << 20)] = 1
    ep: Annotated[StrictInt, Field(ge=1, le=1 << 20)] = 1
    etp: Annotated[StrictInt, Field(ge=1, le=1 << 20)] = 1
    mbs: Annotated[StrictInt, Field(ge=1, le=1 << 20)] = 1
    sp: StrictBool = False
    recompute: Literal["none", "selective", "full"] = "none"
    sharding: Literal["none", "zero1", "dist_opt", "zero2", "fsdp"] = "dist_opt"


class LlmReply(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    hypotheses: Annotated[list[Hypothesis], Field(max_length=10)] = []
    candidates: Annotated[list[ProposedLayout], Field(max_length=20)] = []
    rules: Annotated[list[ProposedRule], Field(max_length=10)] = []


class ReplyRejected(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_reply(text: str, chars: int | None = None) -> LlmReply:
    """The validated reply, or ReplyRejected with a one-line reason. `chars` is the reply's length as the
    endpoint sent it, where `text` may be the excerpt a transcript keeps of an oversized one (so a replay
    refuses it for its size, as the run did, not for the excerpt's cut-off JSON)."""
    if max(len(text), chars or 0) > MAX_REPLY_CHARS:
        raise ReplyRejected(f"reply longer than {MAX_REPLY_CHARS} characters")
    body = text.strip()
    if body.startswith("```"):  # tolerate a fenced block, nothing else
        body = body.strip("`")
        body = body[4:] if body.startswith("json") else body
    try:
        data = json.loads(body)
    except RecursionError:
        raise ReplyRejected("reply is nested too deeply") from None
    except ValueError:  # JSONDecodeError, or an integer too long to convert
        raise ReplyRejected("reply is not JSON") from None
    if not isinstance(data, dict):
        raise ReplyRejected("reply is not a JSON object")
    try:
        return LlmReply.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise ReplyRejected(f"reply does not match the schema at {loc or 'top level'}: {error_reason(err)}") from None


@dataclass(frozen=True)
class LlmSettings:
    """Where the LLM is and how much of it the search may use (budgets are enforced in code)."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    max_calls: int = 4
    max_tokens: int = 60_000
    wall_s: float = 180.0
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 1.0
    max_body_bytes: int = MAX_BODY_BYTES

    @property
    def enabled(self) -> bool:
        return bool(self.base_url)


@dataclass
class CallOutcome:
    """One call: the reply text, or the error line and the fault (what failed and how) of its last
    attempt."""

    text: str | None
    error: str | None
    tokens: int = 0
    attempts: int = 1
    fault: dict[str, Any] | None = None
    chars: int = 0  # the reply's length as received (a checkpoint may hold only the start of it)


@dataclass
class LlmClient:
    """Calls the endpoint with retries and backoff on faults a retry may cure (timeouts, dropped
    connections, 5xx, 429); never raises. Every call counts against the call budget, failed or not."""

    settings: LlmSettings
    calls: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)

    def budget_left(self) -> str | None:
        s = self.settings
        if self.calls >= s.max_calls:
            return f"call budget of {s.max_calls} spent"
        if self.tokens >= s.max_tokens:
            return f"token budget of {s.max_tokens} spent"
        if time.monotonic() - self.started > s.wall_s:
            return f"wall-time budget of {s.wall_s:.0f} s spent"
        return None

    def wall_left(self) -> float:
        """Seconds of the wall-time budget not yet spent."""
        return self.settings.wall_s - (time.monotonic() - self.started)

    def complete(self, messages: list[dict[str, str]]) -> CallOutcome:
        s = self.settings
        assert s.base_url is not None
        payload = {"model": s.model, "messages": messages, "temperature": 0, "max_tokens": 4000}
        self.calls += 1
        fault: Fault | None = None
        attempts = 0
        for attempt in range(s.retries + 1):
            # the wall-time budget holds inside a call too (review 49, M6: one call against a stalling
            # endpoint took 305 s of a 180 s budget): each attempt waits at most what is left of it
            left = self.wall_left()
            if left <= 0:
                if fault is None:
                    fault = Fault("wall-time budget", f"the {s.wall_s:.0f} s budget was spent before the call")
                break
            attempts = attempt + 1
            try:
                done = chat_completion(s.base_url, s.api_key, payload, min(s.timeout_s, left), s.max_body_bytes)
            except FaultError as exc:
                fault = exc.fault
            else:
                self.tokens += done.tokens
                return CallOutcome(done.text, None, done.tokens, attempts, chars=len(done.text))
            if not fault.retry:
                break
            if attempt < s.retries:
                time.sleep(max(0.0, min(s.backoff_s * (2**attempt), self.wall_left())))
        assert fault is not None
        return CallOutcome(None, f"{fault.line()} after {attempts} attempt(s)", attempts=attempts,
                           fault=fault.to_json())


SYSTEM_PROMPT = (
    "You are a distributed-training performance engineer advising a search over Megatron-LM parallel layouts. "
    "The search has stalled. Propose hypotheses, candidate layouts and constraints that could find a faster "
    "legal layout. Reply with ONE JSON object and nothing else, with keys: "
    '"hypotheses" (list of {"text", "predicted_effect"}), '
    '"candidates" (list of {"tp","pp","vp","cp","ep","etp","mbs","sp","recompute","sharding"}), '
    '"rules" (list of {"id","why","require","severity":"hard"|"soft","weight"}). '
    "Rules use the rule language described in the user message: only the listed names, integers, "
    "+ - * // %, comparisons, and/or/not, implies(a, b), x in (..), min, max, abs. Never change the global "
    "batch size, sequence length or precision. \"refused\" lists what was refused before and why: do not "
    "propose it again; act on the reason."
)


def build_prompt(context: dict[str, Any]) -> list[dict[str, str]]:
    """The messages for one investigation call (the context is canonical JSON, so prompts are
    deterministic)."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps(context, indent=1, sort_keys=True)}]
