"""Reading a live journal: its schema and versions, the rows it gives back, the recovery reads of an open journal
(:class:`JournalReads`, the base of :class:`~hybrid_trader.live.journal.Journal`) and :func:`read_journal` (every
table, read-only, for reports); with the SQLite errors as UserErrors (:func:`journal_error`).

Times are int64 nanoseconds since the epoch (UTC); the reads take a tz-aware ``pandas.Timestamp`` or an int.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from hybrid_trader.errors import UserError

SCHEMA_VERSION = 4
"""Bump when a table changes. Older journals are upgraded in place when opened for writing
(:data:`MIGRATIONS`: version 1 had no ``fills.source`` and ``errors.code``, version 2 no ``snapshots`` and
``order_changes``, version 3 no ``identity`` and no unique index on the accepted bars' times) and
read as they are; any other version is refused."""
ORDER_STATES = ("new", "sent", "accepted", "partially_filled", "filled", "cancelled", "rejected", "withdrawn")
"""``new``: decided and journaled, not yet handed to the broker; ``sent``: handed over; ``withdrawn``: its order file
was taken back out of NinjaTrader's ``incoming/`` unread (``--nt-ack-timeout``)."""
TERMINAL_STATES = frozenset({"filled", "cancelled", "rejected", "withdrawn"})

SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS bars (
    id INTEGER PRIMARY KEY, time_ns INTEGER,
    open REAL, high REAL, low REAL, close REAL, volume REAL,
    accepted INTEGER NOT NULL, reason TEXT, message TEXT, raw TEXT, recorded_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS bars_time ON bars(time_ns);
CREATE INDEX IF NOT EXISTS bars_reason ON bars(reason, time_ns) WHERE reason IS NOT NULL;
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY, bar_time_ns INTEGER NOT NULL, action INTEGER NOT NULL,
    probabilities TEXT NOT NULL, advice TEXT, veto TEXT, rule_codes TEXT NOT NULL,
    latency_ms REAL, recorded_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS decisions_time ON decisions(bar_time_ns);
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL UNIQUE, bar_time_ns INTEGER NOT NULL,
    intent TEXT NOT NULL, side TEXT NOT NULL, qty INTEGER NOT NULL, order_type TEXT NOT NULL,
    limit_price REAL, stop_price REAL, state TEXT NOT NULL, note TEXT,
    created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS orders_bar ON orders(bar_time_ns);
CREATE TABLE IF NOT EXISTS order_changes (
    id INTEGER PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(order_id), bar_time_ns INTEGER NOT NULL,
    price_field TEXT NOT NULL, price REAL NOT NULL, recorded_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fills (
    id INTEGER PRIMARY KEY, fill_id TEXT UNIQUE, order_id TEXT NOT NULL REFERENCES orders(order_id),
    qty INTEGER NOT NULL, price REAL NOT NULL, time_ns INTEGER NOT NULL, recorded_ns INTEGER NOT NULL,
    source TEXT NOT NULL DEFAULT 'paper');
CREATE TABLE IF NOT EXISTS account (
    id INTEGER PRIMARY KEY, bar_time_ns INTEGER NOT NULL, status TEXT NOT NULL, snapshot TEXT NOT NULL,
    recorded_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS errors (
    id INTEGER PRIMARY KEY, time_ns INTEGER NOT NULL, location TEXT NOT NULL, message TEXT NOT NULL, code TEXT);
CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY, bar_time_ns INTEGER NOT NULL, key TEXT NOT NULL, state BLOB NOT NULL,
    recorded_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS identity (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS bars_accepted_time ON bars(time_ns) WHERE accepted = 1;
"""
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE fills ADD COLUMN source TEXT NOT NULL DEFAULT 'paper'", "ALTER TABLE errors ADD COLUMN code TEXT"),
    2: (),  # the snapshots and order_changes tables: created by SCHEMA (CREATE TABLE IF NOT EXISTS)
    3: (),  # the identity table and the unique index of accepted bars: SCHEMA (the identity adopted by claim)
}
"""Statements that bring a journal of version k to k + 1."""


def to_ns(t: pd.Timestamp | int) -> int:
    """Nanoseconds since the epoch (UTC) of a tz-aware Timestamp or an int (already ns)."""
    if isinstance(t, pd.Timestamp):
        if t.tzinfo is None:
            raise ValueError(f"naive timestamp {t}: give a tz-aware pandas Timestamp or int64 ns (UTC)")
        return int(t.value)
    return int(t)


@dataclass(frozen=True)
class OrderRow:
    """One row of ``orders``."""

    order_id: str
    bar_time_ns: int
    intent: str
    side: str
    qty: int
    order_type: str
    limit_price: float | None
    stop_price: float | None
    state: str
    note: str | None
    created_ns: int
    updated_ns: int

    @property
    def is_open(self) -> bool:
        return self.state not in TERMINAL_STATES


@dataclass(frozen=True)
class Position:
    """Net position rebuilt from the fills: signed contracts and the average entry price (None when flat)."""

    qty: int
    avg_price: float | None


@dataclass(frozen=True)
class AccountRow:
    bar_time_ns: int
    status: str
    snapshot: dict


@dataclass(frozen=True)
class DecisionRow:
    """One row of ``decisions``, its JSON columns read."""

    bar_time_ns: int
    action: int
    probabilities: dict | list
    advice: dict | None
    veto: str | None
    rule_codes: list[str]
    latency_ms: float | None


@dataclass(frozen=True)
class FillRow:
    """One fill with its order's intent and side (``note``: an exit's reason)."""

    time_ns: int
    order_id: str
    intent: str
    side: str
    qty: int
    price: float
    note: str | None
    source: str


ORDER_COLUMNS = ("order_id, bar_time_ns, intent, side, qty, order_type, limit_price, stop_price, state, note, "
                  "created_ns, updated_ns")


class JournalReads:
    """The reads of an open journal (the base of :class:`~hybrid_trader.live.journal.Journal`): what an executor
    restores and recovers from."""

    _db: sqlite3.Connection

    def bar_history(self, until: pd.Timestamp | int) -> dict[str, np.ndarray]:
        """The accepted bars up to ``until``, in time order (a restored snapshot's history): ``time_ns`` (int64),
        ``o``, ``h``, ``lo``, ``c``, ``v`` (float64; a NULL volume as NaN)."""
        rows = self._db.execute("SELECT time_ns, open, high, low, close, volume FROM bars WHERE accepted = 1 AND "
                                "time_ns <= ? ORDER BY time_ns", (to_ns(until),)).fetchall()
        table = np.array(rows, dtype=[("time_ns", "i8"), ("o", "f8"), ("h", "f8"), ("lo", "f8"), ("c", "f8"),
                                      ("v", "O")])
        return {"time_ns": table["time_ns"].copy(), **{k: table[k].copy() for k in ("o", "h", "lo", "c")},
                "v": table["v"].astype(np.float64)}

    def last_snapshot(self) -> tuple[int, str, bytes] | None:
        """``(bar time ns, key, state)`` of the latest snapshot, None when there is none."""
        row = self._db.execute("SELECT bar_time_ns, key, state FROM snapshots ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]), bytes(row[2]))

    # ---- recovery reads -------------------------------------------------------------------
    def last_bar_time(self, accepted_only: bool = True, reason: str | None = None) -> int | None:
        """Time (ns) of the latest journaled bar (accepted ones by default; with this reason code, e.g.
        ``history``), None when there is none."""
        where = ["accepted = 1"] if accepted_only else []
        if reason is not None:
            where.append("reason = ?")
        sql = "SELECT MAX(time_ns) FROM bars" + (" WHERE " + " AND ".join(where) if where else "")
        row = self._db.execute(sql, () if reason is None else (reason,)).fetchone()
        return None if row[0] is None else int(row[0])

    def bar_times(self, reason: str) -> set[int]:
        """Times (ns) of the journaled bars with this reason code (accepted or refused), e.g. ``late``."""
        rows = self._db.execute("SELECT time_ns FROM bars WHERE reason = ? AND time_ns IS NOT NULL", (reason,))
        return {int(r[0]) for r in rows}

    def refused_keys(self, *, reason: str | None = None,
                     after_ns: int | None = None) -> set[tuple[int, float, float, float, float]]:
        """``(time ns, open, high, low, close)`` (``Bar.key``) of the refused bars with this reason code (None: any),
        stamped after ``after_ns`` (None: all)."""
        rows = self._db.execute("SELECT time_ns, open, high, low, close FROM bars WHERE accepted = 0 AND time_ns > ? "
                                "AND (? IS NULL OR reason = ?)",
                                (-(1 << 62) if after_ns is None else int(after_ns), reason, reason))
        return {(int(t), o, h, lo, c) for t, o, h, lo, c in rows}

    def accepted_prices(self, time_ns: int) -> tuple[float, float, float, float] | None:
        """``(open, high, low, close)`` of the accepted bar at ``time_ns``; None when the journal accepted none."""
        row = self._db.execute("SELECT open, high, low, close FROM bars WHERE accepted = 1 AND time_ns = ?",
                               (int(time_ns),)).fetchone()
        return None if row is None else (row[0], row[1], row[2], row[3])

    def first_accepted_between(self, after_ns: int | None, before_ns: int) -> int | None:
        """The first accepted bar's time strictly between ``after_ns`` (None: the start) and ``before_ns``."""
        row = self._db.execute("SELECT MIN(time_ns) FROM bars WHERE accepted = 1 AND time_ns > ? AND time_ns < ?",
                               (-(1 << 62) if after_ns is None else int(after_ns), int(before_ns))).fetchone()
        return None if row[0] is None else int(row[0])

    def last_time(self, table: str) -> int | None:
        """Latest bar time (ns) of ``bars`` (any), ``decisions`` or ``account`` rows; None when empty."""
        column = {"bars": "time_ns", "decisions": "bar_time_ns", "account": "bar_time_ns"}.get(table)
        if column is None:
            raise ValueError(f"no bar times in table {table!r}")
        row = self._db.execute(f"SELECT MAX({column}) FROM {table}").fetchone()
        return None if row[0] is None else int(row[0])

    def open_orders(self) -> list[OrderRow]:
        """Orders not yet filled, cancelled or rejected, oldest first."""
        marks = ",".join("?" * len(TERMINAL_STATES))
        rows = self._db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE state NOT IN ({marks}) ORDER BY id",
                                tuple(sorted(TERMINAL_STATES))).fetchall()
        return [OrderRow(*r) for r in rows]

    def order(self, order_id: str) -> OrderRow | None:
        row = self._db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        return None if row is None else OrderRow(*row)

    def orders_sent_for(self, bar_time: pd.Timestamp | int) -> list[OrderRow]:
        """Orders journaled for the decision on this bar, in any state, oldest first."""
        rows = self._db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE bar_time_ns = ? ORDER BY id",
                                (to_ns(bar_time),)).fetchall()
        return [OrderRow(*r) for r in rows]

    def last_account(self) -> AccountRow | None:
        row = self._db.execute("SELECT bar_time_ns, status, snapshot FROM account ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else AccountRow(int(row[0]), row[1], json.loads(row[2]))

    def errors_at(self, location: str) -> list[tuple[int, str | None, str]]:
        """``(time_ns, code, message)`` of the ``errors`` rows of one location, in time order (e.g. ``halt``)."""
        rows = self._db.execute("SELECT time_ns, code, message FROM errors WHERE location = ? ORDER BY time_ns, id",
                                (location,)).fetchall()
        return [(int(t), c, m) for t, c, m in rows]

    def last_order(self, intent: str) -> OrderRow | None:
        """The latest order of one intent (e.g. ``entry``), None when there is none."""
        row = self._db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE intent = ? ORDER BY id DESC LIMIT 1",
                               (intent,)).fetchone()
        return None if row is None else OrderRow(*row)

    def booked(self, order_id: str, source: str = "broker") -> tuple[int, float]:
        """``(contracts, average price)`` of one order's fills of ``source`` (``(0, 0.0)`` when none)."""
        qty, cost = self._db.execute("SELECT COALESCE(SUM(qty), 0), COALESCE(SUM(qty * price), 0) FROM fills "
                                     "WHERE order_id = ? AND source = ?", (order_id, source)).fetchone()
        return int(qty), (float(cost) / qty if qty else 0.0)

    def was_changed(self, order_id: str) -> bool:
        """Whether a stop or target move (``order_changes``) was journaled for the order."""
        return self._db.execute("SELECT 1 FROM order_changes WHERE order_id = ? LIMIT 1",
                                (order_id,)).fetchone() is not None

    def position_from_fills(self, source: str = "paper") -> Position:
        """Net position from every fill of ``source`` in journal order (BUY +, SELL -), with its average entry
        price."""
        rows = self._db.execute("SELECT o.side, f.qty, f.price FROM fills f JOIN orders o USING (order_id) "
                                "WHERE f.source = ? ORDER BY f.id", (source,)).fetchall()
        qty, avg = 0, 0.0
        for side, q, price in rows:
            d = q if side == "BUY" else -q
            if qty == 0 or (qty > 0) == (d > 0):  # opening or adding: average in
                avg = (avg * abs(qty) + price * abs(d)) / (abs(qty) + abs(d))
            elif abs(d) > abs(qty):  # reversing: the remainder opens at this price
                avg = price
            qty += d
        return Position(qty, avg if qty else None)

    def count(self, table: str) -> int:
        """Rows in one of the journal's tables."""
        if table not in TABLES:
            raise ValueError(f"no table {table!r} in the journal")
        return int(self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    # ---- what a watcher shows (live.journal_read.JournalView, hybrid-trader watch) ---------------------------
    def recent_bars(self, n: int) -> list[tuple[int, float, float, float, float, int]]:
        """The latest ``n`` accepted bars, oldest first: ``(time_ns, open, high, low, close, recorded_ns)``."""
        rows = self._db.execute("SELECT time_ns, open, high, low, close, recorded_ns FROM bars WHERE accepted = 1 "
                                "ORDER BY time_ns DESC LIMIT ?", (int(n),)).fetchall()
        return [(int(t), o, h, lo, c, int(r)) for t, o, h, lo, c, r in reversed(rows)]

    def recent_decisions(self, n: int) -> list[DecisionRow]:
        """The latest ``n`` decisions, oldest first."""
        rows = self._db.execute("SELECT bar_time_ns, action, probabilities, advice, veto, rule_codes, latency_ms "
                                "FROM decisions ORDER BY id DESC LIMIT ?", (int(n),)).fetchall()
        return [DecisionRow(int(t), int(a), json.loads(p) if p else {}, json.loads(adv) if adv else None, veto,
                            json.loads(codes) if codes else [], lat)
                for t, a, p, adv, veto, codes, lat in reversed(rows)]

    def fills_since(self, since_ns: int) -> list[FillRow]:
        """The fills (both sources) at or after ``since_ns``, in journal order, with their orders' intent and
        side."""
        rows = self._db.execute("SELECT f.time_ns, f.order_id, o.intent, o.side, f.qty, f.price, o.note, f.source "
                                "FROM fills f JOIN orders o USING (order_id) WHERE f.time_ns >= ? ORDER BY f.id",
                                (int(since_ns),)).fetchall()
        return [FillRow(int(t), oid, intent, side, int(q), float(p), note, src)
                for t, oid, intent, side, q, p, note, src in rows]

    def recent_account_levels(self, n: int, keys: Sequence[str]) -> list[tuple[int, ...]]:
        """The latest ``n`` account rows, oldest first, as ``(bar_time_ns, *the snapshot's keys)`` (None where a
        snapshot lacks one; read by SQLite's ``json_extract``, no row parsed in Python)."""
        if not all(k.isidentifier() for k in keys):
            raise ValueError(f"account snapshot keys must be names: {keys}")
        cols = "".join(f", json_extract(snapshot, '$.{k}')" for k in keys)
        rows = self._db.execute(f"SELECT bar_time_ns{cols} FROM account ORDER BY id DESC LIMIT ?",
                                (int(n),)).fetchall()
        return [tuple(r) for r in reversed(rows)]

    def recent_latencies(self, n: int) -> list[float]:
        """The latencies (ms, arrival to decision journaled) of the latest ``n`` decisions that have one."""
        rows = self._db.execute("SELECT latency_ms FROM decisions WHERE latency_ms IS NOT NULL ORDER BY id DESC "
                                "LIMIT ?", (int(n),)).fetchall()
        return [float(r[0]) for r in rows]

    def recent_errors(self, n: int) -> list[tuple[int, str, str | None, str]]:
        """The latest ``n`` ``errors`` rows, oldest first: ``(time_ns, location, code, message)``."""
        rows = self._db.execute("SELECT time_ns, location, code, message FROM errors ORDER BY id DESC LIMIT ?",
                                (int(n),)).fetchall()
        return [(int(t), loc, code, msg) for t, loc, code, msg in reversed(rows)]

    def refused_bars(self) -> int:
        """Bars refused on arrival (``accepted = 0``)."""
        return int(self._db.execute("SELECT COUNT(*) FROM bars WHERE accepted = 0").fetchone()[0])

    def integrity_check(self) -> str:
        """``ok`` or SQLite's description of the damage."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


TABLES = ("bars", "decisions", "orders", "fills", "account", "errors")
"""The journal's tables (``schema_version`` aside)."""


def journal_error(err: sqlite3.Error, path: Path, doing: str = "read") -> UserError:
    """SQLite's ``err`` on the journal ``path`` as a UserError that says what happened: a full disk, a read-only
    file or folder, a damaged file or one that is not a journal, an I/O error; with the fix."""
    text = str(err)
    low = text.lower()
    if "full" in low:
        return UserError(f"cannot write the journal: the disk is full ({text})", file=str(path),
                         fix="free disk space (df -h shows it) and run the same command again: the journal resumes "
                             "where it was; or give a --journal on another disk")
    if "readonly" in low or "read-only" in low or ("unable to open" in low and doing != "read"):
        return UserError(f"cannot {doing} the journal: it is read-only ({text})", file=str(path),
                         fix="make the file and its folder writable (chmod u+w), or give a new --journal file; a "
                             "read-only journal can still be read: hybrid-trader report FILE")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return UserError(f"the file is damaged or not a journal ({text})", file=str(path),
                         fix="give the journal.sqlite a run wrote (restore it from a backup if it was cut short), "
                             "or a new --journal file")
    if "i/o" in low:
        return UserError(f"cannot {doing} the journal: a disk error ({text}; a full disk or a file size limit "
                         "gives it too)", file=str(path),
                         fix="check the free space (df -h), the file size limit (ulimit -f) and the disk (dmesg), "
                             "then run the same command again: the journal resumes where it was")
    return UserError(f"cannot {doing} the journal ({text})", file=str(path),
                     fix="check the file and its folder, or give a new --journal file")


def read_only_uri(path: Path) -> str:
    """The SQLite URI that opens ``path`` read-only (``mode=ro``): never a write, and no writer's lock; in WAL mode
    it reads the last committed transaction while a writer goes on."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


def open_read_only(path: str | Path, timeout_s: float = 30.0) -> tuple[sqlite3.Connection, int]:
    """A read-only connection to the journal ``path`` and its schema version (one this program reads: the current or
    an older one, read as it is). A missing or empty file, a file that is not a journal, a damaged one or one of
    another schema version is a UserError naming it, with the fix."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError("journal not found", file=str(path), fix="give the --journal FILE of `hybrid-trader run`")
    if path.stat().st_size == 0:
        raise UserError("an empty file (0 bytes), not a journal", file=str(path),
                        fix="give the --journal FILE of `hybrid-trader run` (a journal holds at least its tables)")
    try:
        db = sqlite3.connect(read_only_uri(path), uri=True, timeout=timeout_s, isolation_level=None,
                             check_same_thread=False)  # a server's worker thread reads it
    except sqlite3.Error as err:
        raise journal_error(err, path) from None
    try:
        version = db.execute("SELECT version FROM schema_version").fetchone()
    except sqlite3.Error as err:
        db.close()
        if "no such table" in str(err):
            raise UserError(f"not a journal: {err}", file=str(path),
                            fix="give the --journal FILE of `hybrid-trader run`") from None
        raise journal_error(err, path) from None
    if version is None or version[0] not in (*MIGRATIONS, SCHEMA_VERSION):
        db.close()
        raise UserError(f"journal schema version {None if version is None else version[0]} is not this "
                        f"program's version {SCHEMA_VERSION}", file=str(path), column="schema_version",
                        value=None if version is None else version[0],
                        fix="use the hybrid-trader version that wrote this journal")
    return db, int(version[0])


class JournalView(JournalReads):
    """A journal opened read-only (:func:`open_read_only`) while a running executor may be writing it: the reads of
    :class:`JournalReads`, never a write, nor the writer's lock file. A journal of an older schema version is read as
    it is (version 1's missing columns read as their defaults). Use as a context manager."""

    def __init__(self, path: str | Path, timeout_s: float = 1.0) -> None:
        self.path = Path(path).expanduser()
        self._db, self.version = open_read_only(self.path, timeout_s)
        if self.version == 1:  # temporary views (this connection's, in memory) with version 2's columns
            self._db.execute("CREATE TEMP VIEW fills AS SELECT *, 'paper' AS source FROM main.fills")
            self._db.execute("CREATE TEMP VIEW errors AS SELECT *, NULL AS code FROM main.errors")

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: changes when another connection (the executor) commits."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def identity(self) -> dict[str, str]:
        """The run the journal belongs to (``{}`` before its first claim or in a journal older than identities)."""
        try:
            return dict(self._db.execute("SELECT key, value FROM identity").fetchall())
        except sqlite3.OperationalError:  # version 3 and older: no identity table
            return {}

    @contextmanager
    def reading(self) -> Iterator[JournalView]:
        """One read transaction: the reads inside it see the same committed state (the writer goes on)."""
        self._db.execute("BEGIN")
        try:
            yield self
        finally:
            self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> JournalView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_journal(path: str | Path) -> dict[str, pd.DataFrame]:
    """Every table of a journal as a DataFrame, read-only (a running executor may be writing it).

    ``order_changes`` too where the journal has it (stop and target moves; version 2 on). JSON columns stay
    text; times stay int64 nanoseconds (UTC). A missing file, a file that
    is not a journal, or a journal of another schema version is a UserError naming it.
    """
    path = Path(path).expanduser()
    db, _ = open_read_only(path)
    try:
        try:
            tables = {t: pd.read_sql_query(f"SELECT * FROM {t} ORDER BY id", db) for t in TABLES}
            if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'order_changes'").fetchone():
                tables["order_changes"] = pd.read_sql_query("SELECT * FROM order_changes ORDER BY id", db)
        finally:
            db.close()
        if "source" not in tables["fills"]:  # a version 1 journal, read as it is
            tables["fills"]["source"] = "paper"
        if "code" not in tables["errors"]:
            tables["errors"]["code"] = None
        return tables
    except sqlite3.OperationalError as err:
        if "no such table" in str(err):
            raise UserError(f"not a journal: {err}", file=str(path),
                            fix="give the --journal FILE of `hybrid-trader run`") from None
        raise journal_error(err, path) from None
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as err:
        cause = err.__cause__ if isinstance(err.__cause__, sqlite3.Error) else err
        if isinstance(cause, sqlite3.Error) and "no such table" not in str(cause):
            raise journal_error(cause, path) from None
        raise UserError(f"not a journal: {err}", file=str(path),
                        fix="give the --journal FILE of `hybrid-trader run`") from None
