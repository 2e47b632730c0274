"""What loading found and did, as typed records: :class:`DataFinding` (a note or a warning) and :class:`Repair`.

``Bars.findings`` holds them in the order they happened; ``Bars.notes`` is their text,
one line per finding, a repair followed by one line per affected row:

    note [timezone] naive timestamps read as America/New_York
    repaired [negative-volume] 2 rows: negative volume; volume set to 0
      line 12: volume -3 < 0; set to 0
      line 14: volume -1 < 0; set to 0

:func:`parse_repair_notes` reads the header lines of repairs back from such text (for
notes kept as text, e.g. in a run directory); code holding ``Bars`` reads ``Bars.repairs``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ROW_NOTE_LIMIT = 100
"""Per kind of repair, at most this many row-by-row notes; the rest are counted."""

_HEADER_RE = re.compile(r"^(repaired|dropped) \[([a-z0-9-]+)\] (\d+) rows?: (.*)$")


def plural(n: int, word: str = "row") -> str:
    """``"1 row"``, ``"3 rows"``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class DataFinding:
    """A note or warning about the data that never stops loading."""

    level: Literal["note", "warning"]
    """``note``: what loading did or assumed; ``warning``: the data probably need an option (e.g. --tz)."""
    code: str
    """Kind of finding, e.g. ``timezone``, ``columns``, ``tick-grid``, ``clock``."""
    message: str
    """What was found and, for a warning, the fix."""

    def lines(self) -> list[str]:
        """The finding as note lines (``"warning [clock] ..."``)."""
        return [f"{self.level} [{self.code}] {self.message}"]


@dataclass(frozen=True)
class RowNote:
    """One affected row of a repair."""

    where: str
    """``"line 12"`` (CSV, header = line 1) or ``"row 11"`` (Parquet, 1-based)."""
    text: str
    """What was wrong with the row and what was done."""


@dataclass(frozen=True)
class Repair:
    """Rows of one kind of problem, dropped or repaired (``load_bars(..., repair=True)``)."""

    code: str
    """Kind of problem, e.g. ``duplicate-timestamp`` (the check's code)."""
    action: Literal["dropped", "repaired"]
    """``dropped``: the rows were removed; ``repaired``: their values were fixed."""
    column: str | None
    """Column of the first affected row's problem."""
    rows: int
    """Number of affected rows."""
    reason: str
    """The kind of problem, e.g. ``negative volume``."""
    done: str
    """What was done, e.g. ``volume set to 0``."""
    row_notes: tuple[RowNote, ...] = field(default=())
    """The first :data:`ROW_NOTE_LIMIT` affected rows, in file order."""
    rest_span: tuple[str, str] | None = None
    """First and last location of the affected rows not in ``row_notes`` (None when all are listed)."""

    @property
    def level(self) -> str:
        return self.action

    def lines(self) -> list[str]:
        """Header line, one line per listed row and a count of the rest."""
        out = [f"{self.action} [{self.code}] {plural(self.rows)}: {self.reason}; {self.done}"]
        out += [f"  {r.where}: {r.text}" for r in self.row_notes]
        hidden = self.rows - len(self.row_notes)
        if hidden > 0 and self.rest_span is not None:
            first, last = self.rest_span
            out.append(f"  ... and {plural(hidden)} more with the same repair ({first} to {last})")
        return out

    def as_dict(self) -> dict[str, Any]:
        """``{kind, action, rows, reason}``, the summary's form of a repair."""
        return {"kind": self.code, "action": self.action, "rows": self.rows, "reason": f"{self.reason}; {self.done}"}


AnyFinding = DataFinding | Repair


def finding_lines(findings: Sequence[AnyFinding]) -> list[str]:
    """The text of ``findings``, in order (what ``Bars.notes`` holds)."""
    return [line for f in findings for line in f.lines()]


def parse_repair_notes(notes: Sequence[str]) -> list[dict[str, Any]]:
    """The header lines of repairs in text notes as dicts ``{kind, action, rows, reason}``."""
    out = []
    for note in notes:
        m = _HEADER_RE.match(note)
        if m:
            out.append({"kind": m.group(2), "action": m.group(1), "rows": int(m.group(3)), "reason": m.group(4)})
    return out
