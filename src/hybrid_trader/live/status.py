"""The executor's live terminal status: position, P&L, distance to the threshold, last decision, advisor.

The bar count says how many were history (before the live point, never traded) or late.

On a terminal one line is rewritten in place, at most every ``interval_s`` seconds; into a
file or a pipe (a log) a line is written only when something a trader would look for
changes: the position, the number of trades, the account's status, or the day. ::

    2024-03-28 10:41 ET  LONG 1 @ 18342.25  open +115.00  day +240.00  net +1,310.50  to threshold 2,190.00
      | HOLD [fusion:agree]  | advisor student  | 1,204 bars 96 decisions 7 trades  | active
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import pandas as pd

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.calendar import EASTERN

if TYPE_CHECKING:
    from hybrid_trader.live.executor import Executor


@dataclass(frozen=True)
class StatusSnapshot:
    """What the status line shows, read from the executor after a bar."""

    time: pd.Timestamp | None
    """The last decision bar's time (ET); None before the first."""
    position: int
    """Signed contracts (+ long, - short, 0 flat)."""
    entry_price: float
    unrealized_pnl: float
    """Open P&L at the last close [$]."""
    day_pnl: float
    """Realised P&L of the day so far [$]."""
    net_pnl: float
    """Net P&L of every trade so far [$]."""
    to_threshold: float
    """Equity minus the trailing threshold [$]: how much may still be lost before a breach."""
    status: str
    """The account's status (active, daily_locked, target_reached, breached, ...), and a broker halt's reason."""
    last_action: str
    last_codes: tuple[str, ...]
    """Reason codes of the last decision (fusion, veto, account, window)."""
    advisor: str
    """Who advises the policy: 'student', 'none (phase N)', or 'off (...)' when an LLM is configured but not used."""
    bars: int
    decisions: int
    trades: int
    history: int = 0
    """Of the bars, those before the live point (features only, never traded)."""
    late: int = 0
    """Of the bars, those older than --max-bar-age when they arrived (no decision)."""


def snapshot(executor: Executor) -> StatusSnapshot:
    """The executor's state after its last bar."""
    broker, account, core = executor.broker, executor.account, executor.core
    side = int(broker.side)
    position = side * int(broker.qty) if side else 0
    last = executor.last_decision
    when = None if last is None else pd.Timestamp(last[0], tz="UTC").tz_convert(EASTERN)
    equity = float(core.equity_now) if side else float(account.balance)
    trades = broker.trades
    link = getattr(executor, "link", None)
    return StatusSnapshot(
        time=when, position=position, entry_price=float(broker.entry) if side else float("nan"),
        unrealized_pnl=equity - float(account.balance) if side else 0.0,
        day_pnl=float(account.balance - account.day_start_balance),
        net_pnl=float(sum(tr.net_pnl for tr in trades)),
        to_threshold=equity - float(account.threshold),
        status=account.status.value + (f", entries halted ({link.halted})" if link is not None and link.halted else ""),
        last_action="-" if last is None else ACTION_NAMES[last[1]],
        last_codes=() if last is None else tuple(last[2]),
        advisor=executor.advisor_label, bars=executor.summary.bars, decisions=executor.summary.decisions,
        trades=len(trades), history=executor.summary.history_bars, late=executor.summary.late_bars)


def format_status(s: StatusSnapshot) -> str:
    """One line: time, position, P&L, distance to the threshold, last decision, advisor, counts, status."""
    when = "waiting for the first decision" if s.time is None else s.time.strftime("%Y-%m-%d %H:%M ET")
    if s.position:
        pos = f"{'LONG' if s.position > 0 else 'SHORT'} {abs(s.position)} @ {s.entry_price:.2f}  " \
              f"open {s.unrealized_pnl:+,.2f}"
    else:
        pos = "FLAT"
    codes = f" [{', '.join(s.last_codes)}]" if s.last_codes else ""
    held = ", ".join(f"{n:,} {what}" for n, what in ((s.history, "history"), (s.late, "late")) if n)
    bars = f"{s.bars:,} bars" + (f" ({held})" if held else "")
    return (f"{when}  {pos}  day {s.day_pnl:+,.2f}  net {s.net_pnl:+,.2f}  to threshold {s.to_threshold:,.2f}"
            f"  | {s.last_action}{codes}  | advisor {s.advisor}"
            f"  | {bars} {s.decisions:,} decisions {s.trades:,} trades  | {s.status}")


class StatusPrinter:
    """Shows :func:`format_status` on ``stream``: in place on a terminal (throttled), on changes otherwise."""

    def __init__(self, stream: IO[str], *, interval_s: float = 0.25, tty: bool | None = None) -> None:
        self.stream = stream
        self.interval_s = float(interval_s)
        self.tty = bool(stream.isatty()) if tty is None else tty
        self._shown_at = -float("inf")
        self._width = 0
        self._key: tuple | None = None
        self.lines = 0
        """Lines written (non-terminal) or redraws (terminal)."""

    def update(self, executor: Executor) -> None:
        """After a bar: redraw (terminal, when the interval has passed) or log a line if something changed."""
        if self.tty:
            now = time.monotonic()
            if now - self._shown_at < self.interval_s:
                return
            self._shown_at = now
            self._draw(format_status(snapshot(executor)))
            return
        s = snapshot(executor)
        key = (s.position, s.trades, s.status, None if s.time is None else s.time.date())
        if key != self._key and s.time is not None:
            self._key = key
            self.stream.write(format_status(s) + "\n")
            self.stream.flush()
            self.lines += 1

    def _draw(self, line: str) -> None:
        pad = max(0, self._width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._width = len(line)
        self.lines += 1

    def finish(self, executor: Executor) -> None:
        """The final state, and on a terminal the line ended so later output starts on its own."""
        if self.tty:
            self._draw(format_status(snapshot(executor)))
            self.stream.write("\n")
            self.stream.flush()
