"""The NinjaTrader mirror of the executor's paper orders (``hybrid-trader run --broker ninjatrader``).

The executor's decision path stays the paper one: the environment's core, the paper
:class:`~hybrid_trader.env.broker.Broker` and the prop-firm account decide and keep the
rules. :class:`BrokerLink` copies what that path does to NinjaTrader through the ATI bridge:

* an entry decided at a bar's close -> :meth:`NinjaTraderBridge.enter` with the entry's
  journal id, a MARKET order with an OCO stop and target at the levels the paper broker
  will give it (:meth:`Broker.levels` from the decision bar's close: the paper broker's
  levels are on the tick grid, rounded away from the entry by
  :func:`~hybrid_trader.env.broker.level_on_grid`, so NinjaTrader's orders trigger on the
  bars the paper levels do and the backtest's fills are the exchange's);
  once the paper entry has filled, and whenever its stop moves (break-even, trailing),
  a CHANGE brings NinjaTrader's stop and target to the paper broker's;
* an exit the paper broker takes by stop, target, trailing or break-even stop needs
  nothing: NinjaTrader's own OCO orders take it; any other exit (session end, breach,
  daily loss, ``--on-exit flatten``) and an entry the paper side drops -> :meth:`close`
  (CLOSEPOSITION and the bracket's CANCELs).

Orders are written only after the bar's journal rows are committed, and never for a
bar a restart replays, so an order id reaches ``incoming/`` at most once
(``bridge.was_sent`` guards entries too). Each live bar :meth:`check` polls NinjaTrader
before the decision: its fills go to the journal (``fills.source = 'broker'``), its
rejections, missing acknowledgements and unprotected positions to ``errors`` with a
reason code, and its position is compared with the paper one. A rejection, an
unprotected position, an order that cannot be written, files that cannot be read (a
NinjaTrader folder removed mid-run), or a position that differs in the same way (the same
paper and NinjaTrader positions) for more than ``mismatch_bars`` bars in a row (at the first
live bar, at once) halts new entries: a
``halt`` row in ``errors`` with the reason code, which a restart's replay applies again
at the same bar so that it rebuilds the same decisions; the restart itself resumes.
Making NinjaTrader's position FLAT (CLOSEPOSITION sent, waited for, re-sent) is
:mod:`hybrid_trader.live.broker_close`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_trader.env.broker import (
    EXIT_BREAKEVEN,
    EXIT_STOP,
    EXIT_TARGET,
    EXIT_TRAIL,
    GRID_EPS,
    Broker,
    level_on_grid,
)
from hybrid_trader.errors import UserError
from hybrid_trader.live.broker_close import PositionCloser
from hybrid_trader.live.broker_halts import (
    CODE_CONTRACT_LIMIT,
    CODE_DISCONNECTED,
    CODE_EXIT_PENDING,
    CODE_MISMATCH,
    CODE_NO_ACK,
    CODE_POSITION_UNKNOWN,
    CODE_READ_FAILED,
    CODE_REJECTED,
    CODE_RESUMED,
    CODE_SEND_FAILED,
    CODE_UNEXPECTED_POSITION,
    CODE_UNKNOWN_ORDER,
    CODE_UNKNOWN_STATE,
    CODE_UNPROTECTED,
    CODE_WITHDRAWN,
    HALT,
    halt_in_force,
)
from hybrid_trader.live.journal import CLOSE_POSITION, Journal, OrderPrices
from hybrid_trader.live.ninjatrader import Bracket, BridgeEvent, NinjaTraderBridge, bracket_ids
from hybrid_trader.live.nt_outgoing import PositionLost

NT_EXITS = frozenset({EXIT_STOP, EXIT_TARGET, EXIT_TRAIL, EXIT_BREAKEVEN})
"""Paper exits NinjaTrader takes with its own OCO stop or target: nothing is sent for them."""
_HALTING = {"UNKNOWN": CODE_UNKNOWN_STATE, "WITHDRAWN": CODE_WITHDRAWN, "UNPROTECTED": CODE_UNPROTECTED}
"""Bridge events that halt new entries, by their reason code."""


@dataclass
class _Mirrored:
    """The position NinjaTrader is asked to hold: its entry id and the bracket levels last sent."""

    entry_id: str
    side: str
    qty: int
    stop: float
    target: float


class BrokerLink(PositionCloser):
    """Mirror the paper broker's orders to NinjaTrader and watch NinjaTrader's fills and position."""

    def __init__(self, bridge: NinjaTraderBridge, journal: Journal, broker: Broker, *,
                 mismatch_bars: int = 2, max_contracts: int | None = None,
                 say: Callable[..., Any] | None = None) -> None:
        if broker.target_atr <= 0:
            raise UserError("the run has no target (env.target_atr 0): the NinjaTrader bracket needs a stop "
                            "and a target", value=broker.target_atr,
                            fix="trade this run with --broker paper, or train one with env.target_atr > 0")
        if mismatch_bars < 0:
            raise UserError("--nt-mismatch-bars must be 0 or more", value=mismatch_bars,
                            fix="e.g. --nt-mismatch-bars 2 (a fill may lag a bar)")
        self.bridge = bridge
        self.journal = journal
        self.broker = broker
        self.mismatch_bars = int(mismatch_bars)
        self.max_contracts = max_contracts
        """The rules' contract limit in this contract's units: an entry is refused when NinjaTrader's position and
        the entry's quantity together exceed it (None: not checked)."""
        self.say = say or (lambda *a: None)
        self.halted = ""
        """The reason code that halted new entries ("" while entries are allowed)."""
        self.broker_position = 0
        """NinjaTrader's signed position at the last live check."""
        self._halts = journal.errors_at(HALT)
        self._open: _Mirrored | None = None
        self._outbox: list[tuple[str, _Mirrored, int]] = []
        self._live = False
        self._mismatch = 0
        self._mismatch_pair: tuple[int, int] | None = None
        """``(paper, NinjaTrader)`` positions of the mismatch :attr:`_mismatch` counts the bars of: a new pair starts
        the count again, so reports that lag each change by a bar never add up across back-to-back trades."""
        self._exit_grace = 0
        """Live checks left in which NinjaTrader may still report the position that the paper side has just left by
        a stop or target NinjaTrader takes itself (its fill's file lags the bar's line): a mismatch, not a position
        of its own."""
        self._closing: str | None = None
        self._close_file: Path | None = None
        """The order file of the last CLOSEPOSITION this process wrote: :meth:`make_flat` sends no other while
        NinjaTrader has not read it (it is still in incoming/)."""
        self._flattened = False
        """Whether a CLOSEPOSITION was sent for a position that is unknown or not the paper broker's (once a run)."""
        self._seen_errors: set[tuple[str, str]] = set()
        self._bar_tns = 0
        """The bar of the last :meth:`check`: the time of a CHANGE's journal row."""
        self._resend_levels: set[str] = set()
        """``stop``/``target`` of the bracket an earlier process moved (journaled CHANGEs): sent again at the first
        live bar, since a kill between a CHANGE's journal row and its file leaves no trace of which one NinjaTrader
        got (a CHANGE to the price it has is harmless)."""
        self.flat_retries = 5
        self.flat_retry_s = 2.0
        self.sleep: Callable[[float], None] = time.sleep
        """:meth:`make_flat`: CLOSEPOSITION re-sent this many times, this far apart (``sleep``), until FLAT."""

    # ------------------------------------------------------------------ what the paper side did (replay and live)
    def entry(self, order_id: str, side: int, qty: int, ref_price: float, atr: float, tns: int) -> None:
        """An entry decided at bar ``tns``; its bracket levels as the paper broker will set them from ``ref_price``
        (on the tick grid)."""
        self._open = _Mirrored(order_id, "BUY" if side > 0 else "SELL", qty, *self.broker.levels(side, ref_price, atr))
        self._outbox.append(("enter", self._open, tns))

    def exit(self, reason: str, tns: int) -> None:
        """The paper position closed (``reason``: the trade's exit reason)."""
        if self._open is not None and reason not in NT_EXITS:
            self._outbox.append(("close", self._open, tns))
        elif self._open is not None:
            self._exit_grace = self.mismatch_bars
        self._open = None

    def drop(self, tns: int) -> None:
        """The paper side dropped an entry before its fill: NinjaTrader may hold it already, so close."""
        self.exit("DROPPED", tns)

    @property
    def pending(self) -> bool:
        """Whether orders wait for :meth:`flush` (the bar's journal rows must be committed first)."""
        return bool(self._outbox) or self._levels_moved() or bool(self._resend_levels)

    def _levels_moved(self) -> bool:
        m, b = self._open, self.broker
        return m is not None and b.side != 0 and (b.stop, b.target) != (m.stop, m.target)

    # ------------------------------------------------------------------ sending (after the journal's commit)
    def flush(self, live: bool) -> None:
        """Send the bar's orders (``live``), or forget them (a replayed bar: they were sent, or the restart's
        reconciliation finds that they were not)."""
        actions, self._outbox = self._outbox, []
        m, b = self._open, self.broker
        moves: list[tuple[str, float]] = []
        if m is not None and b.side != 0:  # the paper entry filled: NinjaTrader's bracket follows its levels
            stop, target = b.stop, b.target  # on the tick grid (Broker.levels, tighten_stop)
            moves = [(k, v) for k, v, old in (("stop", stop, m.stop), ("target", target, m.target))
                     if v != old or (live and k in self._resend_levels)]
            m.stop, m.target = stop, target
        if not live:
            return
        self._resend_levels = set()
        try:
            for kind, pos, tns in actions:
                if kind == "enter":
                    self._enter(pos, tns)
                else:
                    self._close(pos, tns)
            for kind, price in moves:
                assert m is not None
                stop_id, target_id, _ = bracket_ids(m.entry_id)
                # the journal first (the new price, a row per CHANGE), then NinjaTrader
                self.journal.record_change(stop_id if kind == "stop" else target_id, self._bar_tns,
                                           "stop_price" if kind == "stop" else "limit_price", price)
                (self.bridge.move_stop if kind == "stop" else self.bridge.move_target)(m.entry_id, price)
        except (UserError, OSError) as err:
            when = actions[-1][2] if actions else None
            self._error(CODE_SEND_FAILED, f"could not write an order file for NinjaTrader: {err}", when)
            self._halt(CODE_SEND_FAILED, f"an order could not be sent to NinjaTrader ({err})", when)

    def _enter(self, m: _Mirrored, tns: int) -> None:
        stop_id, target_id, _ = bracket_ids(m.entry_id)
        exit_side = "SELL" if m.side == "BUY" else "BUY"
        j = self.journal
        j.record_order(stop_id, tns, "stop", exit_side, m.qty, prices=OrderPrices("STOPMARKET", stop_price=m.stop),
                       state="sent", note=f"OCO of {m.entry_id}")
        j.record_order(target_id, tns, "target", exit_side, m.qty, prices=OrderPrices("LIMIT", limit_price=m.target),
                       state="sent", note=f"OCO of {m.entry_id}")
        bracket = self.bridge.enter(m.entry_id, m.side, m.qty, m.stop, m.target)  # type: ignore[arg-type]
        if not bracket.sent:
            self.say(f"NinjaTrader already has order {m.entry_id}: not sent again")

    def _close(self, m: _Mirrored, tns: int) -> None:
        close_id = f"{m.entry_id}-close"
        self.journal.record_order(close_id, tns, "close", "SELL" if m.side == "BUY" else "BUY", m.qty,
                                  prices=CLOSE_POSITION, state="sent", note=f"closes {m.entry_id}")
        self._close_file = self.bridge.close(m.entry_id)
        self._closing = close_id

    # ------------------------------------------------------------------ watching (each bar, before the decision)
    def check(self, tns: int, paper_qty: int, replayed: bool) -> None:
        """Before bar ``tns``'s decision: on a replayed bar, the journal's halts; on a live bar, NinjaTrader's
        events and position against the paper position ``paper_qty`` (signed)."""
        self._bar_tns = tns
        if replayed:
            self.replayed_to(tns)
            return
        first = not self._live
        if first:
            self._start(tns)
        try:
            for event in self.bridge.poll():
                self._on_event(event, tns)
            position = self.bridge.position()
            connection = self.bridge.connection_state()
        except (UserError, OSError) as err:  # NinjaTrader's state is unknown: no new entries (fail closed)
            self._unreadable(err, paper_qty, tns)
            return
        self.broker_position = position.signed_qty
        graced = self._exit_grace > 0 and not first and self.broker_position != 0
        self._exit_grace = self._exit_grace - 1 if graced else 0
        if graced:  # no entry on top of (or against) a position NinjaTrader may still hold: its stop may not fill
            self._halt(CODE_EXIT_PENDING, f"NinjaTrader still holds {self.broker_position} contract(s) of "
                       f"{self.bridge.instrument} after the paper position's exit by its stop or target: no entry "
                       "until NinjaTrader reports that exit", tns)
        elif self.halted == CODE_EXIT_PENDING and self.broker_position == paper_qty:
            self.halted = ""
            self.journal.record_error(HALT, "NinjaTrader reported the exit: entries allowed again", tns,
                                      code=CODE_RESUMED)
        if self.bridge.connection and connection != "CONNECTED":
            state = (f"reads {connection}" if connection else "has not been written")
            self._halt(CODE_DISCONNECTED, f"NinjaTrader's connection state file {self.bridge.connection}.txt "
                       f"{state}: no new entries until it reconnects and this program restarts", tns)
        closing = any(kind == "close" for kind, _, _ in self._outbox)  # this bar's paper exit, sent after it
        if self.broker_position != 0 and not closing and not graced \
                and (paper_qty == 0 or (paper_qty > 0) != (self.broker_position > 0)):
            # before an entry: the rules' contract limit against what NinjaTrader actually holds
            if paper_qty == 0 and self.max_contracts is not None \
                    and abs(self.broker_position) + self.broker.qty > self.max_contracts:
                self._halt(CODE_CONTRACT_LIMIT, f"NinjaTrader holds {self.broker_position} contract(s) of "
                           f"{self.bridge.instrument} in {self.bridge.account}: an entry of {self.broker.qty} more "
                           f"would exceed the rules' {self.max_contracts} contracts", tns)
            self._halt(CODE_UNEXPECTED_POSITION, f"NinjaTrader holds {self.broker_position} contract(s) of "
                       f"{self.bridge.instrument} in {self.bridge.account} that the paper position ({paper_qty}) "
                       "does not: closing it (CLOSEPOSITION), no new entries", tns)
            self._flatten(f"NinjaTrader's position {self.broker_position} is not the paper one", tns,
                          self.broker_position)
        if self.broker_position == paper_qty:
            self._mismatch, self._mismatch_pair = 0, None
            return
        pair = (paper_qty, self.broker_position)
        self._mismatch = self._mismatch + 1 if pair == self._mismatch_pair else 1
        self._mismatch_pair = pair
        if first or self._mismatch > self.mismatch_bars:
            when = "at start (the journal's recovered position)" if first else f"for {self._mismatch} bars"
            held = (f"NinjaTrader holds {self.broker_position} contract(s) of {self.bridge.instrument} in "
                    f"{self.bridge.account}" if position.known else
                    f"no NinjaTrader position file for {self.bridge.instrument} in {self.bridge.account} was found "
                    f"in {self.bridge.outgoing} (NinjaTrader has reported no fill)")
            self._halt(CODE_MISMATCH, f"{held} but the paper position is {paper_qty}, {when}: check NinjaTrader's "
                       "Positions tab and flatten by hand if needed", tns)

    def _unreadable(self, err: Exception, paper_qty: int, tns: int) -> None:
        """NinjaTrader's files could not be read: halt entries; where its position is unknown too and the paper
        broker holds one, flatten it (fail closed)."""
        text = str(err)
        lost = isinstance(err, PositionLost)
        code = CODE_POSITION_UNKNOWN if lost else CODE_READ_FAILED
        self._error(code, f"could not read NinjaTrader's files: {text}", tns)
        self._halt(code, f"NinjaTrader's state cannot be read ({text}): no new entries", tns)
        if not lost:
            try:  # an order state file failed: is the position still known?
                self.broker_position = self.bridge.position().signed_qty
                return
            except (UserError, OSError):
                pass
        if paper_qty != 0:
            self._flatten(f"NinjaTrader's position is unknown while the paper broker holds {paper_qty}", tns,
                          paper_qty)

    def replayed_to(self, tns: int) -> None:
        """The halt in force once the journal's bars up to ``tns`` are replayed (or restored from a snapshot)."""
        self.halted = halt_in_force(self._halts, tns)[0]

    @property
    def mirrored(self) -> _Mirrored | None:
        """The entry NinjaTrader mirrors now (None: flat)."""
        return self._open

    def _start(self, tns: int) -> None:
        """The first live bar: resume after a journaled halt, watch the latest entry an earlier process sent."""
        self._live = True
        if self.halted:
            self.journal.record_error(HALT, f"restarted after a halt ({self.halted}): entries allowed again if "
                                      "NinjaTrader's position agrees", tns, code=CODE_RESUMED)
            self.say(f"resuming after the journal's halt {self.halted}")
            self.halted = ""
        last = self.journal.last_order("entry")
        if last is not None and self.bridge.was_sent(last.order_id):
            stop_id, target_id, oco_id = bracket_ids(last.order_id)
            ids = (last.order_id, stop_id, target_id)
            # what the journal booked of NinjaTrader's fills: a part fill reported again is not booked twice
            self.bridge.adopt(Bracket(last.order_id, last.side, last.qty, stop_id, target_id,  # type: ignore[arg-type]
                                      oco_id, sent=False), booked={oid: self.journal.booked(oid) for oid in ids})
            self._resend_levels = {kind for kind, oid in (("stop", stop_id), ("target", target_id))
                                   if self.journal.was_changed(oid) and not self._final(oid)}
        # the broker errors already journaled: a restart's poll reports them again
        self._seen_errors = {(c or "", m) for _, c, m in self.journal.errors_at("broker")}
        self._resend_unwritten_close(tns)

    def _final(self, order_id: str) -> bool:
        """Whether NinjaTrader reports the order filled, cancelled or rejected (a CHANGE would be refused)."""
        try:
            state = self.bridge.order_state(order_id)
        except (UserError, OSError):
            return False
        return state is not None and state.is_terminal

    def _on_event(self, ev: BridgeEvent, tns: int) -> None:
        j = self.journal
        child = ev.order_id.endswith(("-SL", "-TP"))
        if ev.kind == "FILL":
            if j.order(ev.order_id) is None:
                self._error(CODE_UNKNOWN_ORDER, f"NinjaTrader filled {ev.order_id}, an order not in the journal", tns)
                return
            j.record_fill(ev.order_id, ev.new_qty, self._fill_price(ev), tns,
                          fill_id=f"{ev.order_id}:broker:{ev.filled_qty}", source="broker")
            if child and ev.state == "FILLED":
                j.update_order_state(ev.order_id, "filled")
        elif ev.kind == "REJECTED":
            if child and j.order(ev.order_id) is not None:
                j.update_order_state(ev.order_id, "rejected")
            if self._error(CODE_REJECTED, ev.message, tns):
                self._halt(CODE_REJECTED, f"{ev.message}: no new entries (NinjaTrader's Log tab says why)", tns)
        elif ev.kind == "CANCELLED" and child and j.order(ev.order_id) is not None:
            j.update_order_state(ev.order_id, "cancelled")
        elif ev.kind == "NO_ACK":
            self._error(CODE_NO_ACK, ev.message, tns)
        elif ev.kind in _HALTING:
            if ev.kind == "WITHDRAWN" and ev.state == "WITHDRAWN" and j.order(ev.order_id) is not None:
                j.update_order_state(ev.order_id, "withdrawn", note=ev.message)
            if self._error(_HALTING[ev.kind], ev.message, tns):
                self._halt(_HALTING[ev.kind], f"{ev.message}: no new entries (check NinjaTrader's Orders and "
                           "Positions tabs)", tns)
        elif ev.kind == "POSITION" and ev.state == "FLAT" and self._closing is not None:
            if j.order(self._closing) is not None:
                j.update_order_state(self._closing, "filled", note="NinjaTrader's position is flat (the ATI "
                                     "reports no price for CLOSEPOSITION)")
            self._closing = None

    def _fill_price(self, ev: BridgeEvent) -> float:
        """A fill's price: derived from the change of NinjaTrader's cumulative average (8 decimals in its file), so
        21004.000000005 for 21004: the grid price within :data:`GRID_EPS` ticks of it, the exchange's; as derived
        otherwise."""
        if not ev.price:
            return ev.avg_price
        on_grid = level_on_grid(ev.price, 1, self.broker.tick)
        return on_grid if abs(on_grid - ev.price) <= GRID_EPS * self.broker.tick else ev.price

    def _error(self, code: str, message: str, tns: int | None) -> bool:
        """Journal a broker error once; False when the journal already had it (a restart's poll repeats it)."""
        if (code, message) in self._seen_errors:
            return False
        self._seen_errors.add((code, message))
        self.journal.record_error("broker", message, tns, code=code)
        self.say(f"NinjaTrader [{code}]: {message}")
        return True

    def _halt(self, code: str, message: str, tns: int | None) -> None:
        if self.halted and (self.halted != CODE_EXIT_PENDING or code == CODE_EXIT_PENDING):
            return  # (a lasting halt replaces a pending exit's)
        self.halted = code
        self.journal.record_error(HALT, message, tns, code=code)
        self.say(f"HALTED [{code}]: {message}")
