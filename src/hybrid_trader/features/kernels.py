"""Running state of the feature recursions, one value at a time, bit-identical to the batch.

:class:`RollingMoments` and :class:`RollingVar` replicate pandas' fixed-window kernels
(``pandas/_libs/window/aggregations.pyx``, pandas 3.x); :class:`TalibStream` and
:class:`PhasedRSI` carry TA-Lib's recursions through its streaming API (``talib.stream``,
bit-identical to the function API by TA-Lib's contract). The scalar
helpers below are numpy's arithmetic on one float (the same rounding, NaN and infinities). Used by
:class:`hybrid_trader.features.incremental.IncrementalFeatures`; tests compare each with the batch.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import talib
from talib import stream

from hybrid_trader.features.base import RSI_PERIOD
from hybrid_trader.features.llm_features import DOUBLE_DEPTH_ATR, DOUBLE_TOLERANCE_ATR

NAN = math.nan
_np_log = np.log


# ---- numpy's arithmetic on one float ------------------------------------------------------------


def clip(x: float, lo: float, hi: float) -> float:
    """``np.clip`` of one float (NaN stays NaN)."""
    if x != x:
        return x
    return lo if x < lo else hi if x > hi else x


def log(x: float) -> float:
    """``np.log`` of one float (-inf at 0, NaN below, no warning)."""
    if x > 0:  # no floating-point warning to silence: skip the errstate context (same np.log)
        return float(_np_log(x))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(_np_log(np.float64(x)))


def log_ratio(a: float, b: float) -> float:
    """``features.llm_features._log_ratio`` of one pair: log((a + 1) / (b + 1)) clipped to [-5, 5]."""
    return clip(log((a + 1.0) / (b + 1.0)), -5, 5)


def div(num: float, den: float) -> float:
    """IEEE division as numpy does it: x/0 is +-inf (or NaN), never an exception."""
    if den == 0 or den != den or num != num:
        with np.errstate(divide="ignore", invalid="ignore"):
            return float(np.float64(num) / np.float64(den))
    return num / den


def safe_div_one(num: float, den: float, fill: float = 0.0) -> float:
    """``features.base.safe_div`` of one pair: ``fill`` where den == 0, NaN in NaN out."""
    if num != num or den != den:
        return NAN
    return fill if den == 0 else num / den


def flag(cond: bool, a: float, b: float = 0.0) -> float:
    """1.0 / 0.0, NaN while an input is (warm-up)."""
    return NAN if a != a or b != b else float(cond)


def zero_nonfinite(x: float) -> float:
    """``np.nan_to_num(x, nan=0, posinf=0, neginf=0)`` of one float."""
    return x if x - x == 0.0 else 0.0


def finite(x: float, fallback: float) -> float:
    """``x`` if finite, else ``fallback`` if finite, else 0 (``features.base.fill_raw`` of one value)."""
    v = x if math.isfinite(x) else fallback
    return v if math.isfinite(v) else 0.0


def opt(value: Any) -> float:
    """A TA-Lib stream's value, NaN for None (history too short)."""
    return NAN if value is None else float(value)


# ---- the history of one series --------------------------------------------------------------------


class Buffer:
    """A growing float64 array (amortised doubling): the history of one series.

    Pickled (the executor's snapshot) with its newest ``keep`` values only when ``keep`` is set (None: all); the
    others come back as NaN, :attr:`missing` of them at the front, for :meth:`fill` or never to be read.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.data = np.empty(capacity, dtype=np.float64)
        self.n = 0
        self.keep: int | None = None
        self.missing = 0

    def append(self, x: float) -> None:
        if self.n == len(self.data):
            self.data = np.concatenate([self.data, np.empty(len(self.data), dtype=np.float64)])
        self.data[self.n] = x
        self.n += 1

    def view(self) -> np.ndarray:
        return self.data[: self.n]

    def at(self, i: int) -> float:
        """Value at 0-based position ``i``, NaN for ``i < 0`` (a lag before the first bar)."""
        return float(self.data[i]) if i >= 0 else NAN

    def tail(self, m: int) -> np.ndarray:
        return self.data[max(0, self.n - m) : self.n]

    def __getstate__(self) -> dict[str, Any]:
        start = 0 if self.keep is None else max(0, self.n - self.keep)
        return {"data": self.data[start : self.n].copy(), "n": self.n, "start": start, "keep": self.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        n, start = state["n"], state["start"]
        self.data = np.full(max(n, 16), NAN)
        self.data[start:n] = state["data"]
        self.n, self.keep, self.missing = n, state["keep"], start

    def fill(self, values: np.ndarray) -> None:
        """Put back the values a snapshot left out: ``values`` holds all ``n`` (a ValueError if its tail is not the
        one kept)."""
        values = np.asarray(values, dtype=np.float64)
        kept = self.data[self.missing : self.n]
        if len(values) != self.n or not np.array_equal(values[self.missing :], kept, equal_nan=True):
            raise ValueError(f"{len(values)} values given for a history of {self.n} that they do not continue")
        self.data[: self.n] = values
        self.missing = 0


# ---- pandas' fixed-window kernels, one value at a time -------------------------------------------


class RollingMoments:
    """``pd.Series(x).rolling(n).mean()`` and ``.sum()`` at the newest value, fed one value at a time.

    A replica of pandas' fixed-window kernels ``roll_mean`` / ``roll_sum``
    (``start = max(0, i+1-n)``, ``end = i+1``): a Kahan-compensated running sum with
    separate add and remove compensations, NaN skipped, the consecutive-equal-values rule
    (GH#42064), the sign clamp of the mean, and a fresh setup at each step when ``n == 1``
    (``start[i] >= end[i-1]``). The same operations in the same order give the same
    rounding: every output equals pandas' bit for bit.
    """

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self._window: deque[float] = deque(maxlen=max(self.n, 1))
        self.i = 0
        self._reset(NAN)

    def _reset(self, first: float) -> None:
        self.nobs = 0
        self.sum_x = 0.0
        self.neg_ct = 0
        self.comp_add = 0.0
        self.comp_remove = 0.0
        self.same = 0
        self.prev = first

    def _add(self, val: float) -> None:
        if val != val:
            return
        self.nobs += 1
        y = val - self.comp_add
        t = self.sum_x + y
        self.comp_add = t - self.sum_x - y
        self.sum_x = t
        if math.copysign(1.0, val) < 0:
            self.neg_ct += 1
        if val == self.prev:
            self.same += 1
        else:
            self.same = 1
        self.prev = val

    def _remove(self, val: float) -> None:
        if val != val:
            return
        self.nobs -= 1
        y = -val - self.comp_remove
        t = self.sum_x + y
        self.comp_remove = t - self.sum_x - y
        self.sum_x = t
        if math.copysign(1.0, val) < 0:
            self.neg_ct -= 1

    def push(self, val: float) -> None:
        """Take the next value (NaN allowed: skipped, as pandas skips it)."""
        val = float(val)
        if self.i == 0 or self.n <= 1:  # pandas' setup branch: i == 0 or start[i] >= end[i-1]
            self._reset(val)
        elif self.i >= self.n:
            self._remove(self._window[0])
        self._add(val)
        self._window.append(val)
        self.i += 1

    def mean(self) -> float:
        if self.nobs >= self.n and self.nobs > 0:
            result = self.sum_x / self.nobs
            if self.same >= self.nobs:
                return self.prev
            if self.neg_ct == 0 and result < 0:
                return 0.0
            if self.neg_ct == self.nobs and result > 0:
                return 0.0
            return result
        return NAN

    def sum(self) -> float:
        if self.nobs == 0 == self.n:
            return 0.0
        if self.nobs >= self.n:
            return self.prev * self.nobs if self.same >= self.nobs else self.sum_x
        return NAN


class RollingVar:
    """``pd.Series(x).rolling(n).std()`` at the newest value, fed one value at a time.

    A replica of pandas' ``roll_var`` (ddof 1): Welford's update with Kahan-compensated
    means, NaN skipped, and the whole window recomputed from scratch when an update
    loses all but 3 significant digits (``InvCondTol = eps * 1e3``); then ``zsqrt``.
    """

    INV_COND_TOL = float(np.finfo(np.float64).eps) * 1e3

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self._window: deque[float] = deque(maxlen=max(self.n, 1))
        self.i = 0
        self.nobs = 0.0
        self.mean_x = 0.0
        self.ssqdm = 0.0
        self.comp_add = 0.0
        self.comp_remove = 0.0
        self.unstable = False

    def _add(self, val: float) -> None:
        prev_m2 = self.ssqdm
        if val != val:
            return
        self.nobs = self.nobs + 1
        prev_mean = self.mean_x - self.comp_add
        y = val - self.comp_add
        t = y - self.mean_x
        self.comp_add = t + self.mean_x - y
        self.mean_x = self.mean_x + t / self.nobs if self.nobs else 0.0
        self.ssqdm = self.ssqdm + (val - prev_mean) * (val - self.mean_x)
        if prev_m2 * self.INV_COND_TOL > self.ssqdm:
            self.unstable = True

    def _remove(self, val: float) -> None:
        prev_m2 = self.ssqdm
        if val != val:
            return
        self.nobs = self.nobs - 1
        if self.nobs:
            prev_mean = self.mean_x - self.comp_remove
            y = val - self.comp_remove
            t = y - self.mean_x
            self.comp_remove = t + self.mean_x - y
            self.mean_x = self.mean_x - t / self.nobs
            self.ssqdm = self.ssqdm - (val - prev_mean) * (val - self.mean_x)
            if prev_m2 * self.INV_COND_TOL > self.ssqdm:
                self.unstable = True
        else:
            self.mean_x = 0.0
            self.ssqdm = 0.0
            self.unstable = False

    def push(self, val: float) -> None:
        """Take the next value (NaN allowed: skipped, as pandas skips it)."""
        val = float(val)
        recompute = self.i == 0 or self.n <= 1
        if not recompute:
            if self.i >= self.n:
                self._remove(self._window[0])
            self._add(val)
        self._window.append(val)
        self.i += 1
        if recompute or self.unstable:
            self.nobs = self.mean_x = self.ssqdm = self.comp_add = self.comp_remove = 0.0
            for v in self._window:
                self._add(v)
            self.unstable = False

    def std(self) -> float:
        if self.nobs >= max(self.n, 1) and self.nobs > 1:
            var = self.ssqdm / (self.nobs - 1.0)
            return float(np.sqrt(var)) if var >= 0 else 0.0
        return NAN


# ---- TA-Lib recursions through its streaming handles ---------------------------------------------


class TalibStream:
    """A ``talib.stream`` handle opened on the history as soon as it is long enough (NaN before)."""

    def __init__(self, name: str, **params: int) -> None:
        self.name = name
        self.factory = getattr(stream, name)
        self.params = params
        self.handle: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the C handle (the executor's snapshot): the next :meth:`step` opens it again on the whole
        history, which gives the value the updated handle would (TA-Lib's contract: both equal its function API)."""
        return {**self.__dict__, "handle": None, "factory": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, factory=getattr(stream, state["name"]))

    def step(self, history: tuple[np.ndarray, ...], newest: tuple[float, ...]) -> Any:
        """The value at the newest bar; ``history`` ends with it (used only to open the handle)."""
        if self.handle is not None:
            return self.handle.update(*newest)
        try:
            self.handle = self.factory(*history, **self.params)
        except talib.InsufficientHistory:
            return None
        return self.handle.value


class PhasedRSI:
    """``strided_rsi(close, k)`` at the newest bar: one RSI stream per phase ``t mod k``, with
    ``features.base.rsi``'s 50-while-unmoved rule per phase series."""

    def __init__(self, k: int) -> None:
        self.k = max(1, int(k))
        self.pending: list[list[float]] = [[] for _ in range(self.k)]
        self.handles: list[Any] = [None] * self.k
        self.last: list[float | None] = [None] * self.k
        self.moved = [False] * self.k

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the C handles (the executor's snapshot): :meth:`reopen` opens them again."""
        return {**self.__dict__, "handles": [None] * self.k, "opened": [h is not None for h in self.handles]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def reopen(self, closes: np.ndarray) -> None:
        """After unpickling: each phase's handle opened again on its whole series of ``closes`` (every close fed so
        far), which is where the updated handle was (TA-Lib's contract)."""
        for p, opened in enumerate(self.__dict__.pop("opened", [])):
            if opened:
                self.handles[p] = stream.RSI(np.ascontiguousarray(closes[p :: self.k]), timeperiod=RSI_PERIOD)

    def step(self, t: int, close: float) -> float:
        p = t % self.k
        last = self.last[p]
        if last is not None and close != last:
            self.moved[p] = True
        self.last[p] = close
        handle = self.handles[p]
        if handle is None:
            series = self.pending[p]
            series.append(close)
            if len(series) <= RSI_PERIOD:  # strided_rsi: a phase needs more than `period` closes
                return NAN
            self.handles[p] = handle = stream.RSI(np.asarray(series), timeperiod=RSI_PERIOD)
            self.pending[p] = []
            value = float(handle.value)
        else:
            value = float(handle.update(close))
        return value if self.moved[p] else 50.0


# ---- the double top / bottom of the newest window ------------------------------------------------


def double_top_bottom_last(high: np.ndarray, low: np.ndarray, close: float, atr: float, m: int) -> tuple[float, float]:
    """``features.llm_features.double_top_bottom`` at the newest bar only: ``high`` and ``low`` are the
    last ``m`` bars, ``close`` and ``atr`` the newest bar's. The same argmax / argmin (first of equals),
    extrema and comparisons on the same float64 values, so the same flags (NaN while ``atr`` is)."""
    if atr != atr:
        return NAN, NAN
    half = m // 2
    p1 = int(high[:half].argmax())
    p2 = half + int(high[half:].argmax())
    t1, t2 = float(high[p1]), float(high[p2])
    trough = float(low[p1 + 1 : p2].min()) if p2 > p1 + 1 else math.inf
    peak = min(t1, t2) if t1 == t1 and t2 == t2 else NAN
    depth = DOUBLE_DEPTH_ATR * atr
    top = abs(t1 - t2) <= DOUBLE_TOLERANCE_ATR * atr and trough <= peak - depth and close <= peak - depth
    q1 = int(low[:half].argmin())
    q2 = half + int(low[half:].argmin())
    b1, b2 = float(low[q1]), float(low[q2])
    crest = float(high[q1 + 1 : q2].max()) if q2 > q1 + 1 else -math.inf
    floor = max(b1, b2) if b1 == b1 and b2 == b2 else NAN
    bottom = abs(b1 - b2) <= DOUBLE_TOLERANCE_ATR * atr and crest >= floor + depth and close >= floor + depth
    return float(top), float(bottom)
