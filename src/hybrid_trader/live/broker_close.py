"""Making NinjaTrader's position FLAT for :class:`~hybrid_trader.live.broker_link.BrokerLink`: CLOSEPOSITION sent,
waited for and re-sent until the position file reads FLAT (``make_flat``, the deadline's and the exits' guarantee),
the one an earlier process journaled but may not have written (a restart), and the one for a position that is not the
paper broker's (``_flatten``). One rule throughout: never a second CLOSEPOSITION while one waits unread in
``incoming/``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.live.broker_halts import CODE_FLAT_FAILED, CODE_FLAT_RETRY, CODE_READ_FAILED, CODE_SEND_FAILED
from hybrid_trader.live.journal import CLOSE_POSITION, Journal
from hybrid_trader.live.ninjatrader import NinjaTraderBridge


class PositionCloser:
    """The CLOSEPOSITION half of :class:`~hybrid_trader.live.broker_link.BrokerLink` (which supplies the fields and the
    two methods named below)."""

    bridge: NinjaTraderBridge
    journal: Journal
    say: Callable[..., Any]
    broker_position: int
    flat_retries: int
    flat_retry_s: float
    sleep: Callable[[float], None]
    _open: Any
    """The mirrored entry (its ``entry_id``), None when flat."""
    _closing: str | None
    _close_file: Path | None
    _flattened: bool
    _error: Callable[[str, str, int | None], bool]
    _halt: Callable[[str, str, int | None], None]

    def make_flat(self, tns: int) -> bool:
        """Make NinjaTrader's position FLAT: CLOSEPOSITION (unless one was just sent), then every
        :attr:`flat_retry_s` its position file read and, while not FLAT, CLOSEPOSITION sent again,
        :attr:`flat_retries` times; then a halt
        (``broker:flat_failed``, journal and stderr). True once FLAT. A missing position file reads FLAT (NinjaTrader
        writes none before a first fill)."""
        retries, wait_s = self.flat_retries, self.flat_retry_s
        entry = self._close_entry()
        if entry is None:
            return True
        sent, retried = self._closing is not None, 0
        while True:
            if sent:
                self.sleep(wait_s)
            try:
                qty: int | None = self.bridge.position().signed_qty
            except (UserError, OSError) as err:
                qty = None
                self._error(CODE_READ_FAILED, f"could not read NinjaTrader's files: {err}", tns)
            if qty == 0:
                self.broker_position = 0
                self._confirm_close()
                return True
            if sent:
                if retried == retries:
                    break
                retried += 1
                unread = self._close_file is not None and self.bridge.unread(self._close_file)
                self.journal.record_error("broker", f"NinjaTrader still holds {qty} contract(s) of "
                                          f"{self.bridge.instrument}: " + (
                                              f"its CLOSEPOSITION {self._close_file.name} waits unread in "  # type: ignore[union-attr]
                                              f"incoming/, not sent again ({retried} of {retries})" if unread else
                                              f"CLOSEPOSITION sent again ({retried} of {retries})"),
                                          tns, code=CODE_FLAT_RETRY)
                if unread:
                    continue
            if not self._send_close(entry, qty or 0, tns):
                break
            sent = True
        message = (f"NinjaTrader's position in {self.bridge.instrument} ({self.bridge.account}) is not FLAT after "
                   f"{retries} CLOSEPOSITION retries {wait_s:g} s apart: flatten it by hand in NinjaTrader "
                   "(Positions tab, Close) now" + (
                       f" (its order file {self._close_file.name} was never read: is the ATI enabled?)"
                       if self._close_file is not None and self.bridge.unread(self._close_file) else ""))
        self._error(CODE_FLAT_FAILED, message, tns)
        self._halt(CODE_FLAT_FAILED, message, tns)
        self.journal.commit()
        print(f"HALTED [{CODE_FLAT_FAILED}]: {message}", file=sys.stderr, flush=True)
        return False

    def _close_entry(self) -> str | None:
        """The entry a CLOSEPOSITION names (its bracket's CANCELs): the mirrored or last journaled one."""
        if self._open is not None:
            return self._open.entry_id
        last = self.journal.last_order("entry")
        return None if last is None else last.order_id

    def _send_close(self, entry: str, held: int, tns: int) -> bool:
        """CLOSEPOSITION of the position ``held`` written (journaled once as ``<entry>-close``); False when it
        cannot be (the caller halts)."""
        close_id = f"{entry}-close"
        if self.journal.order(close_id) is None:
            self.journal.record_order(close_id, tns, "close", "SELL" if held > 0 else "BUY", abs(held) or 1,
                                      prices=CLOSE_POSITION, state="sent", note=f"closes {entry}")
            self.journal.commit()
        try:
            self._close_file = self.bridge.close(entry)
        except (UserError, OSError) as err:
            self._error(CODE_SEND_FAILED, f"could not write an order file for NinjaTrader: {err}", tns)
            return False
        self._closing = close_id
        return True

    def _confirm_close(self) -> None:
        if self._closing is not None and self.journal.order(self._closing) is not None:
            self.journal.update_order_state(self._closing, "filled", note="NinjaTrader's position is flat (the ATI "
                                            "reports no price for CLOSEPOSITION)")
        self._closing = None

    def _resend_unwritten_close(self, tns: int) -> None:
        """At the first live bar: the journal's last CLOSEPOSITION still ``sent`` while NinjaTrader holds a
        position (an earlier process died between the journal's commit and the file): written once, and waited
        for (:meth:`make_flat`)."""
        last = self.journal.last_order("close")
        if last is None or last.state != "sent":
            return
        self._closing = last.order_id
        try:
            held = self.bridge.position().signed_qty
        except (UserError, OSError):
            return  # check() reads it next and halts
        if held == 0:
            self._confirm_close()
            return
        unread = self.bridge.unread_file(last.order_id) or self.bridge.unread_file(f"{last.order_id}-close")
        if unread is not None:  # written before the restart, not read yet: waited for, not queued twice
            self._close_file = unread
            self.say(f"the journal's {last.order_id} waits unread in NinjaTrader's incoming/ ({unread.name})")
        else:
            self.say(f"the journal's {last.order_id} never closed NinjaTrader's {held}: sent again")
            self._closing = None
        self.make_flat(tns)

    def _flatten(self, why: str, tns: int, held: int) -> None:
        """CLOSEPOSITION for a position that is unknown or not the paper broker's, journaled (once a run)."""
        if self._flattened:
            return
        if self._close_file is not None and self.bridge.unread(self._close_file):
            return  # a CLOSEPOSITION waits unread in incoming/: a second would be queued behind it
        self._flattened = True
        close_id = f"flatten-{tns}"
        self.journal.record_order(close_id, tns, "close", "BUY" if held < 0 else "SELL", abs(held),
                                  prices=CLOSE_POSITION, state="sent", note=why)
        try:
            self._close_file = self.bridge.close_position(close_id)
        except (UserError, OSError) as err:
            self._error(CODE_SEND_FAILED, f"could not write the CLOSEPOSITION ({why}): {err}", tns)
            return
        self._closing = close_id
        self.say(f"NinjaTrader: sent CLOSEPOSITION ({why})")
