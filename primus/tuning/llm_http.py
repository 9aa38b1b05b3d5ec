"""One chat-completion request to an OpenAI-compatible endpoint, with every way it can fail named.

An endpoint is untrusted and unreliable: gateways answer with HTML error pages, rate limiters with 429,
expired tokens with 401, connections drop mid-reply, a server can send its headers and then nothing, or
a body of many megabytes, or JSON nested thousands of levels deep. This module turns each into a
`Fault` (what failed, how, whether a retry may help) instead of an exception, so the search never dies on
one. The request goes through the `openai` client (its streaming-response form, its retries off), so any
OpenAI-compatible endpoint and the environment's proxies work as they do for that client; the body is
read here, in pieces, up to a byte cap and a per-attempt deadline, and the JSON is parsed here.

Fault texts are fixed phrases plus sizes and status codes, never addresses or timings, so that the same
faults give the same search log.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

# The largest HTTP body read from the endpoint. A completion is capped at 4,000 tokens (max_tokens in
# the request), about 16-32 KB of text; 1 MiB leaves a wide margin for JSON escaping and metadata and
# still bounds the memory a hostile or broken endpoint can make the search hold.
MAX_BODY_BYTES = 1 << 20
# How much of an offending body is kept in the transcript.
EXCERPT_CHARS = 2_000
# Bytes read per piece, between deadline checks.
READ_PIECE = 64 * 1024
# How long past --llm-timeout an attempt waits for its request to report on its own: long enough for the body
# reader's deadline check, which follows a read of at most READ_PIECE bytes, to name a late body as such; short
# against any timeout a user gives (the option's floor is 0.1 s).
DEADLINE_GRACE_S = 0.25


@dataclass(frozen=True)
class Fault:
    """What failed (`kind`, a fixed phrase), how (`detail`, one line), and whether a retry may help."""

    kind: str
    detail: str
    retry: bool = False
    excerpt: str | None = None  # the start of an offending body, for the transcript
    size: int | None = None  # bytes received (or announced), when a body arrived

    def line(self) -> str:
        return f"{self.kind}: {self.detail}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "detail": self.detail}
        if self.size is not None:
            out["body_bytes"] = self.size
        if self.excerpt is not None:
            out["body_excerpt"] = self.excerpt
        return out


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int


class FaultError(Exception):
    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.line())
        self.fault = fault


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The start of a long text, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} more characters]"


def chat_completion(base_url: str, api_key: str | None, payload: dict[str, Any], timeout_s: float,
                    max_bytes: int = MAX_BODY_BYTES) -> Completion:
    """POST {base_url}/chat/completions and return the message text and tokens used; FaultError on
    any failure. `timeout_s` bounds each wait for data and the attempt as a whole."""
    return _completion(_post(base_url, api_key, payload, timeout_s, max_bytes))


def _post(base_url: str, api_key: str | None, payload: dict[str, Any], timeout_s: float, max_bytes: int) -> bytes:
    """The raw body of one request, whole within `timeout_s` from the first byte sent to the last received.

    The HTTP client's own timeouts bound each wait for data, so an endpoint that trickles its status line and
    headers a byte at a time, each within the timeout, would hold an attempt for as long as it likes before the
    body deadline (`_read_body`) is ever checked. The request therefore runs on a worker thread that the attempt
    waits for at most `timeout_s` (and `DEADLINE_GRACE_S`, so that the body reader's own deadline, which says how
    much of the body came, fires first when the body is what is late); past it the attempt is a timeout and the
    request's client is closed, which ends the worker at its next read."""
    import openai

    outcome: dict[str, Any] = {}
    # built here, before the clock starts: importing and constructing a client is not the endpoint's time
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0,
                           http_client=_http_client(timeout_s, max_bytes))
    clients: list[Any] = [client]

    def attempt() -> None:
        try:
            outcome["body"] = _request(client, payload, timeout_s, max_bytes)
        except BaseException as exc:  # handed to the waiting thread below
            outcome["error"] = exc

    worker = threading.Thread(target=attempt, name="primus-llm-request", daemon=True)
    worker.start()
    worker.join(timeout_s + DEADLINE_GRACE_S)
    if worker.is_alive():
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()
        raise FaultError(Fault("timeout", f"no complete reply within {timeout_s:g} s", retry=True))
    if "error" in outcome:
        raise outcome["error"]
    body: bytes = outcome["body"]
    return body


def _request(client: Any, payload: dict[str, Any], timeout_s: float, max_bytes: int) -> bytes:
    """The raw body of one request through the `openai` client (built by `_post`, its own retries off:
    retrying, with backoff, is the caller's, `LlmClient.complete`), read as a stream so that its size and its
    time are bounded here (the client would read any body whole, an error page included)."""
    import openai

    deadline = time.monotonic() + timeout_s
    try:
        with client.chat.completions.with_streaming_response.create(**payload) as response:
            return _read_body(response.iter_bytes(READ_PIECE), deadline, timeout_s, max_bytes)
    except FaultError:
        raise
    except openai.APITimeoutError:
        raise FaultError(Fault("timeout", f"no reply within {timeout_s:g} s", retry=True)) from None
    except openai.APIStatusError as exc:  # only when the guard below did not see the status first
        raise FaultError(_status_fault(exc.status_code, b"")) from None
    except openai.APIConnectionError as exc:
        cause = _cause(exc)
        if isinstance(cause, FaultError):
            raise cause from None
        raise FaultError(_connect_fault(cause)) from None
    except openai.OpenAIError as exc:
        raise FaultError(Fault("client error", type(exc).__name__)) from None
    finally:
        client.close()


def _http_client(timeout_s: float, max_bytes: int) -> Any:
    """The HTTP client under the `openai` one, with a guard that looks at every response as soon as its
    headers are in: an announced body over the cap is not read, and an error status becomes a named
    fault after at most an excerpt of its body."""
    httpx = _httpx()

    def guard(response: Any) -> None:
        announced = response.headers.get("Content-Length")
        if announced is not None and announced.isdigit() and int(announced) > max_bytes:
            response.close()
            raise FaultError(Fault("reply too large", f"the endpoint announced {int(announced):,} bytes, over the "
                                   f"limit of {max_bytes:,}; not read", size=int(announced)))
        if response.status_code >= 400:
            raw = b""
            try:
                for piece in response.iter_raw(EXCERPT_CHARS):
                    raw += piece
                    if len(raw) >= EXCERPT_CHARS:
                        break
            except httpx.HTTPError:
                pass
            response.close()
            raise FaultError(_status_fault(response.status_code, raw[:EXCERPT_CHARS]))

    return httpx.Client(timeout=httpx.Timeout(timeout_s), event_hooks={"response": [guard]})


def _httpx() -> Any:
    """The HTTP library the installed `openai` client is built on: `httpx2` (openai 3) or `httpx` (1, 2)."""
    import importlib

    try:
        return importlib.import_module("httpx2")
    except ImportError:
        return importlib.import_module("httpx")


def _cause(exc: BaseException) -> BaseException:
    """The innermost cause of a client error (the socket error under the HTTP library's own)."""
    seen = exc
    while True:
        nxt = seen.__cause__ or seen.__context__
        if nxt is None or isinstance(seen, FaultError):
            return seen
        seen = nxt


def _read_body(pieces: Any, deadline: float, timeout_s: float, max_bytes: int) -> bytes:
    httpx = _httpx()

    out: list[bytes] = []
    size = 0
    try:
        for piece in pieces:
            size += len(piece)
            if size > max_bytes:
                raise FaultError(Fault("reply too large", f"over {max_bytes:,} bytes; reading stopped there",
                                       size=size))
            out.append(piece)
            if time.monotonic() > deadline:
                raise FaultError(Fault("stalled after headers", f"the body was not complete within "
                                       f"{timeout_s:g} s ({size:,} bytes received)", retry=True, size=size))
    except httpx.TimeoutException:
        raise FaultError(Fault("stalled after headers", f"headers received, then no data for {timeout_s:g} s "
                               f"({size:,} bytes of body)", retry=True, size=size)) from None
    except (httpx.HTTPError, OSError):
        raise FaultError(Fault("connection reset mid-reply", f"the connection closed after {size:,} bytes of "
                               "the body", retry=True, size=size)) from None
    return b"".join(out)


def _status_fault(code: int, raw: bytes) -> Fault:
    retry = code >= 500 or code in (408, 429)
    kind = "server error" if code >= 500 else "client error"
    note = "" if retry else " (not retried)"
    return Fault(f"HTTP {code}", f"{kind}{note}", retry=retry,
                 excerpt=excerpt(raw.decode("utf-8", errors="replace")) if raw else None)


def _connect_fault(reason: object) -> Fault:
    if isinstance(reason, ConnectionRefusedError):
        return Fault("connection refused", "nothing listens at the endpoint's address", retry=True)
    if isinstance(reason, TimeoutError):
        return Fault("timeout", "no connection within the time limit", retry=True)
    if isinstance(reason, (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)):
        return Fault("connection reset mid-reply", "the connection closed before a complete status line",
                     retry=True)
    if isinstance(reason, socket.gaierror):
        return Fault("connection error", "the endpoint's host name does not resolve", retry=True)
    return Fault("connection error", type(reason).__name__, retry=True)


def _completion(body: bytes) -> Completion:
    """The message text and token count of a chat-completion body; FaultError when it is not one."""
    text = body.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise FaultError(Fault("reply nested too deeply", "the JSON body is nested beyond what is read",
                               size=len(body), excerpt=excerpt(text, 200))) from None
    except ValueError:
        raise FaultError(Fault("body is not JSON", f"HTTP 200 with {len(body):,} bytes that are not JSON",
                               size=len(body), excerpt=excerpt(text))) from None
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices:
        raise FaultError(Fault("no choices", "the JSON body has no non-empty `choices` list", size=len(body),
                               excerpt=excerpt(text)))
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if content is not None and not isinstance(content, str):
        raise FaultError(Fault("message is not text", "choices[0].message.content is not a string",
                               size=len(body), excerpt=excerpt(text)))
    if not content or not content.strip():
        what = "null" if message is None or content is None else "empty"
        raise FaultError(Fault("empty message", f"choices[0].message content is {what}", size=len(body)))
    usage = doc.get("usage") if isinstance(doc, dict) else None
    tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
    used = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and 0 <= tokens < 10**9 else 0
    return Completion(content, used)
