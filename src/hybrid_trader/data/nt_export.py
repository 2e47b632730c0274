"""NinjaTrader 8's bar text format, and which end of the bar a timestamp marks.

NinjaTrader 8 exports minute bars (Tools > Historical Data > Export) and imports them as
header-less lines ``yyyyMMdd HHmmss;open;high;low;close;volume``, one per bar, e.g.
``20240102 143100;16825.25;16827.00;16824.50;16826.75;412``. Its exports are always
written in UTC, and a NinjaTrader bar is stamped with its **end** (the 14:30 minute bar
reads 14:31:00). The project's bars are stamped with their **start**, so an end-stamped
file is moved back by one bar length when it is read (``--stamps end``): otherwise every
bar would be one bar late. ``integrations/ninjatrader/BarExporter.cs`` writes the same
lines live. See docs/DATA.md and docs/NINJATRADER.md.
"""

from __future__ import annotations

import re

from hybrid_trader.errors import UserError

NT_SEP = ";"
NT_NAMES = ["timestamp", "open", "high", "low", "close", "volume"]
"""The columns of NinjaTrader's minute-bar lines, in order (the file has no header)."""
NT_TZ = "UTC"
"""NinjaTrader writes its exports in UTC (its help guide, 'Importing': exports are always done in UTC)."""
NT_EXAMPLE = "20240102 143100;16825.25;16827.00;16824.50;16826.75;412"

STAMPS = ("start", "end")
"""``start``: a timestamp marks the bar's start (our CSV); ``end``: its end (NinjaTrader)."""

_STAMP = re.compile(r"\d{8}(?: \d{4,6}(?: \d{1,7})?)?")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def is_nt_export(first_line: str, file: str) -> bool:
    """True when ``first_line`` is a NinjaTrader minute bar (no header, ``;``-separated).

    A header-less ``;`` line that starts with a NinjaTrader stamp but is not a minute bar
    (a tick or a daily export) is a UserError naming what it is and what to export instead.
    """
    fields = [f.strip() for f in first_line.strip().split(NT_SEP)]
    if len(fields) < 2 or not _STAMP.fullmatch(fields[0]):
        return False
    if not all(_NUMBER.fullmatch(f) for f in fields[1:]):
        if all(_NUMBER.fullmatch(f.replace(",", ".", 1)) for f in fields[1:]):
            raise UserError(f"a NinjaTrader export with comma decimals (a Windows locale): {first_line.strip()!r}",
                            file=file, row=1, fix="export again with '.' as the decimal symbol (Windows: Region > "
                            "Additional settings), or write the bars with integrations/ninjatrader/BarExporter.cs, "
                            "which always writes '.'")
        return False
    if len(fields) == len(NT_NAMES) and " " in fields[0] and len(fields[0].split(" ")) == 2:
        return True
    kind = ("tick data (yyyyMMdd HHmmss fffffff;last;bid;ask;volume)" if len(fields[0].split(" ")) == 3
            or len(fields) in (3, 5) else "daily bars (yyyyMMdd;open;high;low;close;volume)"
            if " " not in fields[0] else f"{len(fields)} fields")
    raise UserError(
        f"a NinjaTrader text file of {kind}, not of minute bars: {first_line.strip()!r}", file=file, row=1,
        fix=f"export Minute bars (Tools > Historical Data > Export, 1 minute): lines like {NT_EXAMPLE}")


def resolve_stamps(stamps: str | None, nt_export: bool) -> str:
    """``stamps`` checked, or the format's default when None: ``end`` for NinjaTrader's lines, else ``start``."""
    if stamps is None:
        return "end" if nt_export else "start"
    value = str(stamps).strip().lower()
    if value not in STAMPS:
        raise UserError(f"--stamps '{stamps}' is neither start nor end", value=stamps,
                        fix="--stamps start (a timestamp is the bar's start, our CSV) or --stamps end "
                            "(its end, NinjaTrader)")
    return value


def stamp_shift_ns(stamps: str, bar_minutes: int) -> int:
    """Nanoseconds to ADD to a timestamp to make it the bar's start: minus one bar for end stamps."""
    return -int(bar_minutes) * 60_000_000_000 if stamps == "end" else 0


__all__ = ["NT_EXAMPLE", "NT_NAMES", "NT_SEP", "NT_TZ", "STAMPS", "is_nt_export", "resolve_stamps",
           "stamp_shift_ns"]
