"""A lockstep fake NinjaTrader 8 for tests that need one bar at a time: it reads OIFs from incoming/ when a test calls
:meth:`FakeNinjaTrader.process` and writes outgoing/ files as NinjaTrader does. Most tests use the simulated
NinjaTrader on its own thread instead (``hybrid_trader.live.nt_sim``, ``tests/live/nt_async.py``), whose order,
stop/limit levels and position arithmetic this fake shares.

It follows the ATI file interface of the NinjaTrader 8 help guide (order_instruction_files_oif,
commands_and_valid_parameters, information_update_files), its parsing written here
independently of ``hybrid_trader.live.ati`` so that the bridge is tested against the protocol,
not against itself. NinjaTrader's behaviour it copies from published field tests: a line with the wrong
number of fields or an unknown order type (``STOP``) is refused with a log line and no
outgoing file; states are written upper case (``WORKING;0;0``).

Fills follow the project's paper broker: a MARKET order fills at the bar's open; a working
stop or limit is checked against the bar's high and low (the stop first, so the stop wins
when a bar touches both; a bar that opens beyond a level fills at the open).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hybrid_trader.live.nt_sim import SimOrder
from hybrid_trader.live.nt_sim_market import apply_fill, touched

COMMAND_FIELDS = 13


@dataclass(frozen=True)
class FakeBar:
    open: float
    high: float
    low: float
    close: float


@dataclass
class FakeOrder(SimOrder):
    """The simulator's order (``live.nt_sim``), carried out bar by bar."""

    live: bool = False
    """Carried out at the broker (a delayed order is acknowledged first, live later)."""


@dataclass
class _Pending:
    due: int
    fields: list[str]


class FakeNinjaTrader:
    """NinjaTrader 8's ATI file interface for one account and instrument, driven bar by bar.

    Fault modes: :meth:`reject_next`, :meth:`delay`, :meth:`disconnect`/:meth:`reconnect`,
    :meth:`partial_fill_next`. ``state_file_style``: ``"documented"`` writes ``<ORDER ID>.txt``
    (the help guide), ``"account_prefixed"`` writes ``<ACCOUNT>_<ORDER ID>.txt`` (field tests).
    """

    def __init__(self, nt_dir: Path, account: str, instrument: str, *, exchange: str = "Globex",
                 state_file_style: Literal["documented", "account_prefixed"] = "documented",
                 position_file_instrument: str | None = None) -> None:
        self.nt_dir = Path(nt_dir)
        self.incoming = self.nt_dir / "incoming"
        self.outgoing = self.nt_dir / "outgoing"
        self.incoming.mkdir(parents=True, exist_ok=True)
        self.outgoing.mkdir(parents=True, exist_ok=True)
        self.account = account
        self.instrument = instrument
        self.exchange = exchange
        self.state_file_style = state_file_style
        self.position_file_instrument = position_file_instrument or instrument
        self.orders: dict[str, FakeOrder] = {}
        self.position = 0
        self.avg_price = 0.0
        self.log: list[str] = []
        """NinjaTrader's Log tab: refusals and rejection reasons (the ATI files carry none)."""
        self.received: list[str] = []
        """Every instruction line read, in order."""
        self.connected = True
        self.bar_index = 0
        self._reject: list[str] = []
        self._delay = 0
        self._partial: int | None = None
        self._refuse_close = 0
        self._pending: list[_Pending] = []
        self._dirty: set[str] = set()
        self._position_dirty = False
        self._sequence = 0

    # --- fault modes ---------------------------------------------------------------------------------------

    def reject_next(self, reason: str = "rejected by the fake broker") -> None:
        """The next PLACE is rejected (``REJECTED;0;0``); the reason goes to :attr:`log` only."""
        self._reject.append(reason)

    def delay(self, n_bars: int) -> None:
        """Commands read from now on are acknowledged (ACCEPTED) but carried out ``n_bars`` bars later."""
        self._delay = n_bars

    def disconnect(self) -> None:
        """NinjaTrader stops reading incoming/ and writing outgoing/ (OIFs pile up); working orders stay live."""
        self.connected = False

    def reconnect(self) -> None:
        """Writes what happened meanwhile; the piled-up OIFs are read at the next :meth:`process`."""
        self.connected = True
        self._flush()

    def refuse_close(self, n: int) -> None:
        """The next ``n`` CLOSEPOSITION commands are refused (a Log line, the position kept), as NinjaTrader does
        when the account or its connection refuses the close."""
        self._refuse_close = n

    def partial_fill_next(self, qty: int) -> None:
        """The next MARKET order fills only ``qty`` contracts on its first bar, the rest on the next bar."""
        self._partial = qty

    # --- the bar loop --------------------------------------------------------------------------------------

    def process(self, bar: FakeBar | Mapping[str, float]) -> None:
        """One bar: read and carry out OIFs (if connected), fill market orders, trigger stops and limits."""
        b = bar if isinstance(bar, FakeBar) else FakeBar(bar["open"], bar["high"], bar["low"], bar["close"])
        self.bar_index += 1
        if self.connected:
            self._read_incoming()
        due = [p for p in self._pending if p.due <= self.bar_index]
        self._pending = [p for p in self._pending if p.due > self.bar_index]
        for p in due:
            self._execute(p.fields, b)
        self._fill_markets(b)
        self._trigger(b)
        if self.connected:
            self._flush()

    def _read_incoming(self) -> None:
        files = sorted((p for p in self.incoming.iterdir() if p.name.lower().startswith("oif")
                        and p.name.lower().endswith(".txt")), key=lambda p: (p.stat().st_mtime_ns, p.name))
        for path in files:
            text = path.read_text(encoding="ascii")
            path.unlink()
            for line in text.splitlines():
                if line.strip():
                    self._receive(line.strip())

    def _receive(self, line: str) -> None:
        self.received.append(line)
        fields = line.split(";")
        if len(fields) != COMMAND_FIELDS:
            self.log.append(f"OIF, '{line}' has invalid # of parameters, should be {COMMAND_FIELDS} "
                            f"but is {len(fields)}")
            return
        command = fields[0].upper()
        if command == "PLACE":
            if fields[5].upper() not in ("MARKET", "LIMIT", "STOPMARKET", "STOPLIMIT"):
                self.log.append(f"OIF, '{line}' holds invalid order type parameter '{fields[5]}'")
                return
            if fields[1] != self.account or fields[2] != self.instrument:
                self.log.append(f"OIF, '{line}': unknown account or instrument")
                return
            order = self._new_order(fields)
            if self._reject:
                order.state = "REJECTED"
                self.log.append(f"Order '{order.order_id}' rejected: {self._reject.pop(0)}")
                self._mark(order)
                return
            if self._delay:
                order.state = "ACCEPTED"
                self._mark(order)
                self._pending.append(_Pending(self.bar_index + self._delay, fields))
                return
        elif self._delay:
            self._pending.append(_Pending(self.bar_index + self._delay, fields))
            return
        self._pending.append(_Pending(self.bar_index, fields))

    def _new_order(self, fields: list[str]) -> FakeOrder:
        self._sequence += 1
        order = FakeOrder(fields[10], fields[1], fields[2], fields[3].upper(), int(fields[4]), fields[5].upper(),
                          float(fields[6] or 0), float(fields[7] or 0), fields[9], sequence=self._sequence)
        if order.order_id:
            self.orders[order.order_id] = order
        return order

    def _execute(self, fields: list[str], bar: FakeBar) -> None:
        command = fields[0].upper()
        if command == "PLACE":
            order = self.orders.get(fields[10]) or self._new_order(fields)
            if order.state == "REJECTED":
                return
            order.state = "WORKING" if order.order_type != "MARKET" else "ACCEPTED"
            order.live = True
            self._mark(order)
        elif command == "CANCEL":
            self._cancel(fields[10])
        elif command == "CHANGE":
            order = self.orders.get(fields[10])
            if order is None or not order.active:
                self.log.append(f"CHANGE: order '{fields[10]}' is not working")
                return
            qty, limit, stop = int(fields[4] or 0), float(fields[6] or 0), float(fields[7] or 0)
            order.qty = qty or order.qty
            order.limit = limit or order.limit
            order.stop = stop or order.stop
            self._mark(order)
        elif command in ("CLOSEPOSITION", "FLATTENEVERYTHING"):
            if command == "CLOSEPOSITION" and (fields[1] != self.account or fields[2] != self.instrument):
                self.log.append(f"CLOSEPOSITION: unknown account or instrument {fields[1]!r} {fields[2]!r}")
                return
            if command == "CLOSEPOSITION" and self._refuse_close:
                self._refuse_close -= 1
                self.log.append(f"CLOSEPOSITION {fields[1]} {fields[2]}: refused")
                return
            for order in self.orders.values():
                if order.active:
                    self._cancel(order.order_id)
            if self.position:
                self._apply_fill(-self.position, bar.open)
        elif command == "CANCELALLORDERS":
            for order in self.orders.values():
                if order.active:
                    self._cancel(order.order_id)
        else:
            self.log.append(f"OIF: unknown command '{fields[0]}'")

    def _cancel(self, order_id: str) -> None:
        order = self.orders.get(order_id)
        if order is None or not order.active:
            self.log.append(f"CANCEL: order '{order_id}' is not working")
            return
        order.state = "CANCELLED"
        self._mark(order)
        self._cancel_oco_siblings(order)

    def _cancel_oco_siblings(self, order: FakeOrder) -> None:
        """An OCO group: once one order fills or is cancelled, the others are cancelled."""
        if not order.oco:
            return
        for sibling in self.orders.values():
            if sibling is not order and sibling.oco == order.oco and sibling.active:
                sibling.state = "CANCELLED"
                self._mark(sibling)

    def _fill_markets(self, bar: FakeBar) -> None:
        for order in sorted(self.orders.values(), key=lambda o: o.sequence):
            if order.live and order.order_type == "MARKET" and order.state in ("ACCEPTED", "PARTFILLED"):
                qty = order.qty - order.filled
                if self._partial is not None and order.filled == 0:
                    qty = min(qty, self._partial)
                    self._partial = None
                self._fill(order, qty, bar.open)

    def _trigger(self, bar: FakeBar) -> None:
        working = [o for o in self.orders.values() if o.live and o.state == "WORKING"]
        stops = [o for o in working if o.order_type == "STOPMARKET"]
        limits = [o for o in working if o.order_type == "LIMIT"]
        for order in stops + limits:
            if order.state != "WORKING":
                continue  # cancelled by its OCO sibling earlier in this bar
            price = touched(order.order_type, order.action == "BUY", order.stop, order.limit, bar)
            if price is None:
                continue
            self._fill(order, order.qty - order.filled, price)
            self._cancel_oco_siblings(order)

    def _fill(self, order: FakeOrder, qty: int, price: float) -> None:
        if qty <= 0:
            return
        order.avg = (order.avg * order.filled + price * qty) / (order.filled + qty)
        order.filled += qty
        order.state = "FILLED" if order.filled >= order.qty else "PARTFILLED"
        self._mark(order)
        self._apply_fill(qty if order.action == "BUY" else -qty, price)

    def _apply_fill(self, signed: int, price: float) -> None:
        self.position, self.avg_price = apply_fill(self.position, self.avg_price, signed, price)
        self._position_dirty = True

    # --- outgoing/ -----------------------------------------------------------------------------------------

    def _mark(self, order: FakeOrder) -> None:
        if order.order_id:
            self._dirty.add(order.order_id)

    def state_file(self, order_id: str) -> Path:
        name = order_id if self.state_file_style == "documented" else f"{self.account}_{order_id}"
        return self.outgoing / f"{name}.txt"

    @property
    def position_file(self) -> Path:
        return self.outgoing / f"{self.position_file_instrument} {self.exchange}_{self.account}_Position.txt"

    def _flush(self) -> None:
        for order_id in sorted(self._dirty):
            order = self.orders[order_id]
            self.state_file(order_id).write_text(f"{order.state};{order.filled};{_num(order.avg)}\n")
        self._dirty.clear()
        if self._position_dirty:
            side = "LONG" if self.position > 0 else "SHORT" if self.position < 0 else "FLAT"
            self.position_file.write_text(f"{side};{abs(self.position)};{_num(self.avg_price)}\n")
            self._position_dirty = False

    def pending_files(self) -> list[str]:
        return sorted(p.name for p in self.incoming.iterdir())

    def snapshot(self) -> dict[str, Any]:
        return {oid: (o.state, o.filled, o.avg) for oid, o in self.orders.items()}


def _num(value: float) -> str:
    return f"{value:.8f}".rstrip("0").rstrip(".") if value else "0"
