"""Reading NinjaTrader's outgoing/ folder: order states, the position and the connection's state.

:class:`OutgoingReader` is the reading half of :class:`~hybrid_trader.live.ninjatrader.NinjaTraderBridge`:
each file is re-read a few times when it does not parse (NinjaTrader may be rewriting it at that instant), a
missing file is "nothing written yet", and any other failure to read is a UserError saying how to grant access.
File formats: :mod:`hybrid_trader.live.ati`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hybrid_trader.errors import UserError
from hybrid_trader.live.ati import (
    FLAT,
    BrokerPosition,
    OrderState,
    check_order_id,
    order_state_names,
    parse_connection,
    parse_order_state,
    parse_position,
    position_file_matches,
)


class PositionLost(UserError):
    """The position file this bridge had read has gone: the position is unknown, not flat."""


class OutgoingReader:
    """Reads one account's and instrument's files in ``outgoing/``; :class:`NinjaTraderBridge` supplies the fields
    named below (its constructor's arguments)."""

    outgoing: Path
    account: str
    instrument: str
    connection: str | None
    read_retries: int
    retry_delay_s: float
    sleep: Callable[[float], None]
    _position_seen: bool

    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8-sig", errors="replace")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise _cannot_read(path, "NinjaTrader's file", err) from None

    def _read_parsed(self, path: Path, parse: Callable[[str], object]) -> object | None:
        """Read and parse, re-reading a few times: NinjaTrader may be rewriting the file at that instant."""
        for attempt in range(self.read_retries + 1):
            text = self._read(path)
            if text is None:
                return None
            try:
                return parse(text)
            except UserError:
                if attempt == self.read_retries:
                    raise
                self.sleep(self.retry_delay_s)
        return None  # pragma: no cover - the loop returns or raises

    def _state_file(self, order_id: str) -> Path | None:
        found = [p for p in (self.outgoing / n for n in order_state_names(order_id, self.account)) if p.is_file()]
        if not found:
            return None
        return max(found, key=lambda p: p.stat().st_mtime_ns)

    def order_state(self, order_id: str, known: OrderState | None = None) -> OrderState | None:
        """The order's state from outgoing/, or None while NinjaTrader has written none.

        A state that fills more contracts than ``known`` (the last state acted on) is read again after
        ``retry_delay_s`` until two reads agree (at most ``read_retries`` more): a file caught mid-write can still
        parse (``FILLED;3;2100`` for ``FILLED;3;21003.25``), and a fill is booked at its price."""
        check_order_id(order_id)
        path = self._state_file(order_id)
        if path is None:
            return None

        def read() -> OrderState | None:
            result = self._read_parsed(path, lambda text: parse_order_state(path, text, order_id))
            assert result is None or isinstance(result, OrderState)
            return result

        state = read()
        for _ in range(self.read_retries):
            if state is None or state.filled_qty <= (known.filled_qty if known is not None else 0):
                break
            self.sleep(self.retry_delay_s)
            again = read()
            if again == state:
                break
            state = again
        return state

    def _listing(self, folder: Path) -> list[Path]:
        """The entries of incoming/ or outgoing/; a folder that has gone (removed, renamed, its drive unmounted
        mid-run) is a UserError saying so, not a write error."""
        try:
            return list(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            raise UserError(f"NinjaTrader's {folder.name}\\ folder is missing: it was removed, renamed or its drive "
                            "unmounted while this program was reading it", file=str(folder),
                            fix="restore NinjaTrader's user folder (or remount the drive), check NinjaTrader's "
                                "Positions tab, then restart with the same --journal") from None
        except OSError as err:
            raise _cannot_read(folder, f"NinjaTrader's {folder.name}\\ folder", err) from None

    def position(self) -> BrokerPosition:
        """The account's position in the instrument from outgoing/; FLAT with no ``file`` (not ``known``) when
        NinjaTrader has written none."""
        # the name before the disk: outgoing/ holds a state file for every order of the session
        names = [p for p in self._listing(self.outgoing)
                 if position_file_matches(p.name, self.account, self.instrument) and p.is_file()]
        if not names:
            if self._position_seen:  # NinjaTrader restarted (it empties outgoing/) or the file was removed
                raise PositionLost(f"NinjaTrader's position file for {self.instrument} in {self.account} has "
                                f"disappeared from {self.outgoing}: NinjaTrader restarted (it empties outgoing\\) or "
                                "the file was removed, so the position is unknown, not flat",
                                file=str(self.outgoing),
                                fix="check NinjaTrader's Positions tab, flatten by hand if needed, then restart "
                                    "with the same --journal")
            return FLAT
        path = max(names, key=lambda p: p.stat().st_mtime_ns)
        result = self._read_parsed(path, lambda text: parse_position(path, text))
        assert result is None or isinstance(result, BrokerPosition)
        if result is not None:
            self._position_seen = True
        return result or FLAT

    def connection_state(self) -> str | None:
        """``CONNECTED`` or ``DISCONNECTED`` from ``outgoing/<connection>.txt`` (written on each change of the
        connection's state); None when no ``connection`` is named or NinjaTrader has written no such file."""
        if not self.connection:
            return None
        path = self.outgoing / f"{self.connection}.txt"
        result = self._read_parsed(path, lambda text: parse_connection(path, text))
        assert result is None or isinstance(result, str)
        return result


def _cannot_read(path: Path, what: str, err: OSError) -> UserError:
    """A read of NinjaTrader's files that failed for another reason than a missing file."""
    return UserError(f"cannot read {what}: {err.strerror or err}", file=str(path),
                     fix="give this program read access to NinjaTrader's user folder (Windows: folder Properties > "
                         "Security; Linux/WSL: chmod u+rx)")
