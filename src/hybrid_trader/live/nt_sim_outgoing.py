"""The simulated NinjaTrader's books and its reports: orders, positions and the ``outgoing/`` files that show them.

:class:`SimOrder` and :class:`SimPosition` are what :class:`~hybrid_trader.live.nt_sim.NinjaTraderSim` holds;
:class:`OutgoingFiles` writes them as NinjaTrader 8 does (an order state file per order, a position file per
account and instrument, the connection file), each file replaced whole, only what changed since the last
flush, and nothing while reports are held (:meth:`NinjaTraderSim.hold_reports`).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from hybrid_trader.live.ati import TEMP_PREFIX, TEMP_SUFFIX

ACTIVE = frozenset({"SUBMITTED", "ACCEPTED", "WORKING", "CHANGESUBMITTED", "CANCELPENDING", "PARTFILLED"})
"""Order states that can still fill, change or be cancelled."""


@dataclass
class SimOrder:
    """One order at the simulated broker."""

    order_id: str
    account: str
    instrument: str
    action: str
    qty: int
    order_type: str
    limit: float
    stop: float
    oco: str
    state: str = "SUBMITTED"
    filled: int = 0
    avg: float = 0.0
    sequence: int = 0

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def working(self) -> bool:
        """At the exchange: it may fill."""
        return self.state in ("WORKING", "PARTFILLED", "CHANGESUBMITTED")


@dataclass
class SimPosition:
    qty: int = 0
    avg: float = 0.0


class OutgoingFiles:
    """``outgoing/`` as NinjaTrader writes it: the orders and positions marked since the last :meth:`flush`.

    ``state_file_style``: ``documented`` (``<id>.txt``) or ``account_prefixed`` (``<account>_<id>.txt``).
    """

    def __init__(self, folder: Path, exchange: str, state_file_style: str) -> None:
        self.folder = folder
        self.exchange = exchange
        self.state_file_style = state_file_style
        self.held = False
        """Reports held back: :meth:`flush` writes nothing until it is False again."""
        self._orders: set[str] = set()
        self._positions: set[tuple[str, str]] = set()

    def mark(self, order: SimOrder) -> None:
        """The order's state changed (an order without an id has no file)."""
        if not order.order_id.startswith("noid"):
            self._orders.add(order.order_id)

    def mark_position(self, key: tuple[str, str]) -> None:
        """The position of ``(account, instrument)`` changed."""
        self._positions.add(key)

    def forget(self) -> None:
        """Nothing is due (NinjaTrader restarted and emptied the folder: files come back with the next change)."""
        self._orders.clear()
        self._positions.clear()

    def state_file(self, order_id: str, account: str) -> Path:
        name = order_id if self.state_file_style == "documented" else f"{account}_{order_id}"
        return self.folder / f"{name}.txt"

    def position_file(self, account: str, instrument: str) -> Path:
        return self.folder / f"{instrument} {self.exchange}_{account}_Position.txt"

    def flush(self, orders: dict[str, SimOrder], positions: dict[tuple[str, str], SimPosition]) -> None:
        """Write every marked order's state file and position file (unless held)."""
        if self.held:
            return
        for oid in sorted(self._orders):
            o = orders[oid]
            self.write(self.state_file(oid, o.account).name, f"{o.state};{o.filled};{_num(o.avg)}")
        self._orders.clear()
        for key in sorted(self._positions):
            pos = positions[key]
            side = "LONG" if pos.qty > 0 else "SHORT" if pos.qty < 0 else "FLAT"
            self.write(self.position_file(key[0], key[1]).name, f"{side};{abs(pos.qty)};{_num(pos.avg)}")
        self._positions.clear()

    def write(self, name: str, line: str) -> None:
        """Replace ``outgoing/name`` whole (a reader never sees half a line)."""
        temp = self.folder / f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
        temp.write_text(line + "\n", encoding="ascii")
        os.replace(temp, self.folder / name)


def _num(value: float) -> str:
    return f"{value:.8f}".rstrip("0").rstrip(".") if value else "0"
