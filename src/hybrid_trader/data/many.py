"""Bars from several files of one market: a folder or a glob of monthly (or any) vendor files.

:func:`bars_files` expands ``--data`` when it names a folder or a glob (``*``, ``?``, ``[``)
into the bars files it holds, in name order; :func:`load_many` loads each file with the
same options and the same checks as one file (each keeps its own findings, prefixed by its
name), refuses files of another market or bar size, names files whose dates were read in
another format (a vendor that switched from MM/DD to DD/MM), and concatenates them in time
order, keeping the first file's bar where two files overlap (counted in a note; a warning
when the overlapping bars differ).
"""

from __future__ import annotations

import glob
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from hybrid_trader.data.bars import OHLCV, Bars
from hybrid_trader.data.findings import AnyFinding, DataFinding, Repair
from hybrid_trader.errors import UserError

BARS_SUFFIXES = (".csv", ".txt", ".parquet", ".pq", ".parq", ".gz", ".bz2", ".xz", ".zip")
"""File endings taken from a folder (other files, e.g. a README, are left out)."""
GLOB_CHARS = "*?["


def is_many(path: str | Path) -> bool:
    """Whether ``--data`` names several files: a folder or a glob."""
    text = str(path)
    return any(c in text for c in GLOB_CHARS) or Path(text).expanduser().is_dir()


def bars_files(path: str | Path) -> list[Path]:
    """The bars files a folder or a glob names, sorted by name; a UserError when there are none."""
    text = str(Path(str(path)).expanduser())
    if Path(text).is_dir():
        files = sorted(p for p in Path(text).iterdir() if p.is_file() and p.name.lower().endswith(BARS_SUFFIXES)
                       and not p.name.startswith("."))
        if not files:
            raise UserError("the folder holds no bars file (.csv or .parquet)", file=text,
                            fix="give a folder of one market's bars files, or one file")
        return files
    files = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
    if not files:
        raise UserError("no bars file matches this pattern", file=text,
                        fix="check the pattern (quote it so the shell does not expand it), e.g. 'data/nq-2024-*.csv'")
    return files


def files_sha256(files: Sequence[Path]) -> str:
    """One checksum over the files' names and contents (the identity of a folder or glob's bars)."""
    h = hashlib.sha256()
    for f in files:
        one = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                one.update(block)
        h.update(f"{f.name}\0{one.hexdigest()}\n".encode())
    return h.hexdigest()


def _prefixed(name: str, finding: AnyFinding) -> AnyFinding:
    if isinstance(finding, DataFinding):
        return DataFinding(finding.level, finding.code, f"{name}: {finding.message}")
    if isinstance(finding, Repair):
        return Repair(finding.code, finding.action, finding.column, finding.rows, f"{name}: {finding.reason}",
                      finding.done, finding.row_notes)
    return finding


def load_many(path: str | Path, load_one: Callable[[Path], Bars]) -> Bars:
    """The bars of every file ``path`` names (a folder or a glob), loaded by ``load_one``, as one series."""
    files = bars_files(path)
    parts = [load_one(f) for f in files]
    markets = {b.market for b in parts}
    if len(markets) > 1:
        which = "; ".join(f"{f.name}: {b.market}" for f, b in zip(files, parts))
        raise UserError(f"the files hold more than one market ({which})", file=str(path),
                        fix="give one market's files (pass --market to say which when the names mislead)")
    sizes = {b.bar_minutes for b in parts}
    if len(sizes) > 1:
        which = "; ".join(f"{f.name}: {b.bar_minutes} min" for f, b in zip(files, parts))
        raise UserError(f"the files hold bars of different sizes ({which})", file=str(path),
                        fix="give files of one bar size")
    findings = _merged_findings(files, parts)
    formats = {f.name: _date_format(b) for f, b in zip(files, parts)}
    if len(set(formats.values()) - {None}) > 1:
        groups: dict[str, list[str]] = {}
        for name, fmt in formats.items():
            groups.setdefault(str(fmt), []).append(name)
        text = "; ".join(f"{fmt} in {', '.join(names)}" for fmt, names in groups.items())
        findings.append(DataFinding("warning", "date-format", f"the files write dates differently ({text}); each was "
                                "read with its own format: check the seams between them"))
    frame = pd.concat([b.frame[list(OHLCV)] for b in parts])
    order = np.argsort(frame.index.asi8, kind="stable")
    frame = frame.iloc[order]
    dup = frame.index.duplicated(keep="first")
    if dup.any():
        first = frame[frame.index.isin(frame.index[dup])]
        differ = int((first.groupby(level=0).nunique() > 1).any(axis=1).sum())
        findings.append(DataFinding("note", "overlap", f"{int(dup.sum()):,} bars appear in two files: the first file's "
                                "kept"))
        if differ:
            findings.append(DataFinding("warning", "overlap", f"{differ:,} of the bars in two files differ between "
                                    "them: check the files (a re-export, or another contract?)"))
        frame = frame[~dup]
    findings.append(DataFinding("note", "files", f"{len(files)} files concatenated in time order: "
                            f"{files[0].name} .. {files[-1].name}"))
    return Bars(frame, market=parts[0].market, bar_minutes=parts[0].bar_minutes, source=str(path), findings=findings)


def _merged_findings(files: Sequence[Path], parts: Sequence[Bars]) -> list[AnyFinding]:
    """Each file's findings prefixed by its name; a note or warning every file has alike is said once."""
    every: list[DataFinding] = []
    for x in parts[0].findings:
        if isinstance(x, DataFinding) and all(x in b.findings for b in parts[1:]):
            every.append(x)
    span = f"{files[0].name} .. {files[-1].name} ({len(files)} files)" if len(files) > 1 else files[0].name
    out: list[AnyFinding] = [DataFinding(x.level, x.code, f"{span}: {x.message}") for x in every]
    for f, b in zip(files, parts):
        out += [_prefixed(f.name, x) for x in b.findings if x not in every]
    return out


def _date_format(bars: Bars) -> str | None:
    """The date format a file was read with, as its timestamp notes say (None: not said)."""
    for f in bars.findings:
        if isinstance(f, DataFinding) and f.code == "date-format":
            return f.message
    return None
