"""What a set of bars holds, as a dict (:func:`summarize`) and as text (:func:`format_summary`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hybrid_trader.calendar import (
    CME_CALENDAR,
    MINUTES_PER_DAY,
    SESSION_CLOSE_MINUTE,
    SESSION_OPEN_MINUTE,
    early_closes,
    fmt_minute,
    session_minute,
)
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.checks import PRICES
from hybrid_trader.data.clock import detect_rth_open, rth_open_by_period
from hybrid_trader.data.validate import off_grid_mask
from hybrid_trader.errors import UserError
from hybrid_trader.markets import get_contract

ROW_NOTES_PRINTED = 10
"""Row-by-row repair notes printed per kind (``--json`` has them all)."""


def _ts(t: Any) -> str:
    return t.strftime("%Y-%m-%d %H:%M %Z")


def gap_stats(bars: Bars) -> dict[str, Any]:
    """Missing bars inside sessions: count of gaps, missing bars, the largest gap.

    Gaps between sessions (the daily break, weekends, holidays) are not counted.
    """
    n = len(bars)
    out: dict[str, Any] = {
        "count": 0,
        "missing_bars": 0,
        "largest_minutes": 0,
        "largest_after": None,
        "largest_before": None,
    }
    if n < 2:
        return out
    ns = bars.frame.index.as_unit("ns").asi8
    d_min = np.diff(ns) / 60e9
    sid = bars.session_id
    bm = max(1, int(bars.bar_minutes))
    gap = (sid[1:] == sid[:-1]) & (d_min > bm + 1e-9)
    if not gap.any():
        return out
    missing = np.maximum(np.round(d_min[gap] / bm).astype(np.int64) - 1, 1)
    k = int(np.flatnonzero(gap)[np.argmax(d_min[gap])])
    idx = bars.frame.index
    out.update(
        count=int(gap.sum()),
        missing_bars=int(missing.sum()),
        largest_minutes=float(d_min[k]) if d_min[k] % 1 else int(d_min[k]),
        largest_after=_ts(idx[k]),
        largest_before=_ts(idx[k + 1]),
    )
    return out


def short_days(bars: Bars, calendar: str = CME_CALENDAR) -> dict[str, Any]:
    """Sessions whose bars end earlier than the file's usual session end (by more than a bar), the first and last
    session of the file aside (a file starts and stops mid-session): those the exchange ``calendar`` lists as early
    closes, known in advance, and the rest, which a trading window meets as bars that stop without warning.

    Keys: ``usual_end`` (ET, the most common session end), ``early_closes`` and ``unexplained`` (``[date, end]``
    pairs, ends in ET)."""
    out: dict[str, Any] = {"usual_end": None, "early_closes": [], "unexplained": []}
    bounds = bars.session_bounds
    if len(bounds) < 3:
        return out
    bm = max(1, int(bars.bar_minutes))
    ends = session_minute(bars.minute_of_day[bounds[:, 1]].astype(np.int64)) + bm  # session minutes
    values, counts = np.unique(ends[1:-1], return_counts=True)
    usual = int(values[counts == counts.max()].max())  # the most common end (the latest of ties)
    out["usual_end"] = fmt_minute((usual + SESSION_OPEN_MINUTE) % MINUTES_PER_DAY)
    known = early_closes(calendar)
    dates = bars.session_dates
    for s in np.flatnonzero(ends[1:-1] < usual - bm) + 1:
        end = fmt_minute(int(ends[s] + SESSION_OPEN_MINUTE) % MINUTES_PER_DAY)
        out["early_closes" if dates[s] in known else "unexplained"].append([str(dates[s]), end])
    return out


def summarize(bars: Bars) -> dict[str, Any]:
    """Rows, period, bar size, sessions, RTH open, gaps, repairs, tick grid and notes of ``bars``.

    Keys: ``source, market, rows, first, last, bar_minutes, sessions, first_session,
    last_session, rth_open, rth_open_score, rth_open_by_period, gaps, short_days, break_bars,
    repairs, dropped_rows, repaired_rows, tick_grid, warnings, notes``.
    Timestamps are US/Eastern strings (``"2023-11-19 18:00 EST"``).
    """
    idx = bars.frame.index
    n = len(bars)
    try:
        contract = get_contract(bars.market)
        tick = contract.tick_size
    except UserError:
        contract, tick = None, None
    rth, score = detect_rth_open(idx, bars.volume, bars.bar_minutes) if n else (None, float("nan"))
    minute = bars.minute_of_day
    repairs = [r.as_dict() for r in bars.repairs]
    grid: dict[str, Any] = {"tick_size": tick, "off_grid_prices": None, "off_grid_fraction": None}
    if tick and n:
        off = off_grid_mask(bars.frame[list(PRICES)].to_numpy(np.float64), tick)
        grid.update(off_grid_prices=int(off.sum()), off_grid_fraction=round(float(off.mean()), 4))
    dates = bars.session_dates
    return {
        "source": bars.source,
        "market": bars.market,
        "rows": n,
        "first": _ts(idx[0]) if n else None,
        "last": _ts(idx[-1]) if n else None,
        "bar_minutes": int(bars.bar_minutes),
        "sessions": bars.n_sessions,
        "first_session": str(dates[0]) if n else None,
        "last_session": str(dates[-1]) if n else None,
        "rth_open": fmt_minute(rth),
        "rth_open_score": None if not np.isfinite(score) else round(score, 2),
        "rth_open_by_period": rth_open_by_period(idx, bars.volume, bars.bar_minutes) if n else {},
        "gaps": gap_stats(bars),
        "short_days": short_days(bars),
        "break_bars": int(((minute >= SESSION_CLOSE_MINUTE) & (minute < SESSION_OPEN_MINUTE)).sum()),
        "repairs": repairs,
        "dropped_rows": sum(r["rows"] for r in repairs if r["action"] == "dropped"),
        "repaired_rows": sum(r["rows"] for r in repairs if r["action"] == "repaired"),
        "tick_grid": grid,
        "warnings": [line for w in bars.warnings for line in w.lines()],
        "notes": list(bars.notes),
    }


def format_summary(s: dict[str, Any]) -> str:
    """The summary as aligned text for a terminal."""
    lines = [f"bars: {s['source']}"]

    def row(label: str, value: str) -> None:
        lines.append(f"  {label:<14}{value}")

    try:
        c = get_contract(s["market"])
        row("market", f"{c.symbol} ({c.name}, tick {c.tick_size:g})")
    except UserError:
        row("market", str(s["market"]))
    row("rows", f"{s['rows']:,}")
    row("period", f"{s['first']} to {s['last']} (America/New_York)")
    row("bar size", f"{s['bar_minutes']} min")
    row(
        "sessions",
        f"{s['sessions']} Globex trading day{'s' if s['sessions'] != 1 else ''} "
        f"({s['first_session']} to {s['last_session']})",
    )
    rth = s["rth_open"]
    by = s["rth_open_by_period"]
    by_txt = f" [{', '.join(f'{k} {v}' for k, v in by.items())}]" if len(by) > 1 else ""
    row("RTH open", (f"{rth} ET (volume surge, score {s['rth_open_score']})" if rth else "not detected") + by_txt)
    g = s["gaps"]
    if g["count"]:
        row(
            "gaps",
            f"{g['count']} inside sessions, {g['missing_bars']} missing bar{'s' if g['missing_bars'] != 1 else ''}; "
            f"largest {g['largest_minutes']} min ({g['largest_after']} -> {g['largest_before']})",
        )
    else:
        row("gaps", "none inside sessions")
    short = s["short_days"]
    if short["early_closes"] or short["unexplained"]:
        def days(pairs: list) -> str:
            return ", ".join(f"{d} {e}" for d, e in pairs[:ROW_NOTES_PRINTED]) + (" ..." if len(pairs) >
                                                                                ROW_NOTES_PRINTED else "")
        said = [f"{len(short['early_closes'])} early close(s) of the CME calendar ({days(short['early_closes'])})"] \
            if short["early_closes"] else []
        if short["unexplained"]:
            said.append(f"{len(short['unexplained'])} it does not list ({days(short['unexplained'])}): traded to "
                        "their last bar, not known in advance as the last")
        row("short days", f"ending before the usual {short['usual_end']} ET: " + "; ".join(said))
    if s["break_bars"]:
        row("break bars", f"{s['break_bars']} bars stamped in the 17:00-18:00 ET daily break")
    if s["repairs"]:
        for action, total in (("dropped", s["dropped_rows"]), ("repaired", s["repaired_rows"])):
            kinds = [f"{r['kind']} {r['rows']}" for r in s["repairs"] if r["action"] == action]
            if kinds:
                row(action, f"{total} row{'s' if total != 1 else ''} ({', '.join(kinds)})")
    else:
        row("repairs", "none")
    t = s["tick_grid"]
    if t["off_grid_prices"]:
        row(
            "tick grid",
            f"{t['off_grid_prices']} prices ({100 * t['off_grid_fraction']:.1f}%) off the {t['tick_size']:g} grid",
        )
    elif t["tick_size"]:
        row("tick grid", f"all prices on the {t['tick_size']:g} grid")
    if s["notes"]:
        lines.append("  notes:")
        lines += _note_lines(s["notes"])
    return "\n".join(lines)


def _note_lines(notes: list[str]) -> list[str]:
    """The notes, indented; of the row notes (indented) under each note, the first ``ROW_NOTES_PRINTED``."""
    lines: list[str] = []
    shown = 0
    hidden = 0
    for note in notes:
        if note.startswith("  "):
            if shown < ROW_NOTES_PRINTED:
                lines.append(f"    {note}")
                shown += 1
            else:
                hidden += 1
            continue
        if hidden:
            lines.append(f"      ... {hidden} more row notes (see --json)")
            hidden = 0
        shown = 0
        lines.append(f"    {note}")
    if hidden:
        lines.append(f"      ... {hidden} more row notes (see --json)")
    return lines
