r"""NinjaTrader 8 ATI file protocol: order instruction lines, outgoing files, atomic writes.

What the NinjaTrader 8 help guide (Operations > Automated Trading > Automated Trading
Interface (ATI) > File Interface) says, and this module follows. Pages as found (the /ru/
copy is the English NT8 guide; ninjatraderlite.pro mirrors the NT8 guide's pages):

* Order Instruction Files (OIF) go into ``My Documents\<NinjaTrader Folder>\incoming`` and
  must be named ``oif*.txt``; unique names (``oif1.txt``, ``oif2.txt`` ...) avoid file
  locking problems; a file may stack several instruction lines; the delimiter is ``;``;
  "files are processed the instant they are written to the hard disk".
  https://ninjatrader.com/ru/support/helpGuides/nt8/order_instruction_files_oif.htm,
  https://ninjatrader.com/ru/support/helpGuides/nt8/file_interface.htm
* Every command has 13 fields (the command and 12 parameters, so 12 semicolons)::

      PLACE;<ACCOUNT>;<INSTRUMENT>;<ACTION>;<QTY>;<ORDER TYPE>;[LIMIT PRICE];[STOP PRICE];<TIF>;
            [OCO ID];[ORDER ID];[STRATEGY];[STRATEGY ID]          (one line)
      CHANGE;;;;<QUANTITY>;;<LIMIT PRICE>;<STOP PRICE>;;;<ORDER ID>;;[STRATEGY ID]
      CANCEL;;;;;;;;;;<ORDER ID>;;[STRATEGY ID]
      CLOSEPOSITION;<ACCOUNT>;<INSTRUMENT>;;;;;;;;;;
      CANCELALLORDERS;;;;;;;;;;;;
      FLATTENEVERYTHING;;;;;;;;;;;;

  ACTION is BUY or SELL, TIF DAY or GTC, prices use a decimal point (1212.25, not
  1212,25); CHANGE takes 0 for a price or quantity it leaves alone; CLOSEPOSITION "will
  cancel any working orders and flatten the position"; CANCELALLORDERS cancels "all active
  orders across all accounts and broker connections".
  https://ninjatraderlite.pro/support/helpguides/nt8/commands_and_valid_parameters.html
  (the valid-value table read was NinjaTrader 7's, which lists order types MARKET, LIMIT,
  STOP, STOPLIMIT: https://ninjatrader.com/support/helpGuides/nt7/commands_and_valid_parameters.htm)
* NinjaTrader writes to ``My Documents\<NinjaTrader Folder>\outgoing``, whose contents
  "will be deleted when the NinjaTrader application is restarted": an order state file
  for every order placed with an ORDER ID, named ``orderId.txt``, holding
  ``Order State;Filled Amount;Average FillPrice``, and a position file named
  ``Instrument Name + Instrument Exchange_AccountName_Position.txt`` (example
  ``ES 0914 Globex_Sim101_Position.txt``) holding ``Market Position; Quantity; Average
  Entry Price`` with LONG, SHORT or FLAT; and a connection state file, written with each
  change of connection state, named ``ConnectionName.txt`` (the connection's name in the
  Connection Manager) holding ``CONNECTED`` or ``DISCONNECTED``.
  https://ninjatraderlite.pro/support/helpguides/nt8/information_update_files.html
* Order states: Initialized, Submitted, Accepted, Working, Suspended, Change submitted,
  Cancel pending, Cancelled, Rejected, Partially filled, Filled, Trigger pending.
  https://ninjatraderlite.pro/support/helpguides/nt8/order_state_definitions.html

Not in the help guide; from a published NinjaTrader 8 field test (a verification log in a
public trading-bot repository; see docs/NINJATRADER.md), so read tolerantly here: order
state files were named ``<Account>_<ORDER ID>.txt``; states were written upper case
without spaces (``SUBMITTED;0;0``, ``CANCELPENDING;0;0``, ``REJECTED;0;0``); NinjaTrader 8
refused order type ``STOP`` ("holds invalid order type parameter 'STOP'") and took
``STOPMARKET`` (so do CrossTrade's ATI docs: MARKET, LIMIT, STOPMARKET, STOPLIMIT); a line
with the wrong number of fields ("invalid # of parameters, should be 13") or a bad order
type produced no outgoing file, only a log line; a file not named ``oif*.txt`` was logged
as "Unknown OIF file type"; ``CANCELALLORDERS`` cancelled orders in every connected
account. Position files were also seen as ``..._position.txt`` with other spellings of
the contract (``MNQ SEP26``, ``MNQM6``). This module reads both order state names, any
case of the states and of ``_Position.txt`` and those spellings, writes ``STOPMARKET``,
and never sends CANCELALLORDERS or FLATTENEVERYTHING.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hybrid_trader.errors import UserError, os_error

FIELDS = 13
"""Fields of every OIF line: the command and 12 parameters."""
OIF_PATTERN = "oif*.txt"
"""The names NinjaTrader picks up in incoming/ (the help guide's ``oif*.txt``)."""
TEMP_PREFIX = ".pending-"
TEMP_SUFFIX = ".tmp"
"""A file being written is named ``.pending-<hex>.tmp``: never ``oif*.txt``, so never read half-written."""

Side = Literal["BUY", "SELL"]
OrderType = Literal["MARKET", "LIMIT", "STOPMARKET", "STOPLIMIT"]
ORDER_TYPES = ("MARKET", "LIMIT", "STOPMARKET", "STOPLIMIT")
TIFS = ("DAY", "GTC")

ORDER_STATES = frozenset({
    "INITIALIZED", "SUBMITTED", "ACCEPTED", "WORKING", "TRIGGERPENDING", "CHANGEPENDING", "CHANGESUBMITTED",
    "CANCELPENDING", "CANCELSUBMITTED", "CANCELLED", "SUSPENDED", "REJECTED", "PARTFILLED", "FILLED", "UNKNOWN",
})
"""NinjaTrader 8 order states, upper case without spaces (as its outgoing files spell them)."""
TERMINAL_STATES = frozenset({"FILLED", "CANCELLED", "REJECTED", "UNKNOWN"})
"""States an order does not leave: UNKNOWN too (NinjaTrader no longer knows the order: nothing more will come of it,
and its position is read from the position file)."""
_STATE_ALIASES = {"PARTIALLYFILLED": "PARTFILLED", "CANCELED": "CANCELLED"}
MARKET_POSITIONS = ("LONG", "SHORT", "FLAT")

ORDER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
"""A safe order id: letters, digits and '-', at most 64 characters (no '_': outgoing names use it)."""


def check_order_id(order_id: str) -> str:
    """``order_id`` if it is safe as a file name and as an OIF field, else a UserError."""
    if not isinstance(order_id, str) or not ORDER_ID.fullmatch(order_id):
        raise UserError("not a usable NinjaTrader order id: it names files in incoming/ and outgoing/",
                        value=order_id,
                        fix="use 1 to 64 letters, digits and '-', starting with a letter or digit "
                            "(ninjatrader.order_id() builds one)")
    return order_id


def _price(value: float, what: str) -> str:
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{what} must be a positive number", value=value, fix=f"pass the {what} in index points")
    text = f"{value:.8f}".rstrip("0").rstrip(".")
    return text


def _line(*fields: str) -> str:
    padded = list(fields) + [""] * (FIELDS - len(fields))
    assert len(padded) == FIELDS, fields
    for value in padded:
        if ";" in value or "\n" in value or "\r" in value:
            raise UserError("an OIF field may not hold ';' or a line break", value=value,
                            fix="remove it from the account, instrument or id")
    return ";".join(padded)


@dataclass(frozen=True)
class OifOrder:
    """One order as a PLACE line carries it (the fields after the account and the instrument)."""

    action: Side
    """BUY or SELL."""
    qty: int
    """Contracts, at least 1."""
    order_type: OrderType
    """MARKET, LIMIT, STOPMARKET or STOPLIMIT."""
    limit_price: float | None = None
    """A LIMIT or STOPLIMIT order's limit, in index points."""
    stop_price: float | None = None
    """A STOPMARKET or STOPLIMIT order's stop, in index points."""
    tif: str = "GTC"
    """Time in force: DAY or GTC."""
    oco_id: str = ""
    """Orders sharing it cancel each other (a bracket's stop and target); '': none."""
    order_id: str = ""
    """The ORDER ID NinjaTrader names its state file after; '': none."""


def place_line(account: str, instrument: str, order: OifOrder) -> str:
    """One PLACE line of ``order`` in ``account`` and ``instrument``. Prices an order type does not use are written
    as 0."""
    action, qty, order_type, tif = order.action, order.qty, order.order_type, order.tif
    limit_price, stop_price = order.limit_price, order.stop_price
    if action not in ("BUY", "SELL"):
        raise UserError("an order's action must be BUY or SELL", value=action, fix="pass side='BUY' or side='SELL'")
    if order_type not in ORDER_TYPES:
        raise UserError("unknown NinjaTrader 8 order type", value=order_type,
                        fix=f"use one of {', '.join(ORDER_TYPES)}")
    if tif not in TIFS:
        raise UserError("unknown time in force", value=tif, fix="use DAY or GTC")
    if isinstance(qty, bool) or not isinstance(qty, int) or qty < 1:
        raise UserError("an order's quantity must be a whole number of contracts, at least 1", value=qty)
    limit = _price(limit_price, "limit price") if order_type in ("LIMIT", "STOPLIMIT") and limit_price else "0"
    stop = _price(stop_price, "stop price") if order_type in ("STOPMARKET", "STOPLIMIT") and stop_price else "0"
    if order_type in ("LIMIT", "STOPLIMIT") and limit == "0":
        raise UserError(f"a {order_type} order needs a limit price", value=limit_price)
    if order_type in ("STOPMARKET", "STOPLIMIT") and stop == "0":
        raise UserError(f"a {order_type} order needs a stop price", value=stop_price)
    return _line("PLACE", account, instrument, action, str(qty), order_type, limit, stop, tif, order.oco_id,
                 order.order_id)


def change_line(order_id: str, *, qty: int = 0, limit_price: float = 0.0, stop_price: float = 0.0) -> str:
    """One CHANGE line; 0 leaves a value as it is (as the help guide says)."""
    limit = _price(limit_price, "limit price") if limit_price else "0"
    stop = _price(stop_price, "stop price") if stop_price else "0"
    return _line("CHANGE", "", "", "", str(int(qty)), "", limit, stop, "", "", order_id)


def cancel_line(order_id: str) -> str:
    return _line("CANCEL", "", "", "", "", "", "", "", "", "", order_id)


def close_position_line(account: str, instrument: str) -> str:
    return _line("CLOSEPOSITION", account, instrument)


# --- outgoing/ -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OrderState:
    """One order's state file: ``STATE;FILLED QTY;AVG FILL PRICE``."""

    order_id: str
    state: str
    filled_qty: int
    avg_price: float
    file: Path

    @property
    def is_terminal(self) -> bool:
        """Filled, cancelled or rejected: it will not change again."""
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class BrokerPosition:
    """The account's position in the instrument: ``LONG|SHORT|FLAT;QTY;AVG PRICE``."""

    side: Literal["LONG", "SHORT", "FLAT"]
    qty: int
    avg_price: float
    file: Path | None = None
    """The position file it was read from; None when NinjaTrader has written none (flat)."""

    @property
    def known(self) -> bool:
        """False when no position file exists: NinjaTrader empties outgoing/ when it restarts, so after a
        restart "flat" may only mean it has not written the file yet (check NinjaTrader's Positions tab)."""
        return self.file is not None

    @property
    def signed_qty(self) -> int:
        return self.qty if self.side == "LONG" else -self.qty if self.side == "SHORT" else 0


FLAT = BrokerPosition("FLAT", 0, 0.0)


def _fields(path: Path, text: str, what: str, layout: str) -> tuple[int, list[str]]:
    """The last non-empty line of ``text`` split on ';' (three fields), with its 1-based line number."""
    lines = [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise UserError(f"empty {what} file", file=str(path), fix=f"NinjaTrader writes one line {layout}")
    number, line = lines[-1]
    parts = [p.strip() for p in line.split(";")]
    if len(parts) != 3:
        raise UserError(f"line {number}: a {what} line has {len(parts)} fields, not 3", file=str(path), value=line,
                        fix=f"the line must read {layout}")
    return number, parts


def _number(path: Path, number: int, column: str, value: str, kind: type, layout: str) -> float:
    try:
        result = kind(value)
    except ValueError:
        result = None
    if result is None or (kind is float and not math.isfinite(result)) or result < 0:
        raise UserError(f"line {number}: not a valid {column}", file=str(path), column=column, value=value,
                        fix=f"the line must read {layout}, numbers with a decimal point")
    return result


def parse_order_state(path: Path, text: str, order_id: str) -> OrderState:
    """An order state file's content, or a UserError naming the file, the line and the value."""
    layout = "STATE;FILLED QTY;AVERAGE FILL PRICE (e.g. FILLED;1;21000.25)"
    number, (state, filled, avg) = _fields(path, text, "order state", layout)
    word = re.sub(r"[\s_]", "", state).upper()
    word = _STATE_ALIASES.get(word, word)
    if word not in ORDER_STATES:
        raise UserError(f"line {number}: unknown order state", file=str(path), column="state", value=state,
                        fix=f"NinjaTrader 8 writes one of {', '.join(sorted(ORDER_STATES))}")
    return OrderState(order_id, word, int(_number(path, number, "filled quantity", filled, int, layout)),
                      float(_number(path, number, "average fill price", avg, float, layout)), path)


def parse_position(path: Path, text: str) -> BrokerPosition:
    """A position file's content, or a UserError naming the file, the line and the value."""
    layout = "LONG|SHORT|FLAT;QUANTITY;AVERAGE ENTRY PRICE (e.g. LONG;1;21000.25)"
    number, (side, qty, avg) = _fields(path, text, "position", layout)
    if side.upper() not in MARKET_POSITIONS:
        raise UserError(f"line {number}: unknown market position", file=str(path), column="market position",
                        value=side, fix="NinjaTrader 8 writes LONG, SHORT or FLAT")
    upper = side.upper()
    return BrokerPosition(upper, int(_number(path, number, "quantity", qty, int, layout)),  # type: ignore[arg-type]
                          float(_number(path, number, "average entry price", avg, float, layout)), path)


_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_MONTH_CODES = "FGHJKMNQUVXZ"


def instrument_aliases(instrument: str) -> set[str]:
    """Spellings NinjaTrader may give a contract in file names: ``NQ 12-26``, ``NQ 1226``, ``NQ DEC26``, ``NQZ6``."""
    name = instrument.strip().upper()
    match = re.fullmatch(r"(\S+) (\d{2})-(\d{2})", name)
    if not match:
        return {name}
    root, month, year = match.group(1), int(match.group(2)), match.group(3)
    if not 1 <= month <= 12:
        return {name}
    code = _MONTH_CODES[month - 1]
    return {name, f"{root} {month:02d}{year}", f"{root} {_MONTHS[month - 1]}{year}", f"{root}{code}{year[-1]}",
            f"{root}{code}{year}"}


def position_file_matches(name: str, account: str, instrument: str) -> bool:
    """Whether ``name`` is the position file of ``instrument`` (any spelling, any exchange) in ``account``."""
    suffix = f"_{account}_position.txt".upper()
    upper = name.upper()
    if not upper.endswith(suffix):
        return False
    head = upper[: -len(suffix)]
    # the exact account: another account whose name ends with this one's (``PA_Sim101`` and ``Sim101``) leaves a
    # '_' in the head, which an exchange name (``Globex``) never holds
    return any(head == alias or (head.startswith(alias + " ") and "_" not in head[len(alias):])
               for alias in instrument_aliases(instrument))


CONNECTION_STATES = ("CONNECTED", "DISCONNECTED")


def parse_connection(path: Path, text: str) -> str:
    """A connection state file's content (``CONNECTED`` or ``DISCONNECTED``), or a UserError naming the file."""
    lines = [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines or lines[-1][1].upper() not in CONNECTION_STATES:
        number, value = lines[-1] if lines else (1, "")
        raise UserError(f"line {number}: not a connection state", file=str(path), column="connection state",
                        value=value, fix="NinjaTrader 8 writes CONNECTED or DISCONNECTED")
    return lines[-1][1].upper()


def order_state_names(order_id: str, account: str) -> tuple[str, str]:
    """The documented ``<id>.txt`` and the field-observed ``<account>_<id>.txt``."""
    return f"{order_id}.txt", f"{account}_{order_id}.txt"


# --- incoming/ -------------------------------------------------------------------------------------------------


def is_oif_name(name: str) -> bool:
    """Whether NinjaTrader would take a file of this name as an order instruction file."""
    return fnmatch.fnmatch(name.lower(), OIF_PATTERN)


def write_atomic(folder: Path, name: str, text: str) -> Path:
    """Write ``text`` to ``folder/name`` so that no reader ever sees it half-written.

    The bytes go to ``.pending-<hex>.tmp`` in the same folder (a name NinjaTrader does not
    take as an OIF), are flushed and fsynced, then the file is renamed with ``os.replace``,
    which is atomic within one file system.
    """
    assert is_oif_name(name), name
    temp = folder / f"{TEMP_PREFIX}{uuid.uuid4().hex}{TEMP_SUFFIX}"
    assert not is_oif_name(temp.name)
    final = folder / name
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
        try:
            data = text.encode("ascii")
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, final)
    except OSError as err:
        temp.unlink(missing_ok=True)
        raise os_error(err) from err
    except UnicodeEncodeError as err:
        temp.unlink(missing_ok=True)
        raise UserError("an OIF must be plain ASCII", value=text, fix="use ASCII account and instrument names") from err
    _fsync_dir(folder)
    return final


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable where the OS allows it (POSIX); Windows has no directory fsync."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
