"""Timestamps of a bars file: the format picked from a sample, offsets, time zones, the clock shift.

:func:`parse_timestamps` turns the timestamp column(s) into a US/Eastern index, with the
non-existent (DST gap) and out-of-range rows marked for the validation, and notes of what
it found (the chosen format, offsets converted).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.findings import AnyFinding, DataFinding
from hybrid_trader.data.validate import Checker
from hybrid_trader.errors import UserError

_OFFSET_RE = r"(?:[Zz]|[+-]\d{2}:?\d{2})$"
_NAIVE_FORMATS = (
    "ISO8601",
    "%m/%d/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M",
    "%d/%m/%Y %H:%M:%S",
    "%d/%m/%Y %H:%M",
    "%Y%m%d %H%M%S",
    "%Y%m%d %H:%M:%S",
    "%Y%m%d %H:%M",
    "%Y%m%d %H%M",
    "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y %H:%M",
    "%Y.%m.%d %H:%M:%S",
    "%Y.%m.%d %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%Y/%m/%d %H:%M",
    "%m/%d/%Y %I:%M:%S %p",
    "%m/%d/%Y %I:%M %p",
    "%m/%d/%Y",
    "%Y%m%d",
)



_DAY_FIRST = {"%m/%d/%Y %H:%M:%S": "%d/%m/%Y %H:%M:%S", "%m/%d/%Y %H:%M": "%d/%m/%Y %H:%M"}
"""Month-first formats and their day-first twins: both read every date whose day is 12 or less."""


def _largest_step(sample: pd.Series, fmt: str) -> int:
    """The largest gap [ns] between consecutive timestamps of ``sample`` (in file order) read with ``fmt``."""
    ns = pd.DatetimeIndex(pd.to_datetime(sample, format=fmt, errors="coerce")).asi8
    return int(np.abs(np.diff(ns)).max()) if len(ns) > 1 else 0


def _pick_format(s: pd.Series) -> str:
    """The first format that reads every timestamp of an even sample (else the one that reads most). Where both a
    month-first format and its day-first twin read them all (every day 12 or less), the one whose consecutive
    timestamps lie closer together: ``02/01/2025`` after ``01/01/2025`` is a day later, not a month."""
    sample = s.dropna()
    sample = (
        sample.iloc[np.unique(np.linspace(0, len(sample) - 1, min(len(sample), 200)).astype(int))]
        if len(sample)
        else sample
    )
    best, best_ok = "ISO8601", -1
    for fmt in _NAIVE_FORMATS:
        try:
            ok = int(pd.to_datetime(sample, format=fmt, errors="coerce").notna().sum())
        except (ValueError, TypeError):
            continue
        if ok == len(sample):
            twin = _DAY_FIRST.get(fmt)
            if twin is not None and pd.to_datetime(sample, format=twin, errors="coerce").notna().all() \
                    and _largest_step(sample, twin) < _largest_step(sample, fmt):
                return twin
            return fmt
        if ok > best_ok:
            best, best_ok = fmt, ok
    return best


def _to_naive_utc_ns(idx: pd.DatetimeIndex) -> np.ndarray:
    return idx.tz_convert("UTC").tz_localize(None).as_unit("ns").to_numpy()


def _out_of_range(idx: pd.DatetimeIndex) -> np.ndarray:
    naive = idx.tz_localize(None) if idx.tz is not None else idx
    return np.asarray((naive < pd.Timestamp("1900-01-01")) | (naive > pd.Timestamp("2200-01-01")))


_Decoded = tuple[pd.DatetimeIndex | None, pd.DatetimeIndex | None, pd.Series]
"""Aware (UTC offsets, epochs) or naive timestamps (one of the two is None) and the raw values as objects."""


def _decode_timestamps(
    raw: pd.Series, ck: Checker, column: str, lines: np.ndarray, notes: list[AnyFinding]
) -> _Decoded:
    """Timestamps from the column's values, whatever their kind (datetimes, epoch numbers, text)."""
    if raw.dtype == object or isinstance(raw.dtype, pd.StringDtype):
        text = raw.astype("string").str.strip()
        present = text.dropna()
        if len(present) and present.str.fullmatch(r"\d{9,19}(?:\.\d*)?").all():
            raw = pd.to_numeric(text, errors="coerce")  # Unix epoch numbers written as text
    if isinstance(raw.dtype, pd.DatetimeTZDtype):
        return pd.DatetimeIndex(raw), None, raw
    if pd.api.types.is_datetime64_dtype(raw.dtype):
        return None, pd.DatetimeIndex(raw), raw
    if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
        return _decode_numeric(raw, ck, column, notes)
    return _decode_text(raw, ck, lines, notes)


def _decode_numeric(raw: pd.Series, ck: Checker, column: str, notes: list[AnyFinding]) -> _Decoded:
    """YYYYMMDD dates or Unix epoch numbers (unit guessed from the magnitude)."""
    v = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    med = float(np.nanmedian(np.abs(v))) if np.isfinite(v).any() else 0.0
    if 19000101 <= med <= 22000101:
        naive = pd.DatetimeIndex(pd.to_datetime(raw.astype("Int64").astype("string"), format="%Y%m%d", errors="coerce"))
        return None, naive, raw.astype(object)
    unit = "s" if med < 1e11 else "ms" if med < 1e14 else "us" if med < 1e17 else "ns"
    if med < 1e8:
        raise UserError(
            f"the timestamp column holds small numbers (e.g. {v[np.isfinite(v)][0]:g}), not dates or epoch times.",
            file=ck.file,
            column=column,
            fix="write timestamps like 2023-11-19 18:00:00",
        )
    vi = np.where(np.isfinite(v), v, np.nan)
    aware = pd.DatetimeIndex(pd.to_datetime(vi, unit=unit, utc=True, errors="coerce"))
    notes.append(DataFinding("note", "timezone", f"numeric timestamps read as Unix epoch {unit} (UTC)"))
    return aware, None, raw.astype(object)


def _decode_text(raw: pd.Series, ck: Checker, lines: np.ndarray, notes: list[AnyFinding] | None = None) -> _Decoded:
    """Text timestamps: all with a UTC offset (aware) or all without one (naive, format guessed)."""
    s = raw.astype("string").str.strip()
    has_off = s.str.contains(_OFFSET_RE, regex=True, na=False).to_numpy()
    present = s.notna().to_numpy() & (s.str.len() > 0).fillna(False).to_numpy()
    if has_off.any() and not has_off[present].all():
        k = int(np.flatnonzero(present & ~has_off)[0])
        line = int(lines[k])
        raise UserError(
            f"some timestamps carry a UTC offset and others do not (first without one on {ck.where(line)}).",
            file=ck.file,
            row=ck.data_row(line),
            column="timestamp",
            value=str(s.iloc[k]),
            fix="give every timestamp an offset (e.g. 2023-11-20T09:30:00-05:00) or none (and set --tz)",
        )
    if has_off.any():
        parsed = pd.to_datetime(s, utc=True, format="ISO8601", errors="coerce")
        if parsed.isna().sum() > (~present).sum():
            alt = pd.to_datetime(s, utc=True, format="mixed", errors="coerce")
            if alt.isna().sum() < parsed.isna().sum():
                parsed = alt
        return pd.DatetimeIndex(parsed), None, s.astype(object)
    fmt = _pick_format(s)
    if notes is not None and fmt != "ISO8601":
        shown = fmt
        for code, word in (("%Y", "YYYY"), ("%m", "MM"), ("%d", "DD"), ("%H", "hh"), ("%M", "mm"), ("%S", "ss")):
            shown = shown.replace(code, word)
        notes.append(DataFinding("note", "date-format", f"timestamps read as {shown}"))
    return None, pd.DatetimeIndex(pd.to_datetime(s, format=fmt, errors="coerce")), s.astype(object)


def parse_timestamps(
    df: pd.DataFrame, ts_spec: tuple[str, tuple[int, ...]], tz: str, time_shift: float, ck: Checker, lines: np.ndarray
) -> tuple[np.ndarray, np.ndarray, pd.Series, list[AnyFinding]]:
    """Naive-UTC datetime64[ns] (NaT where unreadable), nonexistent-time mask, raw text, notes."""
    notes: list[AnyFinding] = []
    kind, cols = ts_spec
    shift = pd.Timedelta(hours=time_shift)
    n = len(df)
    if kind == "pair":
        d = df.iloc[:, cols[0]]
        t = df.iloc[:, cols[1]]
        d = d.astype("string").str.strip()
        t = t.astype("string").str.strip()
        if t.dropna().str.fullmatch(r"\d{1,6}").all() and t.notna().any():
            width = 4 if t.dropna().str.len().max() <= 4 else 6
            t = t.str.zfill(width)
        raw = (d + " " + t).astype(object)
    else:
        raw = df.iloc[:, cols[0]]

    aware, naive, raw = _decode_timestamps(raw, ck, str(df.columns[cols[0]]), lines, notes)

    nonexistent = np.zeros(n, dtype=bool)
    if aware is not None:
        utc = aware.tz_convert("UTC").tz_localize(None)
        bad = _out_of_range(utc)
        if bad.any():
            utc = utc.where(~bad)
        out = (utc + shift).as_unit("ns").to_numpy()
        notes.append(DataFinding("note", "timezone", f"timestamps carry UTC offsets; converted to {EASTERN}"))
    else:
        assert naive is not None
        if naive.tz is not None:  # pragma: no cover - defensive
            naive = naive.tz_localize(None)
        bad = _out_of_range(naive)
        if bad.any():
            naive = naive.where(~bad)
        naive = naive + shift
        dst_first = ~pd.Index(naive).duplicated(keep="first")
        loc = naive.tz_localize(tz, ambiguous=dst_first, nonexistent="NaT")
        nonexistent = np.asarray(loc.isna() & naive.notna())
        amb_true = naive.tz_localize(tz, ambiguous=np.ones(n, bool), nonexistent="NaT")
        amb_false = naive.tz_localize(tz, ambiguous=np.zeros(n, bool), nonexistent="NaT")
        ambiguous = np.asarray(amb_true.notna() & (amb_true != amb_false))
        if ambiguous.any():
            first_amb = naive[ambiguous][0]
            notes.append(DataFinding(
                "note",
                "timezone",
                f"{int(ambiguous.sum())} timestamps fall in the repeated hour of the daylight-saving "
                f"change (from {first_amb:%Y-%m-%d %H:%M}); the first occurrence of each is read as daylight time, "
                "a repeat as standard time",
            ))
        out = _to_naive_utc_ns(loc)
        if tz != EASTERN:
            notes.append(DataFinding("note", "timezone", f"naive timestamps read as {tz} and converted to {EASTERN}"))
        else:
            notes.append(DataFinding("note", "timezone", f"naive timestamps read as {EASTERN}"))
    if time_shift:
        notes.append(DataFinding(
            "note",
            "time-shift",
            f"{time_shift:+g} h added to every timestamp of the file "
            f"(e.g. a bar stamped 14:30 is read as {(pd.Timestamp('2000-01-01 14:30') + shift):%H:%M})",
        ))
    return out, nonexistent, pd.Series(raw.to_numpy(), index=range(n)), notes
