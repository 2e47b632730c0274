"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: no port, no library):
the one driver of the report and dashboard tests (``tests/evaluation``, ``tests/watch``).

Chromium reads commands on its fd 3 and writes answers and events on its fd 4, each a JSON message ended by a NUL
byte. :class:`Browser` opens one page, records every request it sends (``Network.requestWillBeSent``) and evaluates
JavaScript in it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--metrics-recording-only", "--mute-audio")


def chromium() -> str:
    """The Chromium executable; skips the test (with the reason) when none is installed."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium not installed (apt-get install -y chromium)")


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, profile: Path, *flags: str) -> None:
        to_chrome_r, self._out = os.pipe()
        self._in, from_chrome_w = os.pipe()
        # the protocol's fds 3 and 4, from the pipes' (bash: dash refuses an fd above 9 in a redirection)
        script = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.log = profile.parent / f"{profile.name}.chromium.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["bash", "-c", script, chromium(), *FLAGS, *flags, "--remote-debugging-pipe",
                                          f"--user-data-dir={profile}", "about:blank"],
                                         pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL, stderr=log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.requests: list[str] = []
        """Every URL the page asked for."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Network.enable", session=True)
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self, timeout_s: float) -> dict | None:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._in], [], [], timeout_s)
            if not ready:
                return None
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed its protocol pipe (it exited): {self.log.read_text()[-2000:]}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message = json.loads(raw)
        if message.get("method") == "Network.requestWillBeSent":
            self.requests.append(message["params"]["request"]["url"])
        return message

    def call(self, method: str, session: bool = False, timeout_s: float = 30.0, **params: Any) -> dict:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            message = self._read(max(left, 0.0)) if left > 0 else None
            if message is None:
                raise TimeoutError(f"no answer to {method} in {timeout_s} s")
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def pump(self) -> None:
        """Read the events already sent (the requests)."""
        while self._read(0.0) is not None:
            pass

    def goto(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)

    def js(self, expression: str, timeout_s: float = 30.0) -> Any:
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", session=True, timeout_s=timeout_s, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 10.0, every_s: float = 0.01) -> Any:
        """Poll ``expression`` until it is truthy (an exception counts as false: the page is loading); its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = self.js(expression)
            except RuntimeError as err:
                value = err
            if value and not isinstance(value, RuntimeError):
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression} still {value!r} after {timeout_s} s")
            time.sleep(every_s)

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.call("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._in)
        os.close(self._out)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
