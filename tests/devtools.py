"""A headless Chromium or Chrome, found wherever it is and driven through the Chrome DevTools protocol.

Used by the browser tests (``tests/test_site.py``: the static book; ``tests/test_jupyterlab.py``: a chapter run
in JupyterLab). ``find_browser`` looks, in order, at the ``CHROME`` environment variable (a path), the commands
``chromium``, ``chromium-browser``, ``google-chrome``, ``google-chrome-stable`` on ``PATH``, and the macOS
applications. Never a downloaded browser build.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

BROWSER_COMMANDS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MACOS_APPS = (
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
)
BROWSER_HELP = (
    "install Chromium or Google Chrome (Debian/Ubuntu: apt-get install chromium; macOS: the Chrome app), "
    "or set CHROME=/path/to/chrome, to run the browser tests"
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1600",
]
PAGE_TIMEOUT_S = 60


def find_browser(env: dict | None = None) -> Path | None:
    """The first Chromium/Chrome found (``$CHROME``, then ``PATH``, then the macOS applications), or None."""
    env = os.environ if env is None else env
    if env.get("CHROME"):
        given = shutil.which(env["CHROME"], path=env.get("PATH")) or env["CHROME"]
        return Path(given) if Path(given).is_file() and os.access(given, os.X_OK) else None
    for name in BROWSER_COMMANDS:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found:
            return Path(found)
    return next((Path(app) for app in MACOS_APPS if os.access(app, os.X_OK)), None)


class Chromium:
    """Headless Chromium driven through the Chrome DevTools protocol (one page, one websocket)."""

    def __init__(self, executable: Path, profile: Path):
        import websocket  # websocket-client

        self.proc = subprocess.Popen(
            [
                str(executable),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"{executable} did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never via a proxy
        with no_proxy.open(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        # our own socket to the loopback address: websocket-client would send it through an http_proxy of the env
        ws_url = page["webSocketDebuggerUrl"]
        sock = socket.create_connection((urllib.parse.urlsplit(ws_url).hostname, port), timeout=60)
        self.ws = websocket.create_connection(ws_url, suppress_origin=True, timeout=60, socket=sock)
        self.events: list[dict] = []
        self._id = 0

    def send(self, method: str, **params):
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def js(self, expression: str, await_promise: bool = False):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}...: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = PAGE_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"waited {timeout} s for: {expression}")

    def key(self, key: str, code: int) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=key,
                windowsVirtualKeyCode=code,
                nativeVirtualKeyCode=code,
            )

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def no_built_site(message: str):
    """Skip a test that reads the built book when there is none; fail instead with ``REQUIRE_SITE=1`` (``make
    test-site``, which CI runs after ``make book``)."""
    if os.environ.get("REQUIRE_SITE") == "1":
        pytest.fail(f"REQUIRE_SITE=1 but {message}")
    pytest.skip(message)
