"""Splits by time over trading sessions (Globex days): train, then validation, then test.

A split is three ranges of *session indices* (``Bars.session_id`` numbering, 0 = the
first trading day in the data). The parts never overlap and are in time order: every
validation session is later than every training session, every test session later
than every validation session. Whole sessions are never cut, so no trading day is
seen by two parts. Turn a range into bars with
``bars.slice_sessions(r.start, r.stop - 1)`` (see :func:`part_bars`).

- :func:`time_split` cuts the sessions once by fractions (default 70/15/15).
- :func:`walk_forward` gives successive folds, each a :class:`Split`, whose test
  windows follow one another in time; rolling (fixed-length training window that moves
  forward) or anchored (training always starts at the first session and grows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from hybrid_trader.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_trader.data.bars import Bars

PartName = Literal["train", "val", "test"]
PARTS: tuple[str, ...] = ("train", "val", "test")


@dataclass(frozen=True)
class Split:
    """Session-index ranges of the three parts of one split (``range`` objects, step 1)."""

    train: range
    """Training sessions."""
    val: range
    """Validation sessions (may be empty when no validation was asked for)."""
    test: range
    """Test sessions: later than every training and validation session."""

    def __post_init__(self) -> None:
        previous_end = None
        for name in PARTS:
            r = getattr(self, name)
            if not isinstance(r, range) or r.step != 1 or r.start < 0:
                raise ValueError(f"Split.{name} must be a range of session indices with step 1, got {r!r}")
            if len(r) == 0:
                continue
            if previous_end is not None and r.start < previous_end:
                raise ValueError(f"Split.{name} {r} overlaps or precedes an earlier part")
            previous_end = r.stop

    def part(self, name: str) -> range:
        """The range of part ``name`` (``train``, ``val`` or ``test``)."""
        if name not in PARTS:
            raise UserError(f"unknown split '{name}'", fix="use train, val or test")
        return getattr(self, name)

    def to_dict(self) -> dict[str, list[int]]:
        """``{"train": [first, stop], ...}`` (stop exclusive) for JSON."""
        return {name: [getattr(self, name).start, getattr(self, name).stop] for name in PARTS}

    @classmethod
    def from_dict(cls, data: dict) -> Split:
        """Inverse of :meth:`to_dict`."""
        return cls(**{name: range(int(data[name][0]), int(data[name][1])) for name in PARTS})

    def describe(self, session_dates=None) -> str:
        """One line per part: sessions, count and, given ``Bars.session_dates``, the dates."""
        lines = []
        for name in PARTS:
            r = getattr(self, name)
            text = f"{name:<5} sessions {r.start}-{r.stop - 1} ({len(r)} days)" if len(r) else f"{name:<5} (none)"
            if session_dates is not None and len(r):
                text += f": {session_dates[r.start]} to {session_dates[r.stop - 1]}"
            lines.append(text)
        return "\n".join(lines)


def _allocate(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Sizes of the three parts: boundaries at n * cumulative fraction, rounded half up."""
    a = math.floor(n * fractions[0] + 0.5 + 1e-9)
    b = math.floor(n * (fractions[0] + fractions[1]) + 0.5 + 1e-9)
    a = min(max(a, 0), n)
    b = min(max(b, a), n)
    return a, b - a, n - b


def time_split(n_sessions: int, train: float = 0.70, val: float = 0.15, test: float = 0.15) -> Split:
    """Cut ``n_sessions`` trading days into train, validation and test, in that time order.

    Boundaries fall at ``n * train`` and ``n * (train + val)`` rounded half up; the test
    part takes the rest. Fractions must be >= 0 and sum to 1; ``val=0`` gives an empty
    validation part on purpose, any part with a positive fraction must get at least one
    session or a :class:`UserError` says how many sessions are needed.
    """
    fractions = (float(train), float(val), float(test))
    for name, f in zip(PARTS, fractions):
        if not (f >= 0.0) or math.isinf(f):
            raise UserError(f"split fraction {name}={f} must be >= 0", fix="use e.g. train=0.7, val=0.15, test=0.15")
    if train <= 0 or test <= 0:
        raise UserError("the train and test fractions must be > 0", value=(train, val, test),
                        fix="use e.g. train=0.7, val=0.15, test=0.15")
    total = sum(fractions)
    if abs(total - 1.0) > 1e-6:
        raise UserError(f"split fractions sum to {total:g}, not 1", value=(train, val, test),
                        fix="make train + val + test = 1, e.g. 0.7 + 0.15 + 0.15")
    n = int(n_sessions)
    sizes = _allocate(n, fractions)
    if any(size == 0 and f > 0 for size, f in zip(sizes, fractions)):
        need = _sessions_needed(fractions)
        got = ", ".join(f"{name} {s}" for name, s in zip(PARTS, sizes))
        raise UserError(
            f"{n} trading session{'s' if n != 1 else ''} cannot be split {train:g}/{val:g}/{test:g} "
            f"with every part non-empty (would give {got}); at least {need} sessions are needed",
            fix=f"give bars covering at least {need} trading days, or change the split fractions",
        )
    a, b, _ = sizes
    return Split(train=range(0, a), val=range(a, a + b), test=range(a + b, n))


def _sessions_needed(fractions: tuple[float, float, float]) -> int:
    smallest = min(f for f in fractions if f > 0)
    limit = math.ceil(3.0 / smallest) + 3 if smallest >= 1e-3 else 0
    for n in range(1, limit + 1):
        sizes = _allocate(n, fractions)
        if all(size > 0 or f == 0 for size, f in zip(sizes, fractions)):
            return n
    raise UserError(f"split fraction {smallest:g} is too small: no practical number of sessions gives it one",
                    value=fractions, fix="use fractions of at least 0.001, or 0 for no validation part")


def walk_forward(
    n_sessions: int,
    n_folds: int,
    train_sessions: int,
    test_sessions: int,
    val_sessions: int = 0,
    step: int | None = None,
    *,
    anchored: bool = False,
) -> list[Split]:
    """Walk-forward folds over ``n_sessions`` trading days, oldest fold first.

    Each fold is a :class:`Split`: ``train_sessions`` of training, then
    ``val_sessions`` of validation (0: none), then ``test_sessions`` of test. Fold
    ``k+1`` is fold ``k`` moved ``step`` sessions later (default ``test_sessions``, so
    the test windows tile time without overlap). The folds are placed so that the last
    test window ends at the last session (the most recent data is tested); sessions
    before the first fold are unused.

    - rolling (default): every training window has ``train_sessions`` days and moves
      forward with the folds;
    - ``anchored=True``: every training window starts at session 0 and grows, the first
      one holding ``train_sessions`` days plus the unused lead-in.

    Raises :class:`UserError` when the data are too short, saying how many sessions
    are needed (``train + val + test + (n_folds - 1) * step``).
    """
    n = int(n_sessions)
    for name, value, low in (("n_folds", n_folds, 1), ("train_sessions", train_sessions, 1),
                             ("test_sessions", test_sessions, 1), ("val_sessions", val_sessions, 0)):
        if int(value) != value or value < low:
            raise UserError(f"walk-forward {name}={value!r} must be an integer >= {low}")
    step = int(test_sessions if step is None else step)
    if step < 1:
        raise UserError(f"walk-forward step={step} must be >= 1", fix="omit it to step by test_sessions")
    window = train_sessions + val_sessions + test_sessions
    need = window + (n_folds - 1) * step
    if need > n:
        raise UserError(
            f"{n_folds} walk-forward folds of {train_sessions} train + {val_sessions} val + "
            f"{test_sessions} test sessions, stepping {step}, need {need} trading sessions; the data have {n}",
            fix="use fewer or shorter folds, or bars covering more trading days",
        )
    offset = n - need
    folds = []
    for k in range(n_folds):
        start = offset + k * step
        train_start = 0 if anchored else start
        t_end = start + train_sessions
        v_end = t_end + val_sessions
        folds.append(Split(train=range(train_start, t_end), val=range(t_end, v_end),
                           test=range(v_end, v_end + test_sessions)))
    return folds


def part_bars(bars: Bars, split: Split, name: str) -> Bars:
    """The bars of one part of ``split`` (whole sessions); UserError when the part is empty."""
    r = split.part(name)
    if len(r) == 0:
        raise UserError(f"the {name} part of the split is empty", fix="give it a positive fraction")
    if r.stop > bars.n_sessions:
        raise UserError(f"the split needs {r.stop} sessions but the bars have {bars.n_sessions}",
                        fix="compute the split from these bars' n_sessions")
    return bars.slice_sessions(r.start, r.stop - 1)


def month_folds(session_dates: Sequence[Any], train_months: int, val_months: int, test_months: int) -> list[Split]:
    """Walk-forward folds by calendar month of the trading date, rolling by ``test_months``.

    Fold k trains on months ``[k*test, k*test + train)`` (counted from the first month of the
    data), validates on the next ``val_months`` and tests on the next ``test_months``; a fold
    whose test months run past the data is not made. E.g. 6/1/1 over 2024: train January-June,
    validate July, test August; then February-July, August, September; ...
    """
    months = [(int(str(d)[:4]), int(str(d)[5:7])) for d in session_dates]
    if not months:
        return []
    first = months[0][0] * 12 + months[0][1] - 1
    index = np.array([y * 12 + m - 1 - first for y, m in months])
    span = train_months + val_months + test_months
    out = []
    k = 0
    while True:
        start = k * test_months
        if start + span > int(index[-1]) + 1:
            break
        bounds = [start, start + train_months, start + train_months + val_months, start + span]
        cut = [int(np.searchsorted(index, b)) for b in bounds]
        split = Split(train=range(cut[0], cut[1]), val=range(cut[1], cut[2]), test=range(cut[2], cut[3]))
        if len(split.train) and len(split.test):
            out.append(split)
        k += 1
    return out
