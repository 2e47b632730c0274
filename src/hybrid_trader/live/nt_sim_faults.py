"""The faults a test (or a user of ``hybrid-trader nt-sim``) makes the simulated NinjaTrader play.

:class:`FaultControls` is the part of :class:`~hybrid_trader.live.nt_sim.NinjaTraderSim` that
misbehaves on purpose: a rejected order, a refused close, a partial fill, reports that lag, a
dropped connection, a restart that empties ``outgoing/``. Each is thread-safe (it takes the
simulator's lock) and takes effect at the simulator's next poll.
"""

from __future__ import annotations

import threading
from pathlib import Path

from hybrid_trader.live.nt_sim_outgoing import OutgoingFiles


class FaultControls:
    """Fault methods of the simulator; the attributes below are the simulator's own (set in its ``__init__``)."""

    _lock: threading.RLock
    _out: OutgoingFiles
    _reject: list[str]
    _refuse_close: int
    _partial: int | None
    connected: bool
    connection: str | None
    outgoing: Path
    restarts: int

    def _flush(self) -> None:
        raise NotImplementedError

    def _write(self, name: str, line: str) -> None:
        raise NotImplementedError

    def reject_next(self, reason: str = "rejected by the simulated broker") -> None:
        """The next PLACE is rejected (``REJECTED;0;0``); the reason goes to :attr:`log` only."""
        with self._lock:
            self._reject.append(reason)

    def refuse_close(self, n: int) -> None:
        """The next ``n`` CLOSEPOSITION commands are refused (a Log line, the position kept)."""
        with self._lock:
            self._refuse_close = n

    def partial_fill_next(self, qty: int) -> None:
        """The next MARKET order fills ``qty`` contracts, the rest one latency step later at the price then."""
        with self._lock:
            self._partial = qty

    def hold_reports(self, held: bool = True) -> None:
        """Hold back (True) or write now (False) the order state and position files: NinjaTrader's reports lagging
        what it did (it fills, cancels and reads incoming/ meanwhile)."""
        with self._lock:
            self._out.held = held
            if not held and self.connected:
                self._flush()

    def disconnect(self) -> None:
        """The connection drops: ``<connection>.txt`` reads DISCONNECTED; incoming/ is not read (OIFs pile up) and
        outgoing/ not written until :meth:`reconnect`; working orders stay at the broker."""
        with self._lock:
            if self.connection:
                self._write(f"{self.connection}.txt", "DISCONNECTED")
            self.connected = False

    def reconnect(self) -> None:
        """CONNECTED again: what changed meanwhile is written, the piled-up OIFs are read at the next poll."""
        with self._lock:
            self.connected = True
            if self.connection:
                self._write(f"{self.connection}.txt", "CONNECTED")
            self._flush()

    def restart(self) -> None:
        """NinjaTrader restarts: ``outgoing/`` is emptied; positions and working orders stay at the broker and
        their files come back with their next change (the connection file at once)."""
        with self._lock:
            self.restarts += 1
            for path in self.outgoing.iterdir():
                if path.is_file():
                    path.unlink(missing_ok=True)
            self._out.forget()
            if self.connection:
                self._write(f"{self.connection}.txt", "CONNECTED" if self.connected else "DISCONNECTED")
