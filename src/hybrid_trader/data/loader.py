"""Load OHLCV bars from CSV or Parquet into validated :class:`~hybrid_trader.data.bars.Bars`.

:func:`load_bars` reads the file, matches columns by name (case-insensitive, common
aliases, extra columns ignored: :mod:`hybrid_trader.data.columns`), parses timestamps
(naive ones in ``tz``, ones with a UTC offset converted), applies ``time_shift``, converts
to US/Eastern, validates every row (:mod:`hybrid_trader.data.validate`) and records what
it found and did in ``Bars.findings`` (typed notes, warnings and repairs; ``Bars.notes``
is their text).
See ``docs/DATA.md``.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import math
import re
import zipfile
import zoneinfo
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.bars import Bars
from hybrid_trader.data.clock import clock_findings
from hybrid_trader.data.columns import match_columns
from hybrid_trader.data.findings import AnyFinding, DataFinding
from hybrid_trader.data.many import bars_files, is_many, load_many
from hybrid_trader.data.nt_export import NT_NAMES, NT_SEP, NT_TZ, is_nt_export, resolve_stamps, stamp_shift_ns
from hybrid_trader.data.timestamps import parse_timestamps
from hybrid_trader.data.validate import Checker, tick_grid_finding, validate_frame
from hybrid_trader.errors import UserError, did_you_mean
from hybrid_trader.markets import CONTRACTS, get_contract

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")

TZ_SHORTHANDS = {"ET": EASTERN, "EASTERN": EASTERN, "CT": "America/Chicago", "CENTRAL": "America/Chicago"}


# ---- options ------------------------------------------------------------------------


def resolve_tz(tz: str | None) -> str:
    """Validate an IANA time-zone name (``ET``/``CT`` shorthands accepted)."""
    if tz is None:
        return EASTERN
    name = TZ_SHORTHANDS.get(str(tz).strip().upper(), str(tz).strip())
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        raise UserError(
            f"unknown time zone '{tz}'.",
            fix="use an IANA name such as America/New_York, America/Chicago, Europe/London or UTC",
        ) from None
    return name


def guess_market(path: Path) -> str | None:
    """Contract root from the file name prefix (``NQ_1min.csv`` -> NQ, ``MNQZ4.csv`` -> MNQ)."""
    token = re.split(r"[^A-Za-z0-9]", path.name, maxsplit=1)[0].upper()
    if token in CONTRACTS:
        return token
    m = re.match(r"^([A-Z0-9]+?)[FGHJKMNQUVXZ]\d{1,4}$", token)
    if m and m.group(1) in CONTRACTS:
        return m.group(1)
    return None


def named_market(path: str | Path) -> tuple[str | None, str]:
    """The contract root ``load_bars(path)`` trades when no market is given, and how it is known.

    ``(symbol, "name")``: the file name says it (a folder or glob: each of its files' names, which
    agree); ``("NQ", "assumed")``: the names say nothing and the loader assumes NQ; ``(None, why)``: the
    files' names disagree, or a folder or glob lists no file now.
    """
    if not is_many(path):
        guessed = guess_market(Path(str(path)))
        return (guessed, "name") if guessed else ("NQ", "assumed")
    try:
        names = {guess_market(f) for f in bars_files(path)}
    except UserError as err:
        return None, err.message
    symbols = {n or "NQ" for n in names}
    if len(symbols) > 1:
        return None, f"its files' names say {', '.join(sorted(symbols))}"
    return symbols.pop(), "name" if names - {None} else "assumed"


# ---- reading ------------------------------------------------------------------------


_COMPRESSED_TEXT: dict[str, Callable[..., IO[str]]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
"""Suffix -> opener of compressed CSV files in text mode."""


def _first_line(path: Path) -> str:
    name = path.name.lower()
    opener = next((op for suffix, op in _COMPRESSED_TEXT.items() if name.endswith(suffix)), None)
    try:
        if opener is not None:
            with opener(path, "rt", errors="replace") as fh:
                return fh.readline()
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                members = zf.namelist()
                if not members:
                    return ""
                with zf.open(members[0]) as raw:
                    return raw.readline().decode("utf-8", "replace")
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.readline()
    except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError) as err:
        raise UserError(
            f"cannot read the file: {err}", file=str(path), fix="check that it is a CSV or Parquet file"
        ) from None


_MAGIC = {b"\x1f\x8b": ("gzip", ".gz"), b"BZh": ("bzip2", ".bz2"), b"\xfd7zXZ\x00": ("xz", ".xz")}
"""Leading bytes of a compressed file -> (compression, the suffix that makes it readable)."""


def _check_not_compressed_unnamed(path: Path) -> None:
    """Refuse a compressed CSV whose name lacks its suffix, naming the compression and the fix."""
    if any(path.name.lower().endswith(suffix) for suffix in (*_COMPRESSED_TEXT, ".zip")):
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return  # _first_line says what is wrong with reading it
    for magic, (kind, suffix) in _MAGIC.items():
        if head.startswith(magic):
            raise UserError(f"is {kind}-compressed, but its name does not end in {suffix}.", file=str(path),
                            fix=f"rename it to {path}{suffix} or decompress it")


def _is_parquet(path: Path) -> bool:
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def _check_file(path: Path) -> None:
    file = str(path)
    if not path.exists():
        near = (
            did_you_mean(path.name, [p.name for p in path.parent.glob("*") if p.is_file()])
            if path.parent.is_dir()
            else ""
        )
        raise UserError(
            "file not found." + near, file=file, fix="check the path (relative paths start at the current directory)"
        )
    if path.is_dir():
        raise UserError("is a directory, not a bars file.", file=file, fix="give the path of a .csv or .parquet file")
    try:
        size = path.stat().st_size
        with open(path, "rb"):
            pass
    except OSError as err:
        raise UserError(
            f"cannot open the file: {err.strerror or err}", file=file, fix="check the file's permissions"
        ) from None
    if size == 0:
        raise UserError(
            "the file is empty.", file=file, fix="export the bars again: a header line and one line per bar"
        )


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises many types
        raise UserError(
            f"cannot read the Parquet file ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}).",
            file=str(path),
            fix="check that the file is a complete Parquet file (or give a CSV file)",
        ) from None
    if isinstance(df.index, pd.DatetimeIndex):
        name = df.index.name if df.index.name is not None else "timestamp"
        df = df.reset_index(names=name)
    df.columns = [str(c) for c in df.columns]
    return df


def _read_csv(
    path: Path,
) -> tuple[pd.DataFrame, dict[str, int], tuple[str, tuple[int, ...]], np.ndarray, list[AnyFinding]]:
    file = str(path)
    _check_not_compressed_unnamed(path)
    first = _first_line(path)
    if not first.strip():
        raise UserError(
            "the first line is empty; expected a header line.",
            file=file,
            fix="start the file with a header such as: timestamp,open,high,low,close,volume",
        )
    if "\x00" in first:
        raise UserError(
            "this is not a text (CSV) file.", file=file, fix="give a CSV file, or a Parquet file ending in .parquet"
        )
    delims = [",", ";", "\t", "|"]
    sep = max(delims, key=lambda d: first.count(d))
    if first.count(sep) == 0:
        sep = ","
    try:
        header = list(pd.read_csv(path, sep=sep, nrows=0, compression="infer", skipinitialspace=True).columns)
    except pd.errors.EmptyDataError:
        raise UserError(
            "the file is empty.", file=file, fix="export the bars again: a header line and one line per bar"
        ) from None
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError) as err:
        raise UserError(
            f"cannot read the CSV header ({err}).", file=file, fix="check that the file is a text CSV file"
        ) from None
    pos, ts_spec, notes = match_columns([str(h) for h in header], file)
    ts_cols = list(ts_spec[1])
    usecols = sorted(set(pos.values()) | set(ts_cols))
    dtype = {header[p]: str for p in ts_cols}
    try:
        df = pd.read_csv(
            path,
            sep=sep,
            usecols=usecols,
            dtype=dtype,
            skip_blank_lines=False,
            skipinitialspace=True,
            compression="infer",
            low_memory=False,
        )
    except pd.errors.EmptyDataError:
        raise UserError("the file is empty.", file=file, fix="export the bars again") from None
    except pd.errors.ParserError as err:
        msg = str(err).strip().splitlines()[-1]
        m = re.search(r"line (\d+)", msg)
        raise UserError(
            f"malformed CSV ({msg}).",
            file=file,
            row=(int(m.group(1)) - 1) if m else None,
            fix="every line needs the same number of fields as the header; fix or remove that line",
        ) from None
    except UnicodeDecodeError as err:
        raise UserError(
            f"cannot decode the file as text ({err.reason}).", file=file, fix="save the CSV as UTF-8"
        ) from None
    # Column positions in df follow the order of usecols.
    where = {p: k for k, p in enumerate(usecols)}
    pos = {r: where[p] for r, p in pos.items()}
    ts_spec = (ts_spec[0], tuple(where[p] for p in ts_spec[1]))
    lines = np.arange(2, len(df) + 2, dtype=np.int64)
    blank = df.isna().all(axis=1).to_numpy()
    if blank.any():
        bl = lines[blank]
        shown = ", ".join(str(x) for x in bl[:10]) + (" ..." if len(bl) > 10 else "")
        notes.append(
            DataFinding("note", "blank-lines",
                        f"{len(bl)} empty line{'s' if len(bl) > 1 else ''} skipped (line {shown})")
        )
        df = df.loc[~blank]
        lines = lines[~blank]
    return df, pos, ts_spec, lines, notes


def _read_nt_export(path: Path) -> tuple[pd.DataFrame, dict[str, int], tuple[str, tuple[int, ...]], np.ndarray]:
    """NinjaTrader's header-less ``yyyyMMdd HHmmss;open;high;low;close;volume`` lines (``data.nt_export``)."""
    try:
        df = pd.read_csv(path, sep=NT_SEP, header=None, names=NT_NAMES, dtype={"timestamp": str},
                         skip_blank_lines=False, skipinitialspace=True, compression="infer", index_col=False)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"malformed NinjaTrader export ({str(err).strip().splitlines()[-1]}).", file=str(path),
                        fix="every line needs yyyyMMdd HHmmss;open;high;low;close;volume") from None
    lines = np.arange(1, len(df) + 1, dtype=np.int64)
    keep = ~df.isna().all(axis=1).to_numpy()
    return df.loc[keep], {r: k for k, r in enumerate(NT_NAMES) if r != "timestamp"}, ("single", (0,)), lines[keep]


# ---- the public function ------------------------------------------------------------------


def infer_bar_minutes(index: pd.DatetimeIndex, file: str = "<memory>") -> int:
    """Bar size in minutes: the most common positive difference between timestamps."""
    if len(index) < 2:
        return 1
    d = np.diff(index.as_unit("ns").asi8)
    d = d[d > 0]
    if len(d) == 0:
        return 1
    secs = np.round(d / 1e9).astype(np.int64)
    vals, counts = np.unique(secs, return_counts=True)
    mode = int(vals[np.argmax(counts)])
    if mode % 60 != 0:
        raise UserError(
            f"bars are {mode} seconds apart; only whole-minute bars are supported.",
            file=file,
            fix="resample the data to 1-minute (or larger) bars",
        )
    return mode // 60


def load_bars(
    path: str | Path,
    *,
    tz: str = EASTERN,
    time_shift: float = 0.0,
    market: str | None = None,
    repair: bool = False,
    stamps: str | None = None,
) -> Bars:
    """Load, validate and (optionally) repair OHLCV bars from a CSV or Parquet file.

    Args:
        path: ``.csv`` (optionally ``.gz``/``.bz2``/``.xz``/``.zip``) or ``.parquet`` file.
        tz: time zone of naive timestamps (IANA name; ``ET``/``CT`` accepted).
            Timestamps that carry a UTC offset ignore it.
        time_shift: hours ADDED to every timestamp as written in the file, before it
            is interpreted in ``tz`` (for naive stamps it corrects the wall clock). The
            ES file in ``../shared/data`` is stamped ET + 5 h and needs ``-5``.
        market: contract root (``NQ``, ``ES``, ...); None guesses it from the file
            name's prefix, else NQ (said in ``findings``).
        repair: fix what can be fixed and record each fix in ``findings`` instead of
            raising :class:`UserError` at the first problem.
        stamps: ``start`` or ``end``: which end of the bar a timestamp marks; end stamps
            are moved back one bar length. None: ``end`` for NinjaTrader's header-less
            export (``data.nt_export``, read in UTC whatever ``tz`` says), else ``start``.

    Returns:
        :class:`Bars` indexed by US/Eastern bar-start timestamps (ns), with the bar
        size inferred and ``findings`` (notes, warnings, repairs) describing columns,
        zone, shift, repairs, tick grid and clock.

    Raises:
        UserError: naming file, row (``line N`` of the file), column, value and fix.
    """
    if is_many(path):  # a folder or a glob of one market's files: each loaded as below, then joined
        return load_many(path, lambda f: load_bars(f, tz=tz, time_shift=time_shift, market=market, repair=repair,
                                                   stamps=stamps))
    p = Path(path).expanduser()
    file = str(path)
    try:
        shift = float(time_shift)
    except (TypeError, ValueError):
        raise UserError(f"time shift '{time_shift}' is not a number of hours.", fix="e.g. --time-shift -5") from None
    if not math.isfinite(shift) or abs(shift) > 48:
        raise UserError(
            f"time shift {time_shift} h is out of range.", fix="give hours between -48 and 48, e.g. --time-shift -5"
        )
    tz_name = resolve_tz(tz)
    findings: list[AnyFinding] = []
    if market is None:
        guessed = guess_market(p)
        if guessed:
            market_sym = guessed
            findings.append(
                DataFinding("note", "market", f"market {guessed} guessed from the file name; pass --market to override")
            )
        else:
            market_sym = "NQ"
            findings.append(
                DataFinding(
                    "note",
                    "market",
                    "market not given and not recognisable from the file name: assuming NQ; pass --market",
                )
            )
    else:
        market_sym = get_contract(market).symbol
    contract = get_contract(market_sym)

    _check_file(p)
    parquet = _is_parquet(p)
    nt_export = not parquet and is_nt_export(_first_line(p), file)
    ck = Checker(file=file, repair=repair, csv=not (parquet or nt_export))  # no header: a line is a row
    if parquet:
        df = _read_parquet(p)
        pos, ts_spec, col_notes = match_columns(list(df.columns), file)
        lines = np.arange(1, len(df) + 1, dtype=np.int64)
    elif nt_export:
        df, pos, ts_spec, lines = _read_nt_export(p)
        tz_name, col_notes = NT_TZ, []
    else:
        df, pos, ts_spec, lines, col_notes = _read_csv(p)
    stamps = resolve_stamps(stamps, nt_export)
    findings += col_notes
    if len(df) == 0:
        raise UserError(
            "the file has a header but no bars.",
            file=file,
            fix="export the bars again: one line per bar after the header",
        )
    df = df.reset_index(drop=True)
    ts, nonexistent, raw_ts, ts_notes = parse_timestamps(df, ts_spec, tz_name, shift, ck, lines)
    findings += ts_notes
    work = pd.DataFrame(
        {
            "ts": ts,
            "nonexistent": nonexistent,
            **{r: df.iloc[:, pos[r]].to_numpy() for r in ("open", "high", "low", "close", "volume")},
            "line": lines,
        }
    )
    frame, kept_lines = validate_frame(work, raw_ts, ck)
    findings += ck.repairs
    if len(frame) == 0:
        raise UserError(
            "no valid bars are left after the repairs.",
            file=file,
            fix="check the file: every row had a problem (see above)",
        )
    bar_minutes = infer_bar_minutes(frame.index, file)
    if nt_export or stamps == "end":
        frame.index = frame.index + pd.Timedelta(stamp_shift_ns(stamps, bar_minutes), unit="ns")
        findings.append(DataFinding("note", "stamps", ("NinjaTrader export (no header, ';', read as UTC); "
                                                   if nt_export else "") + (
            f"timestamps mark the bar's end: moved back {bar_minutes} min to its start (--stamps end)"
            if stamps == "end" else "timestamps mark the bar's start (--stamps start)")))
    grid = tick_grid_finding(frame, contract.symbol, contract.tick_size, where=lambda i: ck.where(kept_lines[i]))
    if grid:
        findings.append(grid)
    findings += clock_findings(frame.index, frame["volume"].to_numpy(), bar_minutes, time_shift=shift, tz=tz_name)
    return Bars(frame, market=contract.symbol, bar_minutes=bar_minutes, source=file, findings=findings)
