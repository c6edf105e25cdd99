"""A small Chrome DevTools Protocol driver for Debian's headless ``chromium`` (tests only; no browser download).

Starts ``chromium --headless=new --remote-debugging-port=0`` with a throw-away profile, reads the port
from ``DevToolsActivePort``, attaches to the page target over a websocket (``websocket-client``) and
offers ``navigate``, ``evaluate`` (awaiting promises), ``wait_for`` and ``screenshot``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["find_chromium", "Chromium", "CDPError"]


class CDPError(RuntimeError):
    """The browser reported an error, or a wait timed out."""


def find_chromium() -> str | None:
    """Path of the chromium binary (``$CHROMIUM``, then chromium / chromium-browser on PATH)."""
    for cand in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


class Chromium:
    """One headless chromium with one page; use as a context manager."""

    def __init__(self, binary: str, *, width: int = 1400, height: int = 1000, timeout: float = 30.0) -> None:
        import websocket  # websocket-client

        self._profile = tempfile.mkdtemp(prefix="noderag-chromium-")
        args = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
                "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "--force-device-scale-factor=1",
                f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.is_file() or len(port_file.read_text().splitlines()) < 2:
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited with {self.proc.returncode}: {self.proc.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                self.close()
                raise CDPError(f"chromium did not open its debugging port within {timeout:.0f} s")
            time.sleep(0.05)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as r:
            targets = json.load(r)
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self._id = 0
        self.console: list[str] = []
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, **params: Any) -> dict:
        """Send one command and return its result (events that arrive meanwhile are recorded)."""
        self._id += 1
        mid = self._id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if msg.get("method") == "Runtime.consoleAPICalled":
                args = msg["params"].get("args", [])
                self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in args))
            elif msg.get("method") == "Runtime.exceptionThrown":
                self.console.append("exception: " + json.dumps(msg["params"].get("exceptionDetails", {}))[:500])

    def evaluate(self, expression: str) -> Any:
        """Value of a JavaScript expression (promises awaited); a thrown error raises :class:`CDPError`."""
        res = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in res:
            raise CDPError(f"{expression[:80]}: {res['exceptionDetails'].get('exception', {}).get('description')}")
        return res.get("result", {}).get("value")

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        """Open ``url`` and wait until the document has loaded."""
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href.startsWith(%s)" % json.dumps(url[:20]),
                      timeout)

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll until ``expression`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out after {timeout:.0f} s waiting for {expression!r}; console: {self.console}")
            time.sleep(0.05)

    def screenshot(self, path: str | os.PathLike) -> Path:
        """Save a PNG of the whole page."""
        m = self.call("Page.getLayoutMetrics")
        size = m.get("cssContentSize") or m.get("contentSize")
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Stop the browser and remove its profile."""
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
