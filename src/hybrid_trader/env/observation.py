"""The observation vector: where each named feature group sits, and how the env fills it.

Slices come from the feature groups of :mod:`hybrid_trader.features.names` (the one
definition of the layout; ``docs/FEATURES.md`` is generated from it)::

    [ window | position | flags ]                         phases 1-2
    [ window | position | flags | market | risk ]         phase 3
"""

from __future__ import annotations

import numpy as np

from hybrid_trader.env.account import PropFirmAccount
from hybrid_trader.env.broker import Broker
from hybrid_trader.features.names import (
    BAR_FEATURE_NAMES,
    FLAG_FEATURE_NAMES,
    MARKET_FEATURE_NAMES,
    POSITION_FEATURE_NAMES,
    RISK_FEATURE_NAMES,
    WINDOW,
)


def _slices(*groups: tuple[str, int]) -> dict[str, slice]:
    out, start = {}, 0
    for name, size in groups:
        out[name] = slice(start, start + size)
        start += size
    return out


GROUP_SLICES: dict[str, slice] = _slices(
    ("window", WINDOW * len(BAR_FEATURE_NAMES)),
    ("position", len(POSITION_FEATURE_NAMES)),
    ("flags", len(FLAG_FEATURE_NAMES)),
    ("market", len(MARKET_FEATURE_NAMES)),
    ("risk", len(RISK_FEATURE_NAMES)),
)
"""Slice of each feature group in the observation."""
WINDOW_SLICE = GROUP_SLICES["window"]
POSITION_SLICE = GROUP_SLICES["position"]
FLAGS_SLICE = GROUP_SLICES["flags"]
MARKET_SLICE = GROUP_SLICES["market"]
RISK_SLICE = GROUP_SLICES["risk"]
BASE_DIM = FLAGS_SLICE.stop
"""228: window, position and flags (phases 1-2)."""
LLM_DIM = RISK_SLICE.stop - BASE_DIM
"""33: the market and risk features added in phase 3."""
WINDOW_DIM = WINDOW_SLICE.stop

# Single entries, by name (the hot loop writes scalars).
_POS = {n: POSITION_SLICE.start + i for i, n in enumerate(POSITION_FEATURE_NAMES)}
_FLAG = {n: FLAGS_SLICE.start + i for i, n in enumerate(FLAG_FEATURE_NAMES)}
I_POSITION = _POS["position"]
I_ENTRY_DIST = _POS["entry_dist_atr"]
I_STOP_DIST = _POS["stop_dist_atr"]
I_TARGET_DIST = _POS["target_dist_atr"]
I_TIME_IN_POSITION = _POS["time_in_position"]
I_CAN_ENTER = _FLAG["can_enter"]
I_CAN_MANAGE = _FLAG["can_manage"]
I_HAS_POSITION = _FLAG["has_position"]


def obs_dim(phase: int) -> int:
    """Observation length in a phase (228 in phases 1-2, 261 in phase 3)."""
    return BASE_DIM + (LLM_DIM if phase == 3 else 0)


class ObservationBuilder:
    """Fills one reusable float32 buffer at bar t and returns a copy.

    ``windows[t - WINDOW + 1]`` is the 20-bar window ending at bar t and ``llm_market[t]``
    the 28 market features of bar t (both from the feature set); the position, flags and
    risk features come from the broker, the action mask and the account.
    """

    def __init__(self, phase: int, windows: np.ndarray, llm_market: np.ndarray, atr: list[float],
                 close: list[float], trailing_allowance: float) -> None:
        self.phase = phase
        self.dim = obs_dim(phase)
        self._buf = np.zeros(self.dim, dtype=np.float32)
        self._windows = windows
        self._llm_market = llm_market
        self._atr = atr
        self._close = close
        self._allowance = trailing_allowance

    def rebind(self, windows: np.ndarray, llm_market: np.ndarray) -> None:
        """Read the window and market features from new arrays (the executor's grown buffers)."""
        self._windows = windows
        self._llm_market = llm_market

    def build(self, t: int, broker: Broker, mask: np.ndarray, manage_actions: bool, account: PropFirmAccount,
              equity: float) -> np.ndarray:
        """The observation at the close of bar t."""
        obs = self._buf
        obs[WINDOW_SLICE] = self._windows[t - (WINDOW - 1)]
        side = broker.side
        if side:
            atr = self._atr[t]
            c = self._close[t]
            target = broker.target
            obs[I_POSITION] = side
            obs[I_ENTRY_DIST] = side * (c - broker.entry) / atr
            obs[I_STOP_DIST] = side * (c - broker.stop) / atr
            obs[I_TARGET_DIST] = side * (target - c) / atr if target == target else 0.0
            obs[I_TIME_IN_POSITION] = (t - broker.entry_index + 1) / 60.0
        else:
            obs[POSITION_SLICE] = 0.0
        obs[I_CAN_ENTER] = mask[1]
        # three scalar reads cost a third of a slice's .any() (a ufunc reduce), every step
        obs[I_CAN_MANAGE] = bool(mask[3] or mask[4] or mask[5]) if manage_actions else 0.0
        obs[I_HAS_POSITION] = side != 0
        if self.phase == 3:
            obs[MARKET_SLICE] = self._llm_market[t]
            obs[RISK_SLICE] = self.risk_features(broker, account, equity)
        return obs.copy()

    def risk_features(
        self, broker: Broker, account: PropFirmAccount, equity: float
    ) -> tuple[float, float, float, float, float]:
        """The 5 risk features (``names.RISK_FEATURES``, scaled to about [-1, 1])."""
        allowance = self._allowance
        upnl = (equity - account.balance) / allowance
        drawdown = (account.peak - equity) / allowance
        losses = min(account.consecutive_losses, 10) / 5.0
        win_rate = account.recent_win_rate
        win_rate = 0.5 if win_rate != win_rate else win_rate
        mae_mfe = min(broker.mae / (broker.mfe + 1e-9), 10.0) / 10.0 if broker.side else 0.0
        return (upnl, drawdown, losses, win_rate, mae_mfe)

