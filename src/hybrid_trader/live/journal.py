"""The live journal: every bar, decision, order, fill, account snapshot and error, in SQLite.

One file per run (``--journal FILE``), in WAL mode. Every write is one transaction
(``BEGIN IMMEDIATE`` ... ``COMMIT``) or one savepoint of the executor's batch of bars
(:mod:`~hybrid_trader.live.journal_tx`), so a kill -9 at any moment leaves the journal as it was after
the last completed commit, and a Ctrl-C between any two lines leaves no write in part: the recovery
reads (:meth:`Journal.last_bar_time`,
:meth:`Journal.open_orders`, :meth:`Journal.position_from_fills`,
:meth:`Journal.orders_sent_for`) are what the executor restarts from, and
:meth:`Journal.record_order` is idempotent on ``order_id`` so a restart never sends an
order twice.

``synchronous=FULL``: in WAL mode ``NORMAL`` already survives a killed process (the WAL
is in the OS's page cache), but a power loss or OS crash can roll back the last
transactions; an order the broker received whose row was rolled back would be sent again
on recovery. ``FULL`` fsyncs the WAL at each commit: about a millisecond per write, at
most a few writes per bar.

A journal belongs to one run and has one writer: :meth:`Journal.claim` records the run's
identity on first use and refuses another run's journal before any row is written; a
:class:`~hybrid_trader.run.lock.FolderLock` on ``<journal>.lock``, held while the journal is
open for writing, refuses a second writer at once naming the first's PID; and a unique
index makes two accepted rows of one bar impossible. SQLite's write failures (a full disk,
a read-only or damaged file) are UserErrors naming the file and the fix.

Times are stored as int64 nanoseconds since the epoch (UTC); the API takes a tz-aware
``pandas.Timestamp`` or an int. JSON columns hold plain dicts / lists.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.errors import UserError
from hybrid_trader.live.journal_read import (
    MIGRATIONS,
    ORDER_COLUMNS,
    ORDER_STATES,
    SCHEMA,
    SCHEMA_VERSION,
    TABLES,
    JournalReads,
    OrderRow,
    journal_error,
    to_ns,
)
from hybrid_trader.live.journal_tx import WriteUnit
from hybrid_trader.run.lock import FolderLock

IDENTITY_CHECKED = ("run_tag", "model", "config", "market")
"""The identity fields a journal is refused on (``run``, the run folder, is recorded and named, not compared: a moved
folder is the same run)."""
RUN_ID = "run_id"
"""The identity field the journal itself draws on first use (8 hex digits): it goes into every order id, so that a
re-run on a new journal never collides with an earlier one's orders, while a restart on this journal makes the same
ids. A journal that already held orders before journals drew one keeps ``""`` (its orders keep their old ids)."""
FILL_SOURCES = ("paper", "broker")
"""``paper``: the executor's own broker (the decisions); ``broker``: a fill NinjaTrader reported."""

SIDES = ("BUY", "SELL")


@dataclass(frozen=True)
class OrderPrices:
    """An order's type and the price levels it carries (the ``orders`` table's three columns)."""

    order_type: str = "MARKET"
    """MARKET, LIMIT, STOPMARKET, CLOSEPOSITION, ..."""
    limit_price: float | None = None
    """A limit order's level; None: none."""
    stop_price: float | None = None
    """A stop order's level; None: none."""


MARKET = OrderPrices()
"""A market order: no price level."""
CLOSE_POSITION = OrderPrices("CLOSEPOSITION")
"""NinjaTrader's CLOSEPOSITION: flatten at the market (no price level)."""


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars and arrays as Python values, NaN and infinities as null."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(_plain(value), sort_keys=True, allow_nan=False, default=str)



class Journal(JournalReads):
    """The SQLite journal of one live run. Use as a context manager (closes the connection)."""

    def __init__(self, path: str | Path, writer: str = "journal") -> None:
        """Open (or create) the journal for writing, holding its writer lock (``writer``: what the lock file says the
        holder does, for a second writer's error) until :meth:`close`."""
        self.path = Path(path).expanduser()
        if self.path.is_dir():
            raise UserError("the journal path is a folder", file=str(self.path),
                            fix="give a file name, e.g. --journal runs/x/journal.sqlite")
        if not self.path.parent.is_dir():
            raise UserError("the journal's folder does not exist", file=str(self.path),
                            fix=f"create it first (mkdir -p {self.path.parent}) or choose another path")
        if self.path.exists() and not self.path.is_file():  # /dev/full, a pipe: SQLite would litter beside it
            raise UserError("the journal path is a device or pipe, not a file: no journal can be kept there",
                            file=str(self.path), fix="give a file name, e.g. --journal runs/x/journal.sqlite")
        self._failed = False
        self._closed = False
        self._lock: FolderLock | None = None
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0,
                                       check_same_thread=False)  # the flat guard's thread, under the executor's lock
        except sqlite3.Error as err:
            raise self._error(err, "open") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")  # reads the header: a damaged file or a full disk fails here
            self._lock = FolderLock(self.path.parent, writer, name=f"{self.path.name}.lock",
                                    subject=self.path).acquire()
            weakref.finalize(self, self._lock.release)  # a journal dropped without close() frees its lock
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._init_schema()
        except BaseException as err:
            self._db.close()
            if self._lock is not None:
                self._lock.release()
            if isinstance(err, sqlite3.Error):
                raise self._error(err, "open") from None
            if isinstance(err, OSError):  # the lock file: a read-only folder
                raise UserError(f"cannot write the journal's lock file: {err.strerror or err}",
                                file=str(err.filename or self.path),
                                fix="make the journal's folder writable, or give a --journal in a writable folder"
                                ) from None
            raise

    def _init_schema(self) -> None:
        with self._tx() as db:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    try:
                        db.execute(stmt)
                    except sqlite3.IntegrityError:  # the unique index, on a journal two writers spoiled
                        raise self._duplicate_bars(db) from None
            rows = db.execute("SELECT version FROM schema_version").fetchall()
            if not rows:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            found = rows[0][0]
            while found in MIGRATIONS:  # an older journal: add the new columns, keep every row
                for stmt in MIGRATIONS[found]:
                    db.execute(stmt)
                found += 1
                db.execute("UPDATE schema_version SET version = ?", (found,))
        if found != SCHEMA_VERSION:
            raise UserError(
                f"journal schema version {found} is not this program's version {SCHEMA_VERSION}",
                file=str(self.path), column="schema_version", value=found,
                fix="use the hybrid-trader version that wrote this journal, or start a new journal file")

    def _duplicate_bars(self, db: sqlite3.Connection) -> UserError:
        row = db.execute("SELECT time_ns, COUNT(*) FROM bars WHERE accepted = 1 GROUP BY time_ns HAVING COUNT(*) > 1 "
                         "ORDER BY time_ns LIMIT 1").fetchone()
        when = "?" if row is None else pd.Timestamp(int(row[0]), tz="UTC")
        return UserError(f"the journal holds {row[1] if row else 'two or more'} accepted rows of the bar at {when}: "
                         "two processes wrote it at once (before journals had one writer), and its later state cannot "
                         "be trusted", file=str(self.path), column="bars.time_ns",
                         fix="use a new --journal file (this one stays readable: hybrid-trader report FILE)")

    def _error(self, err: sqlite3.Error, doing: str) -> UserError:
        """SQLite's error on this journal as a UserError saying what happened and the fix (and no write after it)."""
        self._failed = True
        return journal_error(err, self.path, doing)

    # ---- identity -------------------------------------------------------------------------
    def identity(self) -> dict[str, str]:
        """The run this journal belongs to (``{}`` before :meth:`claim`)."""
        return dict(self._db.execute("SELECT key, value FROM identity").fetchall())

    def run_id(self) -> str:
        """The id this journal drew when first claimed (:data:`RUN_ID`; ``""`` before :meth:`claim`, or for a journal
        that held orders before journals drew one)."""
        row = self._db.execute("SELECT value FROM identity WHERE key = ?", (RUN_ID,)).fetchone()
        return "" if row is None else str(row[0])

    def claim(self, identity: Mapping[str, str]) -> str:
        """Make the journal ``identity``'s (the run ``run``, its order tag ``run_tag``, ``model``, ``config`` and
        ``market`` hashes or names), before any row is written: recorded on first use; a journal of another run
        (a field of :data:`IDENTITY_CHECKED` differs) is a UserError naming both; a journal written before journals
        recorded their run adopts it. Returns a note for that adoption ("" otherwise)."""
        ident = {k: str(v) for k, v in identity.items()}
        with self._tx() as db:
            have = dict(db.execute("SELECT key, value FROM identity").fetchall())
            ordered = db.execute("SELECT 1 FROM orders LIMIT 1").fetchone() is not None
            if have:
                differ = [k for k in IDENTITY_CHECKED if have.get(k) != ident.get(k)]
                if differ:
                    raise UserError(
                        f"the journal belongs to the run {have.get('run')} (order tag {have.get('run_tag')}), not to "
                        f"{ident.get('run')} (order tag {ident.get('run_tag')}): their {', '.join(differ)} differ",
                        file=str(self.path),
                        fix="use a new --journal file for this run (the other run's journal is left as it was)")
                if RUN_ID not in have:  # claimed before journals drew a run id
                    db.execute("INSERT INTO identity (key, value) VALUES (?, ?)",
                               (RUN_ID, "" if ordered else uuid.uuid4().hex[:8]))
                return ""
            written = any(db.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone() for t in TABLES)
            ident[RUN_ID] = "" if ordered else uuid.uuid4().hex[:8]
            db.executemany("INSERT INTO identity (key, value) VALUES (?, ?)", sorted(ident.items()))
        if written:
            return (f"the journal {self.path} was written before journals recorded their run: it now belongs to "
                    f"{ident.get('run')} (order tag {ident.get('run_tag')}), and another run is refused")
        return ""

    def stops(self) -> dict[int, str]:
        """The executor's stops (Ctrl-C) by the bar time they followed: ``flatten`` or ``protect`` (an ``errors`` row
        of location ``stop``; a journal of before those rows: its ``MANUAL_EXIT`` exits, which only a flatten
        makes)."""
        rows = self._db.execute("SELECT time_ns, code FROM errors WHERE location = 'stop'").fetchall()
        out = {int(t): str(c).removeprefix("stop:") for t, c in rows}
        for (t,) in self._db.execute("SELECT bar_time_ns FROM orders WHERE intent = 'exit' AND note = ?",
                                     (MANUAL_EXIT,)):
            out.setdefault(int(t), "flatten")
        return out

    # ---- plumbing -----------------------------------------------------------------------
    def _tx(self, *, one_statement: bool = False) -> WriteUnit:
        """One unit of writes (``with self._tx() as db:``), committed as a whole or not at all
        (:class:`~hybrid_trader.live.journal_tx.WriteUnit`); ``one_statement``: the unit is a single INSERT, atomic by
        itself, so inside a batch it needs no savepoint (the rows of every bar: about 3 us a write saved)."""
        return WriteUnit(self._db, self._error, one_statement)

    def begin(self) -> None:
        """Start one transaction for the writes up to :meth:`commit` (one fsync for many rows).

        For rows a restart can write again (bars, decisions and account rows of a replay):
        a kill before :meth:`commit` loses them all, never a part. No-op when one is open.
        """
        if not self._db.in_transaction:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as err:
                raise self._error(err, "write") from None

    def commit(self) -> None:
        """Commit the open transaction (:meth:`begin`'s, or one a Ctrl-C left open mid-write); no-op when none is."""
        if self._db.in_transaction:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as err:
                raise self._error(err, "write") from None

    def close(self) -> None:
        """Commit, close and release the writer lock; after a failed write, roll back quietly (its error was
        raised); a second close does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._failed:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            else:
                self.commit()
        finally:
            self._db.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writes -------------------------------------------------------------------------
    def record_bar(self, time: pd.Timestamp | int | None, ohlcv: Sequence[float], *, accepted: bool = True,
                   reason: str | None = None, message: str | None = None, raw: str | None = None) -> None:
        """A bar as it arrived (``ohlcv``: its open, high, low, close and volume), accepted or rejected (with the
        gate's reason code and message); ``time`` None for a line whose timestamp could not be read (``raw``: the
        line as written)."""
        if not accepted and not reason:
            raise ValueError("a rejected bar needs its reason code")
        open, high, low, close, volume = ohlcv
        tns = None if time is None else to_ns(time)
        try:
            with self._tx(one_statement=True) as db:
                db.execute("INSERT INTO bars (time_ns, open, high, low, close, volume, accepted, reason, message, raw, "
                           "recorded_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           (tns, _real(open), _real(high), _real(low), _real(close),
                            _real(volume), int(accepted), reason, message, raw, _now()))
        except sqlite3.IntegrityError:  # the unique index of accepted bars: never two rows of one bar
            raise ValueError(f"the journal {self.path} already holds the accepted bar at "
                             f"{pd.Timestamp(tns, tz='UTC')}: a bar is journaled once") from None

    def record_decision(self, bar_time: pd.Timestamp | int, action: int, probabilities: Sequence[float] | Mapping,
                        *, advice: Mapping | None = None, veto: str | None = None,
                        rule_codes: Sequence[str] = (), latency_ms: float | None = None) -> None:
        """The agent's decision on a bar: action, distribution, advice, veto and rule reason codes, latency."""
        probs = dict(probabilities) if isinstance(probabilities, Mapping) else [float(p) for p in probabilities]
        with self._tx(one_statement=True) as db:
            db.execute("INSERT INTO decisions (bar_time_ns, action, probabilities, advice, veto, rule_codes, "
                       "latency_ms, recorded_ns) VALUES (?,?,?,?,?,?,?,?)",
                       (to_ns(bar_time), int(action), _json(probs), None if advice is None else _json(dict(advice)),
                        veto, _json(list(rule_codes)), latency_ms, _now()))

    def record_order(self, order_id: str, bar_time: pd.Timestamp | int, intent: str, side: str, qty: int, *,
                     prices: OrderPrices = MARKET, state: str = "new", note: str | None = None) -> OrderRow:
        """Journal an order (``prices``: its type and levels) before it is sent; an ``order_id`` already there
        returns that row, unchanged."""
        _check_state(state)
        if side not in SIDES:
            raise ValueError(f"order {order_id}: side {side!r} is not one of {SIDES}")
        if int(qty) <= 0:
            raise ValueError(f"order {order_id}: qty {qty} must be > 0 (side gives the direction)")
        now = _now()
        with self._tx() as db:
            db.execute(f"INSERT INTO orders ({ORDER_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                       "ON CONFLICT(order_id) DO NOTHING",
                       (order_id, to_ns(bar_time), intent, side, int(qty), prices.order_type, prices.limit_price,
                        prices.stop_price, state, note, now, now))
            row = db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        return OrderRow(*row)

    def update_order_state(self, order_id: str, state: str, note: str | None = None) -> OrderRow:
        """Move an order to ``state`` (e.g. ``sent``, ``filled``); a KeyError for an unknown order."""
        _check_state(state)
        with self._tx() as db:
            cur = db.execute("UPDATE orders SET state = ?, note = COALESCE(?, note), updated_ns = ? "
                             "WHERE order_id = ?", (state, note, _now(), order_id))
            if cur.rowcount == 0:
                raise KeyError(f"order {order_id!r} is not in the journal {self.path}")
            row = db.execute(f"SELECT {ORDER_COLUMNS} FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        return OrderRow(*row)

    def record_change(self, order_id: str, bar_time: pd.Timestamp | int, price_field: str, price: float) -> None:
        """Journal a working order's new price (a CHANGE: break-even, trailing) before it is sent: a row in
        ``order_changes`` and the order's ``stop_price`` or ``limit_price`` (``price_field``); a KeyError for an
        unknown order."""
        if price_field not in ("stop_price", "limit_price"):
            raise ValueError(f"order {order_id}: price_field {price_field!r} is neither stop_price nor limit_price")
        now = _now()
        with self._tx() as db:
            cur = db.execute(f"UPDATE orders SET {price_field} = ?, updated_ns = ? WHERE order_id = ?",
                             (float(price), now, order_id))
            if cur.rowcount == 0:
                raise KeyError(f"order {order_id!r} is not in the journal {self.path}")
            db.execute("INSERT INTO order_changes (order_id, bar_time_ns, price_field, price, recorded_ns) "
                       "VALUES (?,?,?,?,?)", (order_id, to_ns(bar_time), price_field, float(price), now))

    def record_fill(self, order_id: str, qty: int, price: float, time: pd.Timestamp | int,
                    fill_id: str | None = None, source: str = "paper") -> bool:
        """A fill of ``qty`` (> 0) contracts of an order; a repeated ``fill_id`` is ignored (returns False).

        ``source``: ``paper`` (the executor's broker) or ``broker`` (reported by NinjaTrader)."""
        if int(qty) <= 0:
            raise ValueError(f"fill of order {order_id}: qty {qty} must be > 0")
        if source not in FILL_SOURCES:
            raise ValueError(f"fill of order {order_id}: source {source!r} is not one of {FILL_SOURCES}")
        with self._tx() as db:
            if db.execute("SELECT 1 FROM orders WHERE order_id = ?", (order_id,)).fetchone() is None:
                raise KeyError(f"fill for order {order_id!r}, which is not in the journal {self.path}")
            cur = db.execute("INSERT INTO fills (fill_id, order_id, qty, price, time_ns, recorded_ns, source) "
                             "VALUES (?,?,?,?,?,?,?) ON CONFLICT(fill_id) DO NOTHING",
                             (fill_id, order_id, int(qty), float(price), to_ns(time), _now(), source))
            return cur.rowcount == 1

    def record_account(self, bar_time: pd.Timestamp | int, status: str, snapshot: Mapping[str, Any]) -> None:
        """The account after a bar: status (e.g. ``active``, ``breached``) and a JSON snapshot
        (balance, threshold, day P&L, ...)."""
        with self._tx(one_statement=True) as db:
            db.execute("INSERT INTO account (bar_time_ns, status, snapshot, recorded_ns) VALUES (?,?,?,?)",
                       (to_ns(bar_time), status, _json(dict(snapshot)), _now()))

    def record_error(self, where: str, message: str, time: pd.Timestamp | int | None = None,
                     code: str | None = None) -> None:
        """Something that went wrong and was survived (a rejected bar's cause, a broker timeout ...), with
        its reason code (e.g. ``broker:rejected``)."""
        with self._tx() as db:
            db.execute("INSERT INTO errors (time_ns, location, message, code) VALUES (?,?,?,?)",
                       (_now() if time is None else to_ns(time), where, message, code))

    def record_snapshot(self, bar_time: pd.Timestamp | int, key: str, state: bytes) -> None:
        """The executor's state after a bar (``live.snapshot``), replacing the earlier snapshots: one row."""
        with self._tx() as db:
            cur = db.execute("INSERT INTO snapshots (bar_time_ns, key, state, recorded_ns) VALUES (?,?,?,?)",
                             (to_ns(bar_time), key, sqlite3.Binary(state), _now()))
            db.execute("DELETE FROM snapshots WHERE id < ?", (cur.lastrowid,))


MANUAL_EXIT = "MANUAL_EXIT"
"""Exit reason of a position flattened when the executor stops (``--on-exit flatten``)."""


def _real(x: Any) -> float | None:
    """A number for a REAL column (NaN, which SQLite cannot hold, as NULL)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _check_state(state: str) -> None:
    if state not in ORDER_STATES:
        raise ValueError(f"order state {state!r} is not one of {ORDER_STATES}")


def _now() -> int:
    return time.time_ns()
