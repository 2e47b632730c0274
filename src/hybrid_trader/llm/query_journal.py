"""SQLite journal of every query and answer, for later study.

Writes never block the caller: :meth:`QueryJournal.record` puts a row on a queue and a
writer thread inserts rows in batches. :meth:`QueryJournal.close` (idempotent) flushes and
joins the writer.

Schema (see docs/LLM.md)::

    llm_runs(run_id INTEGER PRIMARY KEY, started_utc TEXT, backend TEXT, model TEXT,
             mode TEXT, config_json TEXT)
    llm_prefixes(run_id INTEGER, market TEXT, text TEXT, PRIMARY KEY (run_id, market))
    llm_queries(id INTEGER PRIMARY KEY, run_id INTEGER, wall_time_utc TEXT, env_index INTEGER,
                step INTEGER, market TEXT, bar_time TEXT, prompt TEXT, answer TEXT,
                probs_json TEXT, action INTEGER, action_name TEXT, confidence REAL,
                coverage REAL, abstained INTEGER, abstain_reason TEXT, reason TEXT,
                latency_ms REAL, backend TEXT, from_cache INTEGER, reasoning_json TEXT)

``prompt`` holds the per-query part; the shared prefix is in ``llm_prefixes``.
``reasoning_json`` holds a chain of thought's steps (``{"market": ..., "options": ...,
"risks": ..., "decision": ...}``, see ``llm/parsing.py``), NULL for one-line answers; a
journal made before the column existed gets it on open.
"""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import Advice
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.parsing import parse_cot_steps
from hybrid_trader.llm.redact import redact

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_runs (
    run_id INTEGER PRIMARY KEY, started_utc TEXT, backend TEXT, model TEXT, mode TEXT, config_json TEXT);
CREATE TABLE IF NOT EXISTS llm_prefixes (
    run_id INTEGER, market TEXT, text TEXT, PRIMARY KEY (run_id, market));
CREATE TABLE IF NOT EXISTS llm_queries (
    id INTEGER PRIMARY KEY, run_id INTEGER, wall_time_utc TEXT, env_index INTEGER, step INTEGER,
    market TEXT, bar_time TEXT, prompt TEXT, answer TEXT, probs_json TEXT, action INTEGER,
    action_name TEXT, confidence REAL, coverage REAL, abstained INTEGER, abstain_reason TEXT,
    reason TEXT, latency_ms REAL, backend TEXT, from_cache INTEGER, reasoning_json TEXT);
CREATE INDEX IF NOT EXISTS llm_queries_run ON llm_queries (run_id, env_index, step);
"""

_INSERT = (
    "INSERT INTO llm_queries (run_id, wall_time_utc, env_index, step, market, bar_time, prompt, answer, probs_json, "
    "action, action_name, confidence, coverage, abstained, abstain_reason, reason, latency_ms, backend, from_cache, "
    "reasoning_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_STOP = object()


class QueryJournal:
    """Append-only SQLite record of queries and answers, written by a background thread."""

    def __init__(self, path: str | Path, *, backend: str, model: str, mode: str, config: dict[str, Any]) -> None:
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(str(self.path))
            con.executescript(SCHEMA)
            columns = {row[1] for row in con.execute("PRAGMA table_info(llm_queries)")}
            if "reasoning_json" not in columns:  # a journal written before chains of thought were stored
                con.execute("ALTER TABLE llm_queries ADD COLUMN reasoning_json TEXT")
            cur = con.execute(
                "INSERT INTO llm_runs (started_utc, backend, model, mode, config_json) VALUES (?, ?, ?, ?, ?)",
                (_utc_now(), backend, model, mode, json.dumps(config, default=str)),
            )
            self.run_id = int(cur.lastrowid or 0)  # an INSERT always sets it
            con.commit()
            con.close()
        except (sqlite3.Error, OSError) as err:
            raise UserError(f"cannot open the LLM journal: {err}", file=str(self.path),
                            fix="choose a writable path for llm.journal, or set it to null") from None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._prefixes_seen: set[str] = set()
        self._closed = False
        self._lock = threading.Lock()
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="llm-journal", daemon=True)
        self._thread.start()

    def record(self, env_index: int, step: int, ctx: AdvisorContext, prompt_suffix: str, prefix: str,
               advice: Advice) -> None:
        """Queue one row (never blocks)."""
        if self._closed:
            return
        if ctx.market not in self._prefixes_seen:
            self._prefixes_seen.add(ctx.market)
            self._queue.put(("prefix", (self.run_id, ctx.market, prefix)))
        row = (
            self.run_id, _utc_now(), int(env_index), int(step), ctx.market,
            ctx.timestamp.isoformat() if ctx.timestamp is not None else None, prompt_suffix,
            None if advice.raw is None else redact(advice.raw),
            json.dumps([round(float(x), 6) for x in advice.probs]), int(advice.action), advice.action_name,
            float(advice.confidence), float(advice.coverage), int(advice.abstained), advice.abstain_reason,
            None if advice.reason is None else redact(advice.reason), float(advice.latency_ms), advice.backend,
            int(advice.from_cache), _reasoning(advice.raw),
        )
        self._queue.put(("row", row))

    def _run(self) -> None:
        con = sqlite3.connect(str(self.path), check_same_thread=False)
        try:
            stop = False
            while not stop:
                items = [self._queue.get()]
                while items[-1] is not _STOP:
                    try:
                        items.append(self._queue.get(timeout=0.2 if len(items) < 256 else 0))
                    except queue.Empty:
                        break
                    if len(items) >= 1024 or items[-1] is _STOP:
                        break
                rows = []
                for item in items:
                    if item is _STOP:
                        stop = True
                        continue
                    kind, data = item
                    if kind == "prefix":
                        con.execute("INSERT OR REPLACE INTO llm_prefixes (run_id, market, text) VALUES (?, ?, ?)", data)
                    else:
                        rows.append(data)
                try:
                    if rows:
                        con.executemany(_INSERT, rows)
                    con.commit()
                except sqlite3.Error:
                    self.errors += len(rows)
        finally:
            con.close()

    def close(self, timeout: float = 30.0) -> None:
        """Flush queued rows and join the writer (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)


def _reasoning(raw: str | None) -> str | None:
    """A chain of thought's steps as JSON (None when the answer has no step besides a decision)."""
    steps = parse_cot_steps(raw)
    if set(steps) <= {"decision"}:
        return None
    return json.dumps({k: redact(v) for k, v in steps.items()})


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")
