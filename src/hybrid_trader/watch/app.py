"""``hybrid-trader watch``'s server: a Starlette app that shows a journal in the browser as the executor writes it.

A :class:`Watcher` holds one read-only connection to the journal (``mode=ro``: no write, no writer's lock; in WAL
mode the executor's commits never wait for it) and polls SQLite's ``data_version`` every ``poll_s`` (a read of
shared memory); when the executor has committed, it rebuilds the page's state (:func:`~hybrid_trader.watch.state.
state`, one short read transaction) and the server pushes it to every open page as a server-sent event. A journal
that cannot be read (missing, empty, damaged, of another schema version, busy) is a state that says why, with the
fix: the page shows it, and the watcher tries again at each poll (the executor may create or finish it).

Routes: ``/`` the page, ``/static/...`` its script and style, ``/static/plotly.min.js`` the charting library from the
installed ``plotly`` package (never a CDN: nothing leaves the machine), ``/api/state`` the state as JSON,
``/events`` the server-sent events (each ``data:`` one state; a comment every ``KEEPALIVE_S`` seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hybrid_trader.errors import UserError
from hybrid_trader.live.journal_read import JournalView, journal_error
from hybrid_trader.watch.state import problem, state

PAGE = Path(__file__).with_name("page")
"""The page's files (package data): index.html, watch.js, watch.css."""
STATIC = {"watch.js": "text/javascript", "watch.css": "text/css"}
MIN_REBUILD_S = 0.25
"""Seconds between two readings of the page's state while the journal keeps changing (a fast replay): what watching
costs the executor's machine stays a few readings a second; a bar is on the page within this and a poll."""
KEEPALIVE_S = 15.0
"""Seconds between the event stream's comments while the journal does not change (proxies and browsers keep it)."""


def plotly_js() -> Path | None:
    """The installed ``plotly`` package's bundled ``plotly.min.js`` (found without importing plotly); None when the
    package is not installed (the page then shows its figures as text only, and says so)."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


class Watcher:
    """The journal's latest state for the page, rebuilt when the executor commits (:meth:`poll`)."""

    def __init__(self, journal: str | Path, *, last: int = 20, bars: int = 390,
                 min_read_s: float = MIN_REBUILD_S) -> None:
        self.path = Path(journal).expanduser()
        self.min_read_s = float(min_read_s)
        self.last = int(last)
        self.bars = int(bars)
        self.seq = 0
        """Bumped at each new state (the event stream sends a state once per value)."""
        self.state: dict[str, Any] = {}
        self._view: JournalView | None = None
        self._inode: int | None = None
        self._version: int | None = None
        self._read_at = -float("inf")
        self._lock = threading.Lock()

    def poll(self) -> bool:
        """Read the journal again when it changed (or could not be read last time); True when the state changed."""
        with self._lock:
            try:
                fresh = self._reopen_if_replaced()
                if self._view is None:
                    self._view = JournalView(self.path)
                    self._inode, fresh = self.path.stat().st_ino, True
                version = self._view.data_version()
                if not fresh and (version == self._version or time.monotonic() - self._read_at < self.min_read_s):
                    return False  # unchanged, or read moments ago: the next poll reads it
                self._read_at = time.monotonic()
                new = state(self._view, last=self.last, bars=self.bars)
                self._version = version
            except UserError as err:
                new = problem(err, str(self.path))
                self._close()
            except sqlite3.Error as err:
                new = problem(journal_error(err, self.path), str(self.path))
                self._close()
            except OSError as err:  # the file went away between the checks
                new = problem(UserError(f"cannot read the journal: {err.strerror or err}", file=str(self.path),
                                        fix="give the --journal FILE of `hybrid-trader run`"), str(self.path))
                self._close()
            if not new["ok"] and not self.state.get("ok", True) and new["detail"] == self.state.get("detail"):
                return False  # the same problem as at the last poll: nothing new to send
            self.state = new
            self.seq += 1
            return True

    def _reopen_if_replaced(self) -> bool:
        """Close the connection when the path now names another file (a new journal); True when it did."""
        if self._view is None:
            return False
        try:
            inode = self.path.stat().st_ino
        except OSError:
            inode = None
        if inode == self._inode:
            return False
        self._close()
        return True

    def _close(self) -> None:
        if self._view is not None:
            with contextlib.suppress(sqlite3.Error):
                self._view.close()
        self._view, self._inode, self._version = None, None, None

    def close(self) -> None:
        with self._lock:
            self._close()


def _moved(watcher: Watcher, seq: int) -> bool:
    return watcher.seq != seq


def create_app(watcher: Watcher, *, poll_s: float = 0.1) -> Starlette:
    """The ASGI app of ``watcher``: the page, its static files, ``/api/state`` and ``/events`` (see the module)."""
    changed = asyncio.Condition()
    plotly = plotly_js()

    async def poller() -> None:
        while True:
            if await asyncio.to_thread(watcher.poll):
                async with changed:
                    changed.notify_all()
            await asyncio.sleep(poll_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(watcher.poll)
        task = asyncio.create_task(poller())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            watcher.close()

    async def page(request: Request) -> Response:
        html = (PAGE / "index.html").read_text(encoding="utf-8")
        html = html.replace("{{plotly}}", '<script src="static/plotly.min.js"></script>' if plotly else "")
        return Response(html, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js" and plotly is not None:
            return FileResponse(plotly, media_type="text/javascript")
        if name not in STATIC:
            return Response("not found", status_code=404)
        return FileResponse(PAGE / name, media_type=STATIC[name])

    async def api_state(request: Request) -> Response:
        return JSONResponse({**watcher.state, "seq": watcher.seq, "charts": plotly is not None})

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            sent = -1
            while True:
                if watcher.seq != sent:
                    sent = watcher.seq
                    body = json.dumps({**watcher.state, "seq": sent, "charts": plotly is not None},
                                      allow_nan=False, default=str)
                    yield f"id: {sent}\ndata: {body}\n\n"
                    continue
                async with changed:
                    try:
                        await asyncio.wait_for(changed.wait_for(functools.partial(_moved, watcher, sent)),
                                               KEEPALIVE_S)
                    except TimeoutError:
                        yield ": keepalive\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return Starlette(routes=[Route("/", page), Route("/static/{name}", static), Route("/api/state", api_state),
                             Route("/events", events)], lifespan=lifespan)
