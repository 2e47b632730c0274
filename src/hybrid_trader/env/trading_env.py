"""The trading environment: one futures contract, minute bars, prop-firm rules.

``TradingEnv`` is a Gymnasium environment over three parts: the broker (``broker.py``),
the prop-firm account (``account.py``) and the observation builder (``observation.py``).
Its docstring is its manual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd

from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.data.bars import Bars
from hybrid_trader.env.account import RECENT_HISTORY, RECENT_TRADES
from hybrid_trader.env.broker import (
    EXIT_BREACH,
    EXIT_BREAKEVEN,
    EXIT_DAILY_LOSS,
    EXIT_SESSION_END,
    EXIT_STOP,
    EXIT_TARGET,
    EXIT_TRAIL,
    TRADE_LOG_COLUMNS,
    Trade,
    trades_frame,
)
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.core import CoreSeries, CoreViews, TradingCore
from hybrid_trader.env.day_window import MIN_EPISODE_BARS, DayWindow, EpisodeWindow
from hybrid_trader.env.observation import BASE_DIM, LLM_DIM, WINDOW_DIM
from hybrid_trader.env.reward import make_reward
from hybrid_trader.env.risk_veto import RiskVeto
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError
from hybrid_trader.markets import ContractSpec, get_contract

__all__ = [
    "BASE_DIM", "END_BREACH", "END_DATA", "END_EPISODE", "EXIT_BREACH", "EXIT_BREAKEVEN", "EXIT_DAILY_LOSS",
    "EXIT_SESSION_END", "EXIT_STOP", "EXIT_TARGET", "EXIT_TRAIL", "LLM_DIM", "RECENT_HISTORY", "RECENT_TRADES",
    "TRADE_LOG_COLUMNS", "WINDOW_DIM", "EpisodeWindow", "Trade", "TradingEnv",
]

OBS_BOUND = 1e4
"""Observation space bounds (features are scaled to about [-10, 10])."""

# Episode end reasons.
END_BREACH = "BREACH"
END_EPISODE = "EPISODE_END"
END_DATA = "DATA_END"

# What a phase 3 step's info carries for the advisor (TradingEnv.advisor_info), under that key.
ADVISOR_ACCOUNT = "advisor_account"
"""The account snapshot (``AccountState``): what the query policy, the prompts and a teacher read."""
ADVISOR_MASK = "advisor_mask"
"""The legal actions only (a tuple of bools): all an always-on student without a teacher reads."""
ADVISOR_NOTHING = "advisor_nothing"
"""Nothing (never a key of the info): the vectorised environment records the legal actions with the observations
(``training.vec_env.LeanDummyVecEnv.masks``), where the always-on student without a teacher reads them."""


class TradingEnv(CoreViews, gym.Env):
    """Trade one futures contract on minute bars under prop-firm rules.

    **Time.** Each step is one bar. The agent sees the state at the *close* of bar t
    and its order fills at the *open* of bar t+1, plus slippage. Stops, targets and
    trailing stops are then checked against bar t+1's high and low; when one bar
    touches both stop and target, the stop wins; a bar that opens beyond a stop or
    target fills at its open. An episode covers the trading window
    (``trade_start``..``trade_end``, US/Eastern) of ``episode_sessions`` consecutive
    sessions starting on a random day (``episode_sessions=None``: every session of
    the split in order, as evaluation does). Open positions are closed at the close of
    the last bar of each day's window (``SESSION_END``), which is never later than the
    rules' flat-by time (16:59 ET for Apex), nor on the exchange calendar's early closes
    (``env.calendar``: 12:59 ET on 2024-11-29). Only what is known at a bar decides there:
    on a day whose bars stop before its window's end (a data gap, an early close the
    calendar lacks), the agent decides on the last bar as on any other; the position is
    then closed at its close and the entry decided on it dropped (``env/day_window.py``).

    **Observation** (float32). Phases 1-2: 228 values; phase 3: 261.

    ============  =====  ==========================================================
    index         count  content (names: ``hybrid_trader.features.FEATURE_NAMES``)
    ============  =====  ==========================================================
    0-219         220    last 20 bars x 11 per-bar features, oldest bar first
    220-224       5      position (-1/0/1), entry distance, stop distance,
                         target distance [ATR], time in position [bars/60]
    225-227       3      flags: can enter, can manage, has position
    228-255       28     phase 3: market context, multi-timeframe, pattern features
    256-260       5      phase 3: unrealised PnL and drawdown [share of the trailing
                         allowance], consecutive losses / 5, recent win rate,
                         MAE/MFE ratio of the open trade
    ============  =====  ==========================================================

    **Actions** (``Discrete(3)`` in phase 1, ``Discrete(6)`` otherwise) and masks
    (``action_masks()``; a masked action is executed as HOLD and counted in
    ``info["invalid_actions"]``; MaskablePPO never samples one):

    ==  ==============  =========================================================
    id  action          legal when
    ==  ==============  =========================================================
    0   HOLD            always
    1   BUY             flat, inside the entry window (before ``last_entry``), not
                        breached or locked for the day, not vetoed
    2   SELL            same as BUY
    3   MOVE_SL_TO_BE   in a position whose stop is not already at or past the
                        entry and whose price (close) is beyond the entry
    4   ENABLE_TRAIL    in a position with the trail off
    5   DISABLE_TRAIL   in a position with the trail on
    ==  ==============  =========================================================

    Phase 1 has actions 0-2 only: a position is managed by its fixed ATR stop and
    target. Entries set the stop ``stop_atr`` x ATR and the target ``target_atr`` x
    ATR from the fill (ATR of the decision bar).

    **Reward** (``env.reward``). ``r_t``, the P&L reward, is the change of account
    equity (balance plus open profit, net of commissions and slippage) over the step,
    in units of ``reward_scale`` dollars. Every reward then subtracts
    ``breach_penalty`` on a breach (``env/reward.py`` holds the formulas):

    ========  ==============================================================================
    reward    the step's reward before the breach penalty
    ========  ==============================================================================
    pnl       ``r_t`` (the default): an episode's rewards add up to its net PnL
    prop      ``r_t`` + ``prop_target_bonus`` on the step the profit target is reached (once
              an episode) - ``prop_threshold_penalty`` x ``min(1, max(0, 1 - g_t /
              prop_threshold_zone))``, ``g_t`` = (equity - threshold) / trailing drawdown at
              the step's close: 0 while more than the zone's share of the allowance is
              left, the full penalty at the threshold
    sharpe    ``sharpe_scale`` x ``D_t``, the differential Sharpe ratio (Moody and Saffell)
              of the ``r_t``: ``D_t = (B dA - A dB / 2) / (B - A^2)^1.5`` with ``A``, ``B``
              the moving mean and second moment (rate ``sharpe_eta``, 0 at each reset)
              before the step, ``dA = r_t - A``, ``dB = r_t^2 - B``; clipped to +-10
    ========  ==============================================================================

    **Termination**: ``terminated`` when the prop-firm threshold is breached (and
    ``terminate_on_breach``); ``truncated`` at the end of the episode's last
    session or of the data. At the end ``info`` holds ``trades`` (the trade log, one
    dict per trade), ``end_reason`` (``BREACH``, ``EPISODE_END``, ``DATA_END``) and
    ``account`` (balance, threshold, peak, breach and target bar indices, the account's
    final ``status`` and ``verdict`` and its ``events``: bar, reason code, state).

    The prop-firm threshold is evaluated conservatively within a bar: the peak uses
    the bar's favourable extreme and the breach check its adverse extreme.

    **Parts.** The env is a Gymnasium adapter over :class:`~hybrid_trader.env.broker.Broker`
    (fills, stops, costs, trades), :class:`~hybrid_trader.env.account.PropFirmAccount`
    (the rules and the account's states) and
    :class:`~hybrid_trader.env.observation.ObservationBuilder` (the layout above);
    the optional :class:`~hybrid_trader.env.risk_veto.RiskVeto` masks risk-adding actions.
    """


    metadata = {"render_modes": []}

    def __init__(
        self,
        bars: Bars,
        features: Any = None,
        config: EnvConfig | None = None,
        *,
        sessions: Sequence[int] | None = None,
        risk_veto: RiskVeto | None = None,
    ) -> None:
        super().__init__()
        self.config = cfg = config or EnvConfig()
        if features is None:
            # compute_features loads TA-Lib; an env built on precomputed features must not pay for it.
            from hybrid_trader.features import compute_features

            features = compute_features(bars)
        if len(features.bar) != len(bars):
            raise ValueError("features were computed on other bars (length differs)")
        self.bars = bars
        self.features = features
        self.phase = cfg.phase
        self.contract: ContractSpec = get_contract(cfg.market or bars.market)
        atr = np.asarray(features.atr, dtype=np.float64)
        # Hot-loop data as Python lists (fast scalar indexing).
        self._open = bars.open.tolist()
        self._high = bars.high.tolist()
        self._low = bars.low.tolist()
        self._close = bars.close.tolist()
        self._atr = atr.tolist()
        self.core = TradingCore.build(cfg, self.contract, CoreSeries(self._open, self._high, self._low, self._close,
                                                                     self._atr, features.windows, features.llm_market),
                                      risk_veto)
        self.rules: PropFirmRules = self.account.rules
        self.observer = self.core.observer

        # Costs and scales.
        if cfg.reward_scale is None:  # the median ATR of the days it trades: never a later day's volatility
            median_atr = float(np.median(self._traded(atr, sessions, features.warmup)))
            self.reward_scale = max(median_atr, self.contract.tick_size) * self.broker.dollars_per_point
        else:
            self.reward_scale = float(cfg.reward_scale)
        self._reward = make_reward(cfg, self.account)
        """The step's reward from the P&L reward (``env.reward``; None: ``pnl``, the P&L reward itself)."""

        # Trading windows per session.
        self.day_window = DayWindow.of(cfg, self.account, bars.bar_minutes)
        """The trading day's window (``env.day_window``: the executor reads the same)."""
        self._windows_by_session = self._build_windows(sessions)
        if not self._windows_by_session:
            raise UserError(
                f"no session of {bars.source} has at least {MIN_EPISODE_BARS} bars inside the trading window "
                f"{cfg.trade_start}-{cfg.trade_end} ET after the {features.warmup}-bar feature warm-up",
                fix="check the data's time zone (--tz, --time-shift) or widen env.trade_start/trade_end",
            )
        self.n_actions = self.core.n_actions
        self.obs_dim = self.observer.dim
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self.observation_space = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, shape=(self.obs_dim,), dtype=np.float32)
        n = len(bars)
        self.equity_history = np.full(n, np.nan)
        self.position_history = np.zeros(n, dtype=np.int8)
        self.level_history: np.ndarray | None = None
        """Per bar (after :meth:`keep_levels`): the stop and target in force after it [points] (NaN when flat)
        and the account's trailing threshold [$]; None otherwise (training does not pay for it)."""
        self.action_history: np.ndarray | None = None
        """Per bar (after :meth:`keep_levels`): the action decided at its close (-1: none)."""
        self._episode: list[EpisodeWindow] = []
        self._day = 0
        self.advisor_info = ADVISOR_ACCOUNT
        """Phase 3: what each step's ``info`` carries for the advisor: ``advisor_account`` (the account
        snapshot, default) or ``advisor_mask`` (the legal actions only: what an always-on student reads)."""

    # ------------------------------------------------------------------ set-up
    def keep_levels(self) -> None:
        """Also keep, per bar, the stop, target and threshold and the action decided (evaluation's charts read them)."""
        n = len(self.bars)
        self.level_history = np.full((n, 3), np.nan)
        self.action_history = np.full(n, -1, dtype=np.int8)

    def _traded(self, values: np.ndarray, sessions: Sequence[int] | None, warmup: int) -> np.ndarray:
        """``values`` on the bars of ``sessions`` (None: every bar) after the feature warm-up (all of them when
        none is left)."""
        keep = np.arange(len(values)) >= warmup
        if sessions is not None:
            keep &= np.isin(self.bars.session_id, np.asarray(list(sessions), dtype=np.int64))
        return values[keep] if keep.any() else values

    def _build_windows(self, sessions: Sequence[int] | None) -> list[EpisodeWindow]:
        return self.day_window.sessions(self.bars, int(self.features.warmup), sessions)

    @property
    def episode_windows(self) -> list[EpisodeWindow]:
        """The trading windows (one per usable session) episodes are drawn from."""
        return list(self._windows_by_session)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        wins = self._windows_by_session
        k = self.config.episode_sessions
        if "start" in options and not 0 <= int(options["start"]) < len(wins):
            raise ValueError(f"options['start'] {options['start']} is not a trading day of this environment "
                             f"(0 to {len(wins) - 1}; see episode_windows)")
        if k is None:
            start = int(options.get("start", 0))
            self._episode = wins[start:]
        else:
            k = min(k, len(wins))
            if "start" in options:
                start = int(options["start"])
            else:
                start = int(self.np_random.integers(0, len(wins) - k + 1))
            self._episode = wins[start : start + k]
        self._day = 0
        self.account.reset()
        self.broker.reset()
        self.core.reset_counts()
        if self._reward is not None:
            self._reward.reset()
        self.equity_history[:] = np.nan
        self.position_history[:] = 0
        if self.level_history is not None and self.action_history is not None:
            self.level_history[:] = np.nan
            self.action_history[:] = -1
        self._begin_day()
        obs = self._observe()
        return obs, (self._advisor_info({}) if self.phase == 3 else {})

    def _begin_day(self) -> None:
        w = self._episode[self._day]
        core = self.core
        core.t = w.first
        self._win_last = w.last
        self._end_known = w.end_known
        core.last_entry = w.last_entry
        self.account.begin_day(w.first)
        self._record(w.first)

    def step(self, action):
        a = int(action)
        if not (0 <= a < self.n_actions):
            raise ValueError(
                f"action {a} is outside Discrete({self.n_actions}) ({', '.join(ACTION_NAMES[: self.n_actions])})"
            )
        core = self.core
        equity_before = core.equity_now  # recorded at the end of the last step (or reset): nothing moved it since
        if self.action_history is not None:
            self.action_history[core.t] = a
        pending = core.apply(a)  # a masked action is executed as HOLD and counted (MaskablePPO never samples one)
        t = core.t + 1
        if t <= self._win_last:
            day_over = t == self._win_last and self._end_known
            breach = core.process_bar(t, pending, day_over)
        else:  # decided on the window's last bar as a trader would, not knowing it was: closed, the entry dropped
            t -= 1
            day_over = True
            breach = core.close_missed_window()
        terminated = breach and self.config.terminate_on_breach
        reward = (self._record(t) - equity_before) / self.reward_scale
        if self._reward is not None:
            reward = self._reward(reward, core.equity_now)
        if breach:
            reward -= self.config.breach_penalty

        truncated = False
        end_reason = None
        if terminated:
            end_reason = END_BREACH
        elif day_over:
            if self._day + 1 < len(self._episode):
                self._day += 1
                self._begin_day()
            else:
                truncated = True
                last_window = self._episode[-1] is self._windows_by_session[-1]
                end_reason = END_DATA if last_window else END_EPISODE
        info: dict[str, Any] = {}
        if terminated or truncated:
            info = self.episode_info(end_reason)
        obs = self._observe()
        if self.phase == 3:
            self._advisor_info(info)
        return obs, float(reward), terminated, truncated, info

    def set_advisor_info(self, kind: str) -> None:
        """Choose what phase 3 infos carry for the advisor: ``ADVISOR_ACCOUNT``, ``ADVISOR_MASK`` or
        ``ADVISOR_NOTHING``."""
        if kind not in (ADVISOR_ACCOUNT, ADVISOR_MASK, ADVISOR_NOTHING):
            raise ValueError(f"advisor_info {kind!r} is none of {ADVISOR_ACCOUNT!r}, {ADVISOR_MASK!r}, "
                             f"{ADVISOR_NOTHING!r}")
        self.advisor_info = kind

    def _advisor_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Phase 3: ``info`` with what the advisor reads of this step (:attr:`advisor_info`)."""
        if self.advisor_info == ADVISOR_MASK:
            info[ADVISOR_MASK] = tuple(self.core.mask.tolist())  # no snapshot built: a mask is all it reads
        elif self.advisor_info == ADVISOR_ACCOUNT:
            info[ADVISOR_ACCOUNT] = self.account_snapshot()
        return info

    # ------------------------------------------------------------------ state
    def equity(self) -> float:
        """Balance plus open profit at the current bar's close [$]."""
        return self.core.equity()

    def _record(self, t: int) -> float:
        """Keep bar t's equity and position; returns the equity (the step's reward reads it).

        The equity is also kept in ``core.equity_now`` until the next record: the next step's
        starting equity and the observation's risk features read it instead of computing it again.
        """
        equity = self.core.record()
        self.equity_history[t] = equity
        broker = self.core.broker  # an attribute, not the property: every step reads it
        self.position_history[t] = broker.side * broker.qty
        levels = self.level_history
        if levels is not None:
            if broker.side:
                levels[t, 0] = broker.stop
                levels[t, 1] = broker.target
            else:
                levels[t, :2] = np.nan
            levels[t, 2] = self.account.threshold
        return equity

    def _observe(self) -> np.ndarray:
        return self.core.observe()

    # ------------------------------------------------------------------ read-only views
    @property
    def risk_veto(self) -> RiskVeto | None:
        """The risk veto masking risk-adding actions (None: none); settable."""
        return self.core.risk_veto

    @risk_veto.setter
    def risk_veto(self, veto: RiskVeto | None) -> None:
        self.core.risk_veto = veto

    # ------------------------------------------------------------------ reporting
    def trade_log(self) -> pd.DataFrame:
        """The trades so far with ET timestamps (built outside the hot loop; columns ``TRADE_LOG_COLUMNS``)."""
        return trades_frame(self.broker.trades, self.bars.frame.index, self.bars.bar_minutes)

    def episode_info(self, end_reason: str | None) -> dict[str, Any]:
        return {
            "end_reason": end_reason,
            "trades": list(self.broker.trades),
            "account": self.account.summary(self._day + 1),
            "episode_bars": int(np.count_nonzero(~np.isnan(self.equity_history))),
            "invalid_actions": self.invalid_actions,
            "veto_counts": dict(self.veto_counts),
            "veto_steps": self.veto_steps,
            "decision_steps": self.decision_steps,
        }
