"""Tiny hand-made markets for exact, hand-computed environment tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from hybrid_trader.data.bars import Bars

WARMUP = 19


@dataclass
class StubFeatures:
    """A FeatureSet stand-in with a constant ATR, so that stops are easy to compute by hand."""

    bar: np.ndarray
    llm_market: np.ndarray
    atr: np.ndarray
    warmup: int = WARMUP
    raw: dict = field(default_factory=dict)

    @property
    def windows(self) -> np.ndarray:
        return sliding_window_view(self.bar, (20, 11)).reshape(-1, 220)


def make_bars(rows: list[tuple[str, float, float, float, float]], market: str = "NQ") -> Bars:
    """Bars from (time 'YYYY-mm-dd HH:MM' ET, open, high, low, close), volume 100."""
    idx = pd.DatetimeIndex([pd.Timestamp(r[0]) for r in rows]).tz_localize("America/New_York")
    frame = pd.DataFrame(
        {"open": [r[1] for r in rows], "high": [r[2] for r in rows], "low": [r[3] for r in rows],
         "close": [r[4] for r in rows], "volume": 100.0},
        index=idx,
    )
    return Bars(frame, market=market, bar_minutes=1, source="test")


def flat_session(day: str = "2024-01-03", start: str = "09:00", n: int = 60, price: float = 100.0) -> list[tuple]:
    """n one-minute bars from `start` on `day`, all OHLC = price."""
    t0 = pd.Timestamp(f"{day} {start}")
    return [((t0 + pd.Timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M"), price, price, price, price) for i in range(n)]


def stub_features(bars: Bars, atr: float = 4.0) -> StubFeatures:
    n = len(bars)
    bar = np.zeros((n, 11), dtype=np.float32)
    bar[:, 0] = np.arange(n, dtype=np.float32)  # lets tests see which bar a window ends on
    return StubFeatures(bar=bar, llm_market=np.zeros((n, 28), np.float32), atr=np.full(n, float(atr)))


def set_bar(rows: list[tuple], hhmm: str, o: float, h: float, lo: float, c: float) -> None:
    for i, r in enumerate(rows):
        if r[0].endswith(hhmm):
            rows[i] = (r[0], o, h, lo, c)
            return
    raise KeyError(hhmm)
