"""The NinjaTrader link's reason codes (``errors.code``: ``broker:*``) and the rule of the halt in force.

The vocabulary the link journals (:mod:`hybrid_trader.live.broker_link`) and every reader of the journal shares
(a restart's replay, ``watch``): the ``halt`` rows that stop new entries, each with its code, and the
``broker:resumed`` row of a restart that allows them again.
"""

from __future__ import annotations

from collections.abc import Iterable

HALT = "halt"
"""``errors.location`` of the rows that halt (code ``broker:*``) or resume (``broker:resumed``) entries."""
CODE_REJECTED = "broker:rejected"
CODE_MISMATCH = "broker:position_mismatch"
CODE_UNPROTECTED = "broker:unprotected"
CODE_NO_ACK = "broker:no_ack"
CODE_SEND_FAILED = "broker:send_failed"
CODE_READ_FAILED = "broker:read_failed"
CODE_UNKNOWN_ORDER = "broker:unknown_order"
CODE_RESUMED = "broker:resumed"
CODE_UNKNOWN_STATE = "broker:unknown_state"
CODE_WITHDRAWN = "broker:withdrawn"
CODE_POSITION_UNKNOWN = "broker:position_unknown"
CODE_DISCONNECTED = "broker:disconnected"
CODE_UNEXPECTED_POSITION = "broker:unexpected_position"
CODE_CONTRACT_LIMIT = "broker:contract_limit"
CODE_EXIT_PENDING = "broker:exit_pending"
"""Not a lasting halt: NinjaTrader still reports the position the paper side left by a stop or target NinjaTrader
takes itself; no entry until it reports the exit (a ``broker:resumed`` row follows), or a lasting halt if it never
does."""

CODE_FLAT_FAILED = "broker:flat_failed"
CODE_FLAT_RETRY = "broker:flat_retry"


def halt_in_force(halts: Iterable[tuple[int, str | None, str]], until_ns: int | None = None) -> tuple[str, str]:
    """``(reason code, message)`` of the halt of new entries in force after the journal's ``halt`` rows
    (``Journal.errors_at(HALT)``) up to ``until_ns`` (all when None); ``("", "")`` when entries are allowed (none, or
    a restart resumed them). A halt journaled without its code reads ``broker:halted``."""
    out = ("", "")
    for t, code, message in halts:
        if until_ns is None or t <= until_ns:
            out = ("", "") if code == CODE_RESUMED else (code or "broker:halted", message)
    return out
