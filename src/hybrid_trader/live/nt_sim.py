r"""A simulated NinjaTrader 8 behind the ATI file interface (``hybrid-trader nt-sim``): try the bridge without Windows.

:class:`NinjaTraderSim` watches ``<folder>/incoming`` on its own thread, as NinjaTrader does:
every ``poll_s`` it takes each ``oif*.txt`` (oldest first), deletes it and carries out its
lines; it writes ``outgoing/`` files as NinjaTrader 8 does (:mod:`hybrid_trader.live.ati`
holds the documented layouts and the help-guide pages they come from):

* an order state file per order with an ORDER ID (``<id>.txt``, or ``<account>_<id>.txt``
  as field tests saw), ``STATE;FILLED;AVERAGE``, moving one state every ``latency_s``:
  ``SUBMITTED`` -> ``ACCEPTED`` -> ``WORKING`` -> (``PARTFILLED``) -> ``FILLED``; a CANCEL
  writes ``CANCELPENDING`` then ``CANCELLED``, a CHANGE ``CHANGESUBMITTED`` then the
  order's working state again;
* ``REJECTED;0;0`` for a PLACE NinjaTrader refuses: an account or instrument it does not
  have, a quantity under 1, a LIMIT/STOP order without its price, a sell stop at or above
  (a buy stop at or below) the last price, no price at all yet;
* no file at all, only a line in :attr:`log` (NinjaTrader's Log tab), for a line without
  13 fields, an unknown command or order type (``STOP``), and a CHANGE or CANCEL of an order
  it does not know or that has finished (a terminal state is never rewritten);
* a position file per account and instrument
  (``<instrument> <exchange>_<account>_Position.txt``: ``LONG|SHORT|FLAT;QTY;AVG``);
* the connection state file ``<connection>.txt`` (``CONNECTED``/``DISCONNECTED``).

Fills come from the simulator's own prices (:class:`SimMarket`: bars pushed by a test, a
fixed price, or a followed bars file), not from the decision's bar: a MARKET order fills at
the last price, ``slippage_ticks`` at most against it (seeded, so a run repeats); a
STOPMARKET or LIMIT fills when a later bar reaches it (at its level, or at the bar's open
when the bar opens beyond it; the stop first when a bar reaches both; stops take the
slippage too). OCO siblings are cancelled when one fills or is cancelled. CLOSEPOSITION
cancels the account's working orders in the instrument and flattens it at the last price;
CANCELALLORDERS and FLATTENEVERYTHING act on every account and instrument it holds.

Faults (:mod:`~hybrid_trader.live.nt_sim_faults`): a rejected order, a refused close, a partial fill,
held reports, a dropped connection, a restart that empties ``outgoing/``; the books and the ``outgoing/``
files: :mod:`~hybrid_trader.live.nt_sim_outgoing`. :meth:`settle` waits until everything read has been
carried out (tests).
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.live.ati import FIELDS, ORDER_TYPES, is_oif_name
from hybrid_trader.live.nt_sim_faults import FaultControls
from hybrid_trader.live.nt_sim_market import Quote, SimMarket, apply_fill, touched
from hybrid_trader.live.nt_sim_outgoing import OutgoingFiles, SimOrder, SimPosition
from hybrid_trader.live.nt_sim_settings import SimSettings


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    action: Callable[[], None] = field(compare=False)


class NinjaTraderSim(FaultControls):
    """NinjaTrader 8's ATI file interface, simulated on its own thread (see the module's docstring).

    ``accounts`` and ``instrument``: what it holds (an OIF naming another is refused), the instrument trading at
    ``market``'s prices; ``settings``: its connection, timing, fills and state-file names (:class:`SimSettings`;
    None: the defaults). Thread-safe: the fault methods and :meth:`settle` may be called from any thread while it runs.
    """

    def __init__(self, folder: str | Path, accounts: Iterable[str], instrument: str, market: SimMarket,
                 settings: SimSettings | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        settings = settings or SimSettings()
        exchange, state_file_style, connection = settings.exchange, settings.state_file_style, settings.connection
        self.folder = Path(folder)
        self.incoming = self.folder / "incoming"
        self.outgoing = self.folder / "outgoing"
        try:
            self.incoming.mkdir(parents=True, exist_ok=True)
            self.outgoing.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create the simulator's folders: {err.strerror or err}", file=str(self.folder),
                            fix="pass a folder this program may write") from None
        self.accounts = tuple(accounts)
        if not self.accounts or not instrument:
            raise UserError("the simulator needs at least one account and an instrument",
                            value=(self.accounts, instrument), fix="e.g. --account Sim101 --instrument 'NQ 12-26'")
        self.instrument = instrument
        self.market = market
        self.exchange = exchange
        self.connection = connection
        self.poll_s = float(settings.poll_s)
        self.latency_s = float(settings.latency_s)
        self.tick_size = float(settings.tick_size)
        self.slippage_ticks = int(settings.slippage_ticks)
        self.state_file_style = state_file_style
        self.clock = clock
        self.orders: dict[str, SimOrder] = {}
        self.positions: dict[tuple[str, str], SimPosition] = {}
        self.last_price: float | None = None
        self.received: list[str] = []
        """Every instruction line read, in order (the OIF sequence)."""
        self.log: list[str] = []
        """NinjaTrader's Log tab: refusals and their reasons (the ATI files carry none)."""
        self.connected = True
        self.restarts = 0
        self._rng = random.Random(settings.seed)
        self._lock = threading.RLock()
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self._order_seq = itertools.count(1)
        self._out = OutgoingFiles(self.outgoing, exchange, state_file_style)
        self._reject: list[str] = []
        self._refuse_close = 0
        self._partial: int | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._cycles = 0
        self._cycle_done = threading.Condition(self._lock)
        self.error: BaseException | None = None
        """What stopped the thread, if anything did."""
        if connection:
            self._write(f"{connection}.txt", "CONNECTED")

    # --- the thread ------------------------------------------------------------------------------------------

    def start(self) -> NinjaTraderSim:
        """Start polling on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="nt-sim", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (what it read is carried out first) and wait for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> NinjaTraderSim:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
                self._wake.wait(self.poll_s)
                self._wake.clear()
            self.step()
        except BaseException as err:  # kept for settle() and the CLI to report
            self.error = err
            with self._lock:
                self._cycle_done.notify_all()
            raise

    def step(self) -> None:
        """One poll: move the market to its latest bar, then read incoming/ (when connected) and carry out what is
        due, then write outgoing/. The market first: an order read now fills at the newest price and never meets a
        bar that came before it (a bar appended with the decision's order, read in the same poll, would be)."""
        with self._lock:
            self._run_due()
            for quote in self.market.take():
                self._on_quote(quote)
                self._run_due()
            if self.connected:
                self._read_incoming()
            self._run_due()
            if self.connected:
                self._flush()
            self._cycles += 1
            self._cycle_done.notify_all()

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until the thread has read every OIF in incoming/ (when connected), carried out every state change
        due and taken every price pushed: what a test does before the market moves on."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                seen = self._cycles
                self._wake.set()  # poll now rather than at the next interval: a test need not wait for it
                while self._cycles == seen:
                    if self.error is not None:
                        raise RuntimeError("the simulator's thread stopped") from self.error
                    left = deadline - time.monotonic()
                    if left <= 0 or self._thread is None:
                        raise TimeoutError(f"the simulator did not settle in {timeout_s:g} s")
                    self._cycle_done.wait(min(left, self.poll_s * 4))
                if not self._due and self.market.idle and not (self.connected and self._pending_oifs()):
                    return

    def set_position(self, account: str, qty: int, avg: float) -> None:
        """A position the account holds from elsewhere (a trade by hand, another program)."""
        with self._lock:
            key = (account, self.instrument)
            self.positions[key] = SimPosition(qty, avg if qty else 0.0)
            self._out.mark_position(key)
            if self.connected:
                self._flush()

    def position(self, account: str | None = None) -> int:
        """The signed position of ``account`` (the first one by default) in the instrument."""
        with self._lock:
            return self.positions.get((account or self.accounts[0], self.instrument), SimPosition()).qty

    # --- incoming/ -------------------------------------------------------------------------------------------

    def _pending_oifs(self) -> list[Path]:
        try:
            paths = [p for p in self.incoming.iterdir() if is_oif_name(p.name)]
        except FileNotFoundError:
            return []
        return sorted(paths, key=lambda p: (_mtime(p), p.name))

    def _read_incoming(self) -> None:
        for path in self._pending_oifs():
            try:
                text = path.read_text(encoding="ascii", errors="replace")
                path.unlink()
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                if line.strip():
                    self._receive(line.strip())

    def _receive(self, line: str) -> None:
        self.received.append(line)
        fields = [f.strip() for f in line.split(";")]
        if len(fields) != FIELDS:
            self.log.append(f"OIF, '{line}' has invalid # of parameters, should be {FIELDS} but is {len(fields)}")
            return
        command = fields[0].upper()
        handler = {"PLACE": self._place, "CANCEL": self._cancel_cmd, "CHANGE": self._change,
                   "CLOSEPOSITION": self._close_position, "CANCELALLORDERS": self._cancel_all,
                   "FLATTENEVERYTHING": self._flatten_everything}.get(command)
        if handler is None:
            self.log.append(f"OIF, '{line}': unknown command '{fields[0]}'")
            return
        handler(fields, line)

    def _later(self, steps: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._due, _Due(self.clock() + steps * self.latency_s, next(self._seq), action))

    def _run_due(self) -> None:
        while self._due and self._due[0].at <= self.clock():  # a step due now runs now (latency 0: at once)
            heapq.heappop(self._due).action()

    def _place(self, f: list[str], line: str) -> None:
        order_type = f[5].upper()
        if order_type not in ORDER_TYPES:
            self.log.append(f"OIF, '{line}' holds invalid order type parameter '{f[5]}'")
            return
        oid = f[10]
        if oid and oid in self.orders:
            self.log.append(f"OIF, '{line}': order id '{oid}' is already in use")
            return
        try:
            qty, limit, stop = int(f[4] or 0), float(f[6] or 0), float(f[7] or 0)
        except ValueError:
            qty, limit, stop = 0, 0.0, 0.0
            reason: str | None = f"quantity or price not a number: '{f[4]}', '{f[6]}', '{f[7]}'"
        else:
            reason = None
        order = SimOrder(oid or f"noid{next(self._order_seq)}", f[1], f[2], f[3].upper(), qty, order_type, limit,
                         stop, f[9], sequence=next(self._order_seq))
        self.orders[order.order_id] = order
        self._out.mark(order)
        reason = reason or self._refusal(order)
        if reason is None and self._reject:
            reason = self._reject.pop(0)
        if reason is not None:
            self._set(order, "REJECTED")
            self.log.append(f"Order '{order.order_id}' rejected: {reason}")
            return
        self._later(1, lambda: self._accept(order))

    def _refusal(self, o: SimOrder) -> str | None:
        """Why NinjaTrader rejects this PLACE, if it does."""
        if o.account not in self.accounts:
            return f"account '{o.account}' is not connected"
        if o.instrument != self.instrument:
            return f"instrument '{o.instrument}' is not supported (no market data)"
        if o.action not in ("BUY", "SELL", "BUYTOCOVER", "SELLSHORT"):
            return f"invalid action '{o.action}'"
        if o.qty < 1:
            return f"order quantity {o.qty} is not valid"
        if o.order_type in ("LIMIT", "STOPLIMIT") and o.limit <= 0:
            return "a limit order needs a limit price"
        if o.order_type in ("STOPMARKET", "STOPLIMIT") and o.stop <= 0:
            return "a stop order needs a stop price"
        if o.order_type in ("STOPMARKET", "STOPLIMIT") and self.last_price is not None:
            if _buys(o) and o.stop <= self.last_price:
                return f"buy stop {o.stop:g} can't be placed at or below the market ({self.last_price:g})"
            if not _buys(o) and o.stop >= self.last_price:
                return f"sell stop {o.stop:g} can't be placed at or above the market ({self.last_price:g})"
        return None

    def _accept(self, order: SimOrder) -> None:
        if order.state != "SUBMITTED":
            return  # cancelled meanwhile
        self._set(order, "ACCEPTED")
        self._later(1, lambda: self._work(order))

    def _work(self, order: SimOrder) -> None:
        if order.state != "ACCEPTED":
            return
        self._set(order, "WORKING")
        if order.order_type == "MARKET":
            self._later(1, lambda: self._fill_market(order))

    def _fill_market(self, order: SimOrder) -> None:
        if not order.working:
            return
        if self.last_price is None:
            return  # no price yet: it fills at the first one (_on_quote)
        qty = order.qty - order.filled
        if self._partial is not None and order.filled == 0 and self._partial < qty:
            qty, self._partial = self._partial, None
            self._fill(order, qty, self._slipped(order, self.last_price))
            self._later(1, lambda: self._fill_market(order))
            return
        self._fill(order, qty, self._slipped(order, self.last_price))

    def _cancel_cmd(self, f: list[str], line: str) -> None:
        self._request_cancel(f[10], f"OIF, '{line}'")

    def _request_cancel(self, oid: str, what: str) -> None:
        order = self.orders.get(oid)
        if order is None or not order.active:
            self.log.append(f"{what}: order '{oid}' " + ("is not known" if order is None else
                                                         f"can't be cancelled: it is {order.state}"))
            return
        if order.state == "CANCELPENDING":
            return
        self._set(order, "CANCELPENDING")
        self._later(1, lambda: self._cancelled(order))

    def _cancelled(self, order: SimOrder) -> None:
        if order.state != "CANCELPENDING":
            return  # filled meanwhile
        self._set(order, "CANCELLED")
        self._cancel_oco(order)

    def _change(self, f: list[str], line: str) -> None:
        order = self.orders.get(f[10])
        if order is None or not order.active or order.state == "CANCELPENDING":
            self.log.append(f"OIF, '{line}': order '{f[10]}' " + ("is not known" if order is None else
                                                                 f"can't be changed: it is {order.state}"))
            return
        try:
            qty, limit, stop = int(f[4] or 0), float(f[6] or 0), float(f[7] or 0)
        except ValueError:
            self.log.append(f"OIF, '{line}': quantity or price not a number")
            return
        if qty < 0 or limit < 0 or stop < 0 or (qty and qty <= order.filled):
            self.log.append(f"OIF, '{line}': change of '{order.order_id}' refused (quantity {qty}, filled "
                            f"{order.filled})")
            return
        back = order.state
        self._set(order, "CHANGESUBMITTED")

        def apply() -> None:
            if order.state != "CHANGESUBMITTED":
                return
            order.qty, order.limit, order.stop = qty or order.qty, limit or order.limit, stop or order.stop
            self._set(order, back)
        self._later(1, apply)

    def _close_position(self, f: list[str], line: str) -> None:
        account, instrument = f[1], f[2]
        if account not in self.accounts or instrument != self.instrument:
            self.log.append(f"OIF, '{line}': unknown account or instrument '{account}' '{instrument}'")
            return
        if self._refuse_close:
            self._refuse_close -= 1
            self.log.append(f"CLOSEPOSITION {account} {instrument}: refused by the account")
            return
        self._flatten([(account, instrument)])

    def _cancel_all(self, f: list[str], line: str) -> None:
        for order in list(self.orders.values()):
            if order.active:
                self._request_cancel(order.order_id, "CANCELALLORDERS")

    def _flatten_everything(self, f: list[str], line: str) -> None:
        self._flatten(list(self.positions) + [(a, self.instrument) for a in self.accounts])

    def _flatten(self, keys: list[tuple[str, str]]) -> None:
        """Cancel the working orders of these accounts and instruments, then close their positions (one latency
        step later, at the price then)."""
        keys = list(dict.fromkeys(keys))
        for order in list(self.orders.values()):
            if order.active and (order.account, order.instrument) in keys:
                self._request_cancel(order.order_id, "CLOSEPOSITION")

        def close() -> None:
            for key in keys:
                pos = self.positions.get(key)
                if pos is not None and pos.qty and self.last_price is not None:
                    side = "SELL" if pos.qty > 0 else "BUY"
                    self._apply(key, -pos.qty, self._slipped_side(side, self.last_price))
        self._later(1, close)

    # --- the market ------------------------------------------------------------------------------------------

    def _on_quote(self, q: Quote) -> None:
        first = self.last_price is None
        self.last_price = q.open
        if first:  # market orders that waited for a price
            for order in sorted(self.orders.values(), key=lambda o: o.sequence):
                if order.working and order.order_type == "MARKET":
                    self._fill_market(order)
        working = sorted((o for o in self.orders.values() if o.working and o.order_type != "MARKET"),
                         key=lambda o: (o.order_type != "STOPMARKET", o.sequence))  # stops first
        for order in working:
            if not order.working:
                continue  # cancelled by its OCO sibling on this bar
            price = touched(order.order_type, _buys(order), order.stop, order.limit, q)
            if price is not None:
                if order.order_type == "STOPMARKET":
                    price = self._slipped(order, price)
                self._fill(order, order.qty - order.filled, price)
        self.last_price = q.close

    def _slipped(self, order: SimOrder, price: float) -> float:
        return self._slipped_side(order.action, price)

    def _slipped_side(self, action: str, price: float) -> float:
        ticks = self._rng.randint(0, self.slippage_ticks) if self.slippage_ticks else 0
        return round(price + (1 if action in ("BUY", "BUYTOCOVER") else -1) * ticks * self.tick_size, 10)

    def _fill(self, order: SimOrder, qty: int, price: float) -> None:
        if qty <= 0:
            return
        order.avg = (order.avg * order.filled + price * qty) / (order.filled + qty)
        order.filled += qty
        self._set(order, "FILLED" if order.filled >= order.qty else "PARTFILLED")
        self._apply((order.account, order.instrument), qty if _buys(order) else -qty, price)
        if order.state == "FILLED":
            self._cancel_oco(order)

    def _cancel_oco(self, order: SimOrder) -> None:
        """One order of an OCO group filled or cancelled: the others are cancelled."""
        if not order.oco:
            return
        for sibling in self.orders.values():
            if sibling is not order and sibling.oco == order.oco and sibling.active:
                self._set(sibling, "CANCELLED")

    def _apply(self, key: tuple[str, str], signed: int, price: float) -> None:
        pos = self.positions.setdefault(key, SimPosition())
        pos.qty, pos.avg = apply_fill(pos.qty, pos.avg, signed, price)
        self._out.mark_position(key)

    # --- outgoing/ -------------------------------------------------------------------------------------------

    def _set(self, order: SimOrder, state: str) -> None:
        order.state = state
        self._out.mark(order)
        if self.connected and self.latency_s > 0:
            self._flush()  # each state is visible for a latency step

    def state_file(self, order_id: str) -> Path:
        """``outgoing/``'s state file of the order (the account's name first in the account_prefixed style)."""
        order = self.orders.get(order_id)
        return self._out.state_file(order_id, order.account if order is not None else self.accounts[0])

    def position_file(self, account: str | None = None) -> Path:
        """``outgoing/``'s position file of the account (default: the first) in the traded instrument."""
        return self._out.position_file(account or self.accounts[0], self.instrument)

    def _flush(self) -> None:
        self._out.flush(self.orders, self.positions)

    def _write(self, name: str, line: str) -> None:
        self._out.write(name, line)

def _buys(order: SimOrder) -> bool:
    return order.action in ("BUY", "BUYTOCOVER")


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0

