"""The journal's transactions: one write's unit, whole or absent, and the executor's batch of bars.

:class:`WriteUnit` is what every :class:`~hybrid_trader.live.journal.Journal` write runs in; :class:`CommitBatch`
groups the rows of bars outside the trading window into one transaction (one fsync for many).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hybrid_trader.errors import UserError

if TYPE_CHECKING:  # the journal imports this module: its class only for the annotations
    from hybrid_trader.live.journal import Journal

BATCH_BARS = 1000
BATCH_S = 1.0
"""Journal rows of bars outside the trading window are committed together, at most this many or this old:
one fsync for many (a kill loses the batch, and the restart's replay writes it again)."""


class WriteUnit:
    """One unit of writes, committed as a whole or not at all: its own transaction (``BEGIN IMMEDIATE`` ...
    ``COMMIT``), or inside an open one (:meth:`Journal.begin`'s batch) a savepoint of it, released or rolled back to
    (none for a single INSERT, atomic by itself).

    Whether a transaction is open is SQLite's own state (``Connection.in_transaction``), never a flag kept beside
    it: a Ctrl-C or SIGTERM raised between a statement and the next line (after ``BEGIN``, before ``COMMIT``)
    leaves an open transaction that the next write joins and the stop's :meth:`Journal.commit` commits, never a
    "cannot start a transaction within a transaction" that would lose the stop's rows. A class, not a generator: an
    interrupted generator closed later by the garbage collector would roll back whatever joined its transaction.
    """

    __slots__ = ("db", "error", "one_statement", "opened")

    def __init__(self, db: sqlite3.Connection, error: Callable[[sqlite3.Error, str], UserError],
                 one_statement: bool) -> None:
        self.db = db
        self.error = error
        """The journal's error for a failed write (a UserError naming the file and the fix)."""
        self.one_statement = one_statement
        self.opened = ""
        """What :meth:`__enter__` opened: ``BEGIN IMMEDIATE``, ``SAVEPOINT unit``, or nothing (one statement)."""

    def __enter__(self) -> sqlite3.Connection:
        db = self.db
        if not db.in_transaction:
            self.opened = "BEGIN IMMEDIATE"
        elif not self.one_statement:
            self.opened = "SAVEPOINT unit"
        if self.opened:
            try:
                db.execute(self.opened)
            except sqlite3.Error as err:
                raise self.error(err, "write") from None
        return db

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: Any) -> None:
        db = self.db
        savepoint = self.opened == "SAVEPOINT unit"
        if kind is None:
            try:
                if self.opened:
                    db.execute("RELEASE unit" if savepoint else "COMMIT")
            except sqlite3.Error as failed:
                raise self.error(failed, "write") from None
            return
        try:
            if self.opened and db.in_transaction:  # SQLite may have rolled back itself (a full disk)
                if savepoint:
                    db.execute("ROLLBACK TO unit")
                    db.execute("RELEASE unit")
                else:
                    db.execute("ROLLBACK")
        except sqlite3.Error as failed:  # the write's own error, when it has one, says more (a full disk ...)
            if not isinstance(err, sqlite3.Error):
                raise self.error(failed, "write") from None
        if isinstance(err, sqlite3.Error) and not isinstance(err, sqlite3.IntegrityError):
            raise self.error(err, "write") from None


class CommitBatch:
    """The executor's open transaction of bars: committed after a traded bar, or when :data:`BATCH_BARS` bars are in
    it or the first is :data:`BATCH_S` old, or when the feed waits (:meth:`commit`)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._bars = 0
        self._started: float | None = None

    def begin(self, arrived: float) -> None:
        """A bar arrived (``time.perf_counter()``): its rows go into the open transaction."""
        self.journal.begin()
        if self._started is None:
            self._started = arrived

    def bar_done(self, traded: bool, arrived: float) -> None:
        """The bar's rows are written: commit after a traded bar, or when the batch is full or old."""
        self._bars += 1
        started = self._started if self._started is not None else arrived
        if traded or self._bars >= BATCH_BARS or arrived - started >= BATCH_S:
            self._commit()

    def commit(self) -> None:
        """Commit the batch now, if it holds a bar."""
        if self._bars:
            self._commit()

    def _commit(self) -> None:
        self.journal.commit()
        self._bars = 0
        self._started = None
