"""A local OpenAI-compatible HTTP server with scripted replies, for testing the LLM loop offline."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Script:
    """Replies in order; each is ("json", obj) | ("text", str) | ("status", code) | ("sleep", seconds)."""

    def __init__(self, replies: list[tuple[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def next(self) -> tuple[str, Any]:
        with self.lock:
            return self.replies.pop(0) if self.replies else ("text", "{}")


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            script.requests.append(body)
            kind, value = script.next()
            if kind == "status":
                self._send(value, {"error": {"message": "scripted failure", "type": "server_error"}})
                return
            if kind == "sleep":
                time.sleep(value)
                kind, value = "text", "{}"
            content = json.dumps(value) if kind == "json" else str(value)
            self._send(200, {
                "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
            })

        def _send(self, code: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


@contextmanager
def fake_llm(replies: list[tuple[str, Any]]) -> Iterator[tuple[str, Script]]:
    script = Script(replies)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        server.shutdown()
        server.server_close()
