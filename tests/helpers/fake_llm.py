"""A local OpenAI-compatible HTTP server with scripted replies and scripted faults, for testing the LLM
loop offline. It listens on loopback only; every wait is bounded and ends when the server shuts down,
so a test never hangs on it."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The longest any scripted wait may last (a test's client times out long before).
MAX_WAIT_S = 10.0
# The pause between the header lines of a ("drip", seconds) reply.
DRIP_S = 0.05


class Script:
    """Replies in order; each is one of
    ("json", obj) | ("text", str): a normal reply whose message content is obj as JSON, or the text;
    ("status", code): that HTTP status with an error document;
    ("sleep", seconds): no answer for that long (the client times out), then an empty reply;
    ("body", str): HTTP 200 with exactly this body (not JSON, JSON without choices, nested JSON...);
    ("message", obj): HTTP 200, a well-formed completion whose choices[0].message is obj (None, {...});
    ("big", nbytes): HTTP 200, a completion whose content is nbytes long;
    ("reset", nbytes): headers announcing more, nbytes of the body, then a TCP reset;
    ("hang", seconds): headers announcing a body, then nothing for that long;
    ("drip", seconds): the status line, then one header line every DRIP_S for that long (each well within the
    client's per-read timeout), then a normal reply.
    Once the script is spent every request gets an empty JSON object as content."""

    def __init__(self, replies: list[tuple[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def next(self) -> tuple[str, Any]:
        with self.lock:
            return self.replies.pop(0) if self.replies else ("text", "{}")


def completion(model: str, message: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            script.requests.append(body)
            model = body.get("model", "m")
            kind, value = script.next()
            if kind == "status":
                self._send(value, json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}))
            elif kind == "sleep":
                script.stop.wait(min(value, MAX_WAIT_S))
                self._send(200, json.dumps(completion(model, {"role": "assistant", "content": "{}"})))
            elif kind == "body":
                self._send(200, value, "text/html" if not value.lstrip().startswith(("{", "[")) else None)
            elif kind == "message":
                self._send(200, json.dumps(completion(model, value)))
            elif kind == "big":
                self._send(200, json.dumps(completion(model, {"role": "assistant", "content": "x" * value})))
            elif kind == "reset":
                self._partial(value)
            elif kind == "hang":
                self._headers(200, 1000)
                script.stop.wait(min(value, MAX_WAIT_S))
            elif kind == "drip":
                reply = completion(model, {"role": "assistant", "content": "{}"})
                self._drip(min(value, MAX_WAIT_S), json.dumps(reply))
            else:
                content = json.dumps(value) if kind == "json" else str(value)
                self._send(200, json.dumps(completion(model, {"role": "assistant", "content": content})))

        def _headers(self, code: int, length: int, ctype: str | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype or "application/json")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.wfile.flush()

        def _send(self, code: int, text: str, ctype: str | None = None) -> None:
            data = text.encode()
            try:
                self._headers(code, len(data), ctype)
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _drip(self, seconds: float, text: str) -> None:
            data = text.encode()
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self.wfile.flush()
                for i in range(int(seconds / DRIP_S)):
                    if script.stop.wait(DRIP_S):
                        return
                    self.wfile.write(f"X-Drip-{i}: 1\r\n".encode())
                    self.wfile.flush()
                self.wfile.write(f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode())
                self.wfile.write(data)
            except OSError:
                pass
            self.close_connection = True

        def _partial(self, nbytes: int) -> None:
            try:
                self._headers(200, nbytes * 10)
                self.wfile.write(b"{" + b" " * (nbytes - 1))
                self.wfile.flush()
                # SO_LINGER with a zero timeout: close() sends a reset instead of a clean end of stream
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass
            self.close_connection = True

    return Handler


@contextmanager
def fake_llm(replies: list[tuple[str, Any]]) -> Iterator[tuple[str, Script]]:
    script = Script(replies)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    finally:
        script.stop.set()
        server.shutdown()
        server.server_close()


def refused_url() -> str:
    """A loopback address where nothing listens (the port was just free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
