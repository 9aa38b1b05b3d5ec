"""The report in a real browser (issue 9, part 4): headless Chromium loads report.html from a file:// URL
and, through the DevTools protocol, we check that every chart has a non-empty drawing (elements with a
non-zero rendered box, on screen and in print), that nothing was fetched, and that the console has no
errors; and that a report whose every input text carries markup shows it as text and runs none of it.
CI installs Debian's `chromium`; without one the tests are skipped, saying so.

The DevTools client is a few lines of standard library: an HTTP upgrade and RFC 6455 frames."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_report_escaping import PAYLOADS, hostile_run, visible
from tests.test_report_files import CHARTS, tune

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1")
TIMEOUT_S = 60.0

CHART_PROBE = """JSON.stringify(Array.from(document.querySelectorAll('svg.chart')).map(s => {
  const els = Array.from(s.querySelectorAll('rect,path,circle,line,polyline,polygon'));
  const drawn = els.filter(e => { const b = e.getBBox(); return b.width > 0 || b.height > 0; });
  const box = s.getBoundingClientRect();
  return {id: s.id, elements: els.length, drawn: drawn.length, width: box.width, height: box.height};
}))"""


def _browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


class DevTools:
    """One page's DevTools websocket: send commands, read events (unmasked server frames)."""

    def __init__(self, ws_url: str) -> None:
        rest = ws_url.removeprefix("ws://")
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("DevTools closed during the handshake")
            head += chunk
        assert head.startswith(b"HTTP/1.1 101"), head
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            buf += chunk
        return buf

    def _send_frame(self, payload: bytes, opcode: int = 0x1) -> None:
        n = len(payload)
        header = bytes([0x80 | opcode])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _message(self) -> dict[str, Any]:
        data = b""
        while True:
            b0, b1 = self._recv_exact(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            if opcode == 0x9:  # ping
                self._send_frame(payload, 0xA)
                continue
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the connection")
            data += payload
            if b0 & 0x80:
                return json.loads(data)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self._send_frame(json.dumps({"id": self.next_id, "method": method, "params": params}).encode())
        while True:
            msg = self._message()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            self.events.append(self._message())

    def evaluate(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(out["exceptionDetails"])
        return out["result"]["value"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "run"
    code, _, err = tune(out)
    assert code == 0, err
    return out / "report.html"


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[DevTools]:
    exe = _browser()
    if exe is None:
        pytest.skip("no Chromium on this machine (CI installs Debian's `chromium`: apt-get install -y chromium)")
    profile = tmp_path / "profile"
    log = (tmp_path / "chromium.log").open("wb")
    proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"], stdout=log, stderr=log)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + TIMEOUT_S
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Chromium did not start: {(tmp_path / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT_S) as resp:
            targets = json.load(resp)
        ws = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        tools = DevTools(ws)
        yield tools
        tools.sock.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            out.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(json.dumps(params.get("args", []))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(params["entry"].get("text", "")[:500])
    return out


def test_every_chart_draws_and_the_console_is_clean(report: Path, page: DevTools):
    page.call("Runtime.enable")
    page.call("Log.enable")
    page.call("Page.enable")
    page.call("Page.navigate", url=report.as_uri())
    page.wait_for("Page.loadEventFired")
    for media in ("screen", "print"):
        page.call("Emulation.setEmulatedMedia", media=media)
        charts = json.loads(page.evaluate(CHART_PROBE))
        assert sorted(c["id"] for c in charts) == sorted(f"chart-{c}" for c in CHARTS), media
        for c in charts:
            assert c["width"] > 100 and c["height"] > 50, (media, c)
            assert c["drawn"] > 5 and c["drawn"] >= 0.9 * c["elements"], (media, c)
    assert page.evaluate("performance.getEntriesByType('resource').length") == 0  # nothing fetched
    assert page.evaluate("document.title").startswith("primus tune:")
    time.sleep(0.3)
    page.call("Runtime.evaluate", expression="1")  # drain events that arrived meanwhile
    assert _errors(page.events) == []


# ---- markup from input (issue 17, item 1): escaped, and a Content-Security-Policy behind the escaping ----

PWNED = "document.documentElement.hasAttribute('data-pwned')"
VISIBLE_TEXT = "document.body.innerText.toLowerCase()"
ACTIVE = "document.querySelectorAll('script,img,iframe,object,embed,a[href],form,base').length"


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_run(tmp_path_factory.mktemp("hostile")) / "report.html"


def _load(page: DevTools, path: Path) -> None:
    page.call("Runtime.enable")
    page.call("Log.enable")
    page.call("Page.enable")
    page.call("Page.navigate", url=path.as_uri())
    page.wait_for("Page.loadEventFired")
    time.sleep(0.5)  # an image's error handler would fire after the load event
    page.call("Runtime.evaluate", expression="1")


def test_markup_in_every_input_field_is_shown_as_text_and_never_runs(hostile_report: Path, page: DevTools):
    _load(page, hostile_report)
    assert page.evaluate(PWNED) is False
    assert page.evaluate(ACTIVE) == 0
    shown = page.evaluate(VISIBLE_TEXT)
    for field in PAYLOADS:
        assert visible(field) in shown, field
    assert _errors(page.events) == []


def test_the_content_security_policy_stops_markup_that_got_into_the_page(hostile_report: Path, page: DevTools):
    """Should escaping ever miss a field, the policy still refuses inline handlers and scripts."""
    _load(page, hostile_report)
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=\"x\" onerror=\"document.documentElement"
                  ".setAttribute(\\'data-pwned\\', \\'csp\\')\">'); 1")
    time.sleep(0.5)
    page.call("Runtime.evaluate", expression="1")
    assert page.evaluate(PWNED) is False
    assert any("Content Security Policy" in e for e in _errors(page.events))
