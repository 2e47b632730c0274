"""The NinjaTrader 8 bridge: orders through the ATI file interface, states and position read back.

An entry is one OIF holding three PLACE lines: the MARKET entry, then a STOPMARKET stop
and a LIMIT target that share an OCO id, so NinjaTrader (and, where the broker supports
it, the broker) holds the protection: if this program dies after the file is written,
the position it opens is still bracketed, and when one exit fills NinjaTrader cancels the
other. The child ids are derived from the entry id (``<id>-SL``, ``<id>-TP``, OCO
``<id>-OCO``), and every id is deterministic (:func:`order_id`), so a restarted program
asks :meth:`NinjaTraderBridge.was_sent` and never sends the same decision twice.

Protocol details and the NinjaTrader help pages they come from: :mod:`hybrid_trader.live.ati`; reading
the states, position and connection files: :mod:`hybrid_trader.live.nt_outgoing`.
Set-up for a trader: docs/NINJATRADER.md.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from hybrid_trader.errors import UserError
from hybrid_trader.live.ati import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    BrokerPosition,
    OifOrder,
    OrderState,
    Side,
    cancel_line,
    change_line,
    check_order_id,
    close_position_line,
    is_oif_name,
    place_line,
    write_atomic,
)
from hybrid_trader.live.nt_outgoing import OutgoingReader

EventKind = Literal["FILL", "REJECTED", "CANCELLED", "UNKNOWN", "NO_ACK", "WITHDRAWN", "POSITION", "UNPROTECTED"]


def order_id(run_tag: str, bar_time: datetime | str, intent: str) -> str:
    """A deterministic order id: the same run, bar and intent give the same id after a restart.

    ``bar_time`` is the decision bar's time (an aware time is taken in UTC); characters a
    file name or an OIF cannot hold become '-'; ids over 60 characters keep a hash of the
    whole so that they stay unique.
    """
    if isinstance(bar_time, datetime):
        if bar_time.tzinfo is not None:
            bar_time = bar_time.astimezone(UTC).replace(tzinfo=None)
        stamp = bar_time.strftime("%Y%m%dT%H%M%S")
    else:
        stamp = str(bar_time)
    raw = f"{run_tag}-{stamp}-{intent}"
    text = re.sub(r"[^A-Za-z0-9-]+", "-", raw).strip("-")
    if not text:
        raise UserError("an order id needs a run tag, a bar time or an intent", value=raw)
    if len(text) > 60:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
        text = f"{text[:47].rstrip('-')}-{digest}"
    return check_order_id(text)


def order_tag(run_tag: str, run_id: str, account: str | None = None) -> str:
    """What a run's order ids start with: ``<account>-<run id>-<run tag>``, so that another account's orders and a
    re-run's (a new journal draws a new ``run_id``) never share an id with this run's, while a restart on the same
    journal makes the same ids. Without a ``run_id`` (a journal that held orders before journals drew one) the run
    tag alone, as those orders were named."""
    if not run_id:
        return run_tag
    return "-".join(part for part in (account, run_id, run_tag) if part)


@dataclass(frozen=True)
class Bracket:
    """An entry and its protective OCO pair, by id."""

    entry_id: str
    side: Side
    qty: int
    stop_id: str
    target_id: str
    oco_id: str
    sent: bool
    """False when the entry had already been sent (by this or an earlier process): nothing was written."""

    @property
    def ids(self) -> tuple[str, str, str]:
        return self.entry_id, self.stop_id, self.target_id


def bracket_ids(entry_id: str) -> tuple[str, str, str]:
    """The stop, target and OCO ids of an entry: derived, so a restart finds the same ones."""
    check_order_id(entry_id)
    if len(entry_id) > 60:
        raise UserError("an entry id may have at most 60 characters (its children add '-OCO')", value=entry_id)
    return f"{entry_id}-SL", f"{entry_id}-TP", f"{entry_id}-OCO"


@dataclass(frozen=True)
class BridgeEvent:
    """Something NinjaTrader reported since the previous poll."""

    kind: EventKind
    order_id: str
    state: str = ""
    filled_qty: int = 0
    avg_price: float = 0.0
    new_qty: int = 0
    """FILL: contracts filled since the previous poll."""
    price: float = 0.0
    """FILL: the price of those ``new_qty`` contracts (from the change of the file's cumulative average), not the
    average of the whole order."""
    message: str = ""

    def error(self) -> UserError:
        """This event as a UserError (REJECTED, NO_ACK); raise it where a refusal must stop the run."""
        return UserError(self.message or f"order {self.order_id}: {self.kind}", value=self.order_id,
                         fix="read NinjaTrader's Control Center > Log tab: the ATI files do not carry the reason")



@dataclass
class _Tracked:
    sent_at: float
    last: OrderState | None = None
    acked: bool = False
    no_ack_reported: bool = False


@dataclass
class NinjaTraderBridge(OutgoingReader):
    """Places, changes, cancels and reads orders of one account and instrument through NinjaTrader's ATI files.

    ``nt_dir`` is NinjaTrader's user folder (``Documents\\NinjaTrader 8`` on Windows), holding
    ``incoming/`` and ``outgoing/``. ``ack_timeout_s``: an order with no state file after
    this long is reported once as NO_ACK (a line NinjaTrader could not parse leaves no
    file, only a log line), and its order file, if still unread in ``incoming/``, is
    withdrawn (deleted: WITHDRAWN), so that a NinjaTrader that comes back does not act on a
    stale decision. ``connection``: the connection's name in NinjaTrader's Connection
    Manager, whose state file ``<connection>.txt`` :meth:`connection_state` reads (None:
    not read). ``flatten_if_unprotected``: a stop that NinjaTrader rejects
    or cancels while its entry holds a position makes the bridge close the position.
    """

    nt_dir: Path
    account: str
    instrument: str
    tif: Literal["DAY", "GTC"] = "GTC"
    ack_timeout_s: float = 60.0
    read_retries: int = 2
    retry_delay_s: float = 0.05
    flatten_if_unprotected: bool = True
    connection: str | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    incoming: Path = field(init=False)
    outgoing: Path = field(init=False)
    _tracked: dict[str, _Tracked] = field(init=False, default_factory=dict)
    _brackets: dict[str, Bracket] = field(init=False, default_factory=dict)
    _handled: set[str] = field(init=False, default_factory=set)
    _position: BrokerPosition | None = field(init=False, default=None)
    _position_seen: bool = field(init=False, default=False)
    _unreported: list[BridgeEvent] = field(init=False, default_factory=list)
    _seq: itertools.count[int] = field(init=False)

    def __post_init__(self) -> None:
        self.nt_dir = Path(self.nt_dir)
        self.incoming = self.nt_dir / "incoming"
        self.outgoing = self.nt_dir / "outgoing"
        if not self.account or not self.instrument:
            raise UserError("the NinjaTrader bridge needs an account and an instrument",
                            value=(self.account, self.instrument),
                            fix="pass the account as NinjaTrader names it (e.g. Sim101) and the instrument "
                                "(e.g. 'NQ 12-26')")
        self._check_folders()
        self._remove_stale_temp_files()
        self._seq = itertools.count(time.time_ns() // 1000)

    # --- set-up ---------------------------------------------------------------------------------------------

    def _check_folders(self) -> None:
        enable = ("enable the ATI in NinjaTrader 8 (Tools > Options > Automated trading interface > "
                  "AT Interface); its user folder is Documents\\NinjaTrader 8")
        if not self.nt_dir.is_dir():
            raise UserError("NinjaTrader user folder not found", file=str(self.nt_dir),
                            fix=f"pass the folder that holds incoming\\ and outgoing\\; {enable}")
        for folder in (self.incoming, self.outgoing):
            if not folder.is_dir():
                raise UserError(f"NinjaTrader's {folder.name}\\ folder not found", file=str(folder),
                                fix=f"check that {self.nt_dir} is NinjaTrader's user folder; {enable}")
        probe = self.incoming / f"{TEMP_PREFIX}probe-{os.getpid()}{TEMP_SUFFIX}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise UserError(f"cannot write order files into NinjaTrader's incoming\\ folder: "
                            f"{err.strerror or err}", file=str(self.incoming),
                            fix="give this program write access to that folder (Windows: folder Properties > "
                                "Security; Linux/WSL: chmod u+w), or run it as the user NinjaTrader runs as") \
                from err

    def _remove_stale_temp_files(self) -> None:
        """A temp file left by a crash mid-write never reached NinjaTrader: remove it (it was never sent)."""
        for path in self.incoming.glob(f"{TEMP_PREFIX}*{TEMP_SUFFIX}"):
            path.unlink(missing_ok=True)

    # --- writing --------------------------------------------------------------------------------------------

    def _send(self, tag: str, lines: list[str]) -> Path:
        """One OIF, written atomically under a new unique ``oif<n>_<tag>.txt`` name."""
        while True:
            name = f"oif{next(self._seq)}_{tag}.txt"
            if not (self.incoming / name).exists():
                break
        assert is_oif_name(name)
        if not self.incoming.is_dir():
            raise UserError("NinjaTrader's incoming\\ folder disappeared", file=str(self.incoming),
                            fix="check that NinjaTrader's user folder is still mounted")
        return write_atomic(self.incoming, name, "".join(line + "\n" for line in lines))

    def _track(self, *ids: str) -> None:
        now = self.clock()
        for oid in ids:
            self._tracked.setdefault(oid, _Tracked(sent_at=now))

    def enter(self, order_id: str, side: Side, qty: int, stop_price: float, target_price: float) -> Bracket:
        """A MARKET entry with a broker-side OCO bracket (STOPMARKET stop, LIMIT target), in one atomic OIF.

        Idempotent: an id that :meth:`was_sent` finds is not sent again (``Bracket.sent`` is False).
        """
        stop_id, target_id, oco_id = bracket_ids(order_id)
        if side not in ("BUY", "SELL"):
            raise UserError("an entry's side must be BUY or SELL", value=side, fix="pass side='BUY' or side='SELL'")
        below, above = (stop_price, target_price) if side == "BUY" else (target_price, stop_price)
        if not below < above:
            raise UserError(f"a {side} entry needs its stop on the losing side and its target on the winning side",
                            value={"stop": stop_price, "target": target_price},
                            fix="a BUY's stop is below its target, a SELL's stop above it")
        exit_side: Side = "SELL" if side == "BUY" else "BUY"
        lines = [place_line(self.account, self.instrument, order) for order in (
            OifOrder(side, qty, "MARKET", tif=self.tif, order_id=order_id),
            OifOrder(exit_side, qty, "STOPMARKET", stop_price=stop_price, tif=self.tif, oco_id=oco_id,
                     order_id=stop_id),
            OifOrder(exit_side, qty, "LIMIT", limit_price=target_price, tif=self.tif, oco_id=oco_id,
                     order_id=target_id),
        )]
        sent = not self.was_sent(order_id)
        bracket = Bracket(order_id, side, qty, stop_id, target_id, oco_id, sent)
        if sent:
            self._send(order_id, lines)
        self._brackets[order_id] = bracket
        self._track(*bracket.ids)
        return bracket

    def adopt(self, bracket: Bracket, booked: Mapping[str, tuple[int, float]] | None = None) -> None:
        """Watch a bracket sent by an earlier process (from the journal) as if this one had sent it.

        ``booked``: per order id, the contracts and average price the journal already booked from NinjaTrader's
        reports (a part fill before the restart): only what NinjaTrader reports beyond them is a new fill.
        """
        self._brackets[bracket.entry_id] = bracket
        self._track(*bracket.ids)
        for oid, (qty, avg_price) in (booked or {}).items():
            if oid in bracket.ids and qty > 0:
                self._tracked[oid].last = OrderState(oid, "PARTFILLED", int(qty), float(avg_price), self.outgoing)

    def close(self, order_id: str) -> Path:
        """Flatten the position and cancel the entry's bracket: CLOSEPOSITION, then CANCEL of both children.

        CLOSEPOSITION (account and instrument) cancels that instrument's working orders in the
        account and flattens it, as the help guide says; the explicit CANCELs make sure the
        bracket is gone even where a broker keeps it.
        """
        stop_id, target_id, _ = bracket_ids(order_id)
        self._handled.add(f"{order_id}-unprotected")  # its stop is cancelled on purpose now
        lines = [close_position_line(self.account, self.instrument), cancel_line(stop_id), cancel_line(target_id)]
        return self._send(f"{order_id}-close", lines)

    def unread_file(self, tag: str) -> Path | None:
        """An order file this bridge (or an earlier process's) wrote under ``tag`` that NinjaTrader has not read yet."""
        return next((p for p in self._listing(self.incoming) if is_oif_name(p.name) and p.name.endswith(f"_{tag}.txt")),
                    None)

    def unread(self, oif: Path) -> bool:
        """Whether an order file this bridge wrote still waits in incoming/ (NinjaTrader deletes each one it reads)."""
        return oif.parent == self.incoming and oif.exists()

    def close_position(self, tag: str) -> Path:
        """Flatten the account's position in the instrument (CLOSEPOSITION alone, which also cancels its working
        orders): for a position no entry of this run accounts for, or one whose state is unknown."""
        return self._send(f"{check_order_id(tag)}-close", [close_position_line(self.account, self.instrument)])

    def cancel(self, order_id: str) -> Path:
        """Cancel one order; an entry's cancel also cancels its bracket.

        NinjaTrader cancels the rest of an OCO group when one order is cancelled, so cancelling
        ``<id>-SL`` or ``<id>-TP`` removes both (use :meth:`move_stop` to change the stop).
        """
        check_order_id(order_id)
        lines = [cancel_line(order_id)]
        if order_id in self._brackets:
            b = self._brackets[order_id]
            self._handled.add(f"{order_id}-unprotected")  # its stop is cancelled on purpose now
            lines += [cancel_line(b.stop_id), cancel_line(b.target_id)]
        return self._send(f"{order_id}-cancel", lines)

    def move_stop(self, order_id: str, stop_price: float) -> Path:
        """Move an entry's stop (break-even, trailing): CHANGE of ``<id>-SL``'s stop price only."""
        stop_id, _, _ = bracket_ids(order_id)
        return self._send(f"{stop_id}-change", [change_line(stop_id, stop_price=stop_price)])

    def move_target(self, order_id: str, target_price: float) -> Path:
        """Move an entry's target: CHANGE of ``<id>-TP``'s limit price only."""
        _, target_id, _ = bracket_ids(order_id)
        return self._send(f"{target_id}-change", [change_line(target_id, limit_price=target_price)])

    def was_sent(self, order_id: str) -> bool:
        """Whether an order with this id reached NinjaTrader (a state file) or waits for it (an OIF in incoming/)."""
        check_order_id(order_id)
        return self._state_file(order_id) is not None or self._pending_oif(order_id) is not None

    def _pending_oif(self, order_id: str) -> Path | None:
        """An OIF in incoming/ that places ``order_id``: by this bridge's name for it, or by a PLACE line in it."""
        paths = [p for p in self._listing(self.incoming) if is_oif_name(p.name)]
        for path in paths:
            if path.name.endswith(f"_{order_id}.txt"):
                return path
            try:
                text = path.read_text(encoding="ascii", errors="replace")
            except OSError:
                continue  # read and deleted by NinjaTrader meanwhile, or locked by it
            for line in text.splitlines():
                parts = line.strip().split(";")
                if len(parts) > 10 and parts[0].upper() == "PLACE" and parts[10] == order_id:
                    return path
        return None

    def require_ok(self, order_id: str) -> OrderState | None:
        """The order's state; a UserError if NinjaTrader rejected it."""
        state = self.order_state(order_id)
        if state is not None and state.state == "REJECTED":
            raise UserError(f"NinjaTrader rejected order {order_id}", file=str(state.file), value=order_id,
                            fix="read NinjaTrader's Control Center > Log tab for the reason (e.g. no market data, "
                                "a stop on the wrong side of the market, an account or instrument name it does "
                                "not know), fix it, then send a new decision")
        return state

    # --- polling --------------------------------------------------------------------------------------------

    def poll(self) -> list[BridgeEvent]:
        """Fills, rejections, cancellations, missing acknowledgements and position changes since the last poll.

        Also keeps a position protected: an entry that ends with nothing filled has its
        bracket cancelled, one that ends part-filled has its bracket resized to the fill,
        and (``flatten_if_unprotected``) a stop that is rejected or cancelled while its
        entry holds contracts closes the position.
        """
        events, self._unreported = self._unreported, []
        try:
            for oid, tracked in self._tracked.items():
                if tracked.last is not None and tracked.last.is_terminal:
                    continue  # filled, cancelled, rejected or unknown: its file will not change
                state = self.order_state(oid, tracked.last)
                if state is None:
                    if not tracked.acked and not tracked.no_ack_reported \
                            and self.clock() - tracked.sent_at >= self.ack_timeout_s:
                        tracked.no_ack_reported = True
                        events.append(BridgeEvent("NO_ACK", oid, message=self._no_ack_message(oid)))
                        events += self._withdraw(oid)
                    continue
                tracked.acked = True
                events += _changes(oid, tracked.last, state)
                tracked.last = state
            events += self._protect()
            position = self.position()
        except UserError:
            self._unreported = events  # the next poll reports them: a fill is never lost to an unreadable file
            raise
        if position != self._position:
            self._position = position
            events.append(BridgeEvent("POSITION", self.instrument, position.side, position.qty, position.avg_price))
        return events

    def _withdraw(self, oid: str) -> list[BridgeEvent]:
        """Delete ``oid``'s order file if NinjaTrader has still not read it (stale: it must not act on it later)."""
        pending = self._pending_oif(oid)
        if pending is None:
            return []
        try:
            pending.unlink()
        except FileNotFoundError:
            return []  # NinjaTrader took it at this instant: its state file will follow
        except OSError as err:  # locked by NinjaTrader reading it
            return [BridgeEvent("WITHDRAWN", oid, state="FAILED", message=(
                f"order {oid}: could not withdraw {pending} ({err.strerror or err}): NinjaTrader may still act on it"))]
        withdrawn = [i for i in self._tracked if i == oid or i.startswith(f"{oid}-")] if oid in self._brackets \
            else [oid]
        for i in withdrawn:  # the file's other orders (a bracket's stop and target) went with it
            self._tracked[i].no_ack_reported = True
            self._tracked[i].last = OrderState(i, "WITHDRAWN", 0, 0.0, pending)
        return [BridgeEvent("WITHDRAWN", i, state="WITHDRAWN", message=(
            f"order {i}: its file {pending.name} was still unread in incoming/ after {self.ack_timeout_s:g}s "
            "(NinjaTrader is not reading it: is it running, with the AT Interface enabled?): withdrawn"))
            for i in withdrawn]

    def _no_ack_message(self, oid: str) -> str:
        pending = self._pending_oif(oid)
        if pending is not None:
            return (f"order {oid}: {pending} still waits in incoming/ after {self.ack_timeout_s:g}s: NinjaTrader "
                    "is not reading it (is it running, with the AT Interface enabled?)")
        return (f"order {oid}: NinjaTrader read the OIF but wrote no state file in {self.outgoing} after "
                f"{self.ack_timeout_s:g}s: it refuses a line it cannot parse with only a line in its Log tab")

    def wait_state(self, order_id: str, timeout_s: float = 10.0, interval_s: float = 0.1) -> OrderState | None:
        """Poll ``order_id``'s state file until NinjaTrader has written a terminal state or ``timeout_s`` passed.

        Returns the last state read (None if none was written); uses the bridge's clock and sleep.
        """
        deadline = self.clock() + timeout_s
        while True:
            state = self.order_state(order_id)
            if (state is not None and state.is_terminal) or self.clock() >= deadline:
                return state
            self.sleep(interval_s)

    def _protect(self) -> list[BridgeEvent]:
        events: list[BridgeEvent] = []
        for entry_id, b in self._brackets.items():
            entry = self._tracked[entry_id].last
            # UNKNOWN: its fill count cannot be trusted (a position may be open): the bracket stays, the link halts
            if entry is not None and entry.is_terminal and entry.state != "UNKNOWN" and entry.filled_qty < b.qty \
                    and entry_id not in self._handled:
                self._handled.add(entry_id)
                if entry.filled_qty == 0:
                    self._send(f"{entry_id}-unbracket", [cancel_line(b.stop_id), cancel_line(b.target_id)])
                else:
                    self._send(f"{entry_id}-resize", [change_line(b.stop_id, qty=entry.filled_qty),
                                                      change_line(b.target_id, qty=entry.filled_qty)])
        if self.flatten_if_unprotected and self._brackets:
            # one account and instrument hold one position: only the latest bracket can be protecting it
            event = self._flatten_if_unprotected(self._brackets[next(reversed(self._brackets))])
            events += [event] if event else []
        return events

    def _flatten_if_unprotected(self, b: Bracket) -> BridgeEvent | None:
        """Close the position when the latest entry filled but its stop was rejected or cancelled (not by us), or
        never acknowledged (NinjaTrader refused its line: no state file after ``ack_timeout_s``).

        Checked again at every poll until the close is sent: a position file that still reads FLAT (it may lag the
        order files) is no proof that the fill left nothing open."""
        entry, stop = self._tracked[b.entry_id].last, self._tracked[b.stop_id]
        key = f"{b.entry_id}-unprotected"
        if stop.last is not None:
            lost = stop.last.state if stop.last.state in ("REJECTED", "CANCELLED") else ""
        else:
            lost = "NOT ACKNOWLEDGED" if stop.no_ack_reported else ""
        if (key in self._handled or not lost or entry is None or entry.filled_qty == 0
                or not self._target_open(b) or self.position().qty == 0):
            return None
        self.close(b.entry_id)  # marks the key handled
        return BridgeEvent("UNPROTECTED", b.stop_id, lost, message=(
            f"stop {b.stop_id} {lost.lower()} while {b.entry_id} holds a position: sent CLOSEPOSITION"))

    def _target_open(self, b: Bracket) -> bool:
        """Whether the target has not filled (a filled target cancels the stop by OCO: that is not a lost stop)."""
        target = self._tracked[b.target_id].last
        return target is None or target.state != "FILLED"


def _changes(oid: str, before: OrderState | None, now: OrderState) -> list[BridgeEvent]:
    events: list[BridgeEvent] = []
    filled_before = before.filled_qty if before else 0
    if now.filled_qty > filled_before:
        new_qty = now.filled_qty - filled_before
        cost_before = before.filled_qty * before.avg_price if before else 0.0
        price = round((now.filled_qty * now.avg_price - cost_before) / new_qty, 9)  # these contracts' own price
        events.append(BridgeEvent("FILL", oid, now.state, now.filled_qty, now.avg_price, new_qty=new_qty,
                                  price=price))
    changed = before is None or before.state != now.state
    if changed and now.state == "UNKNOWN":
        events.append(BridgeEvent("UNKNOWN", oid, now.state, now.filled_qty, now.avg_price, message=(
            f"NinjaTrader reports order {oid} in state UNKNOWN ({now.file}): it will not report on it again")))
    if changed and now.state == "REJECTED":
        events.append(BridgeEvent("REJECTED", oid, now.state, now.filled_qty, now.avg_price,
                                  message=f"NinjaTrader rejected order {oid} ({now.file})"))
    elif changed and now.state == "CANCELLED":
        events.append(BridgeEvent("CANCELLED", oid, now.state, now.filled_qty, now.avg_price))
    return events
