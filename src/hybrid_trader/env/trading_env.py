"""The trading environment: one futures contract, minute bars, prop-firm rules.

``TradingEnv`` is a Gymnasium environment. Its docstring is its manual.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import pandas as pd

from hybrid_trader.data.bars import Bars
from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import ACTION_NAMES, Action, n_actions
from hybrid_trader.env.config import EnvConfig, parse_hhmm
from hybrid_trader.env.rules import PropFirmRules, get_rules
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import BAR_FEATURE_NAMES, BASE_FEATURE_NAMES, LLM_FEATURE_NAMES, WINDOW
from hybrid_trader.markets import ContractSpec, get_contract

SESSION_OPEN_MINUTE = 18 * 60
"""Globex sessions open at 18:00 ET."""
BASE_DIM = len(BASE_FEATURE_NAMES)
"""228: the 20-bar window, the position features and the flags (phases 1-2)."""
LLM_DIM = len(LLM_FEATURE_NAMES)
"""33: added in phase 3."""
WINDOW_DIM = WINDOW * len(BAR_FEATURE_NAMES)
MIN_EPISODE_BARS = 10
"""Sessions whose trading window holds fewer bars are not used as episodes."""
RECENT_TRADES = 10
"""Trades in the recent win-rate feature."""
RECENT_HISTORY = 100
OBS_BOUND = 1e4
"""Observation space bounds (features are scaled to about [-10, 10])."""
"""Trades in the recent win-rate statistic."""

# Exit reason codes, greppable in trade logs and reports.
EXIT_STOP = "STOP"
EXIT_TARGET = "TARGET"
EXIT_TRAIL = "TRAIL_STOP"
EXIT_BREAKEVEN = "BREAKEVEN_STOP"
EXIT_SESSION_END = "SESSION_END"
EXIT_BREACH = "BREACH_LIQUIDATION"
EXIT_DAILY_LOSS = "DAILY_LOSS_LIMIT"

# Episode end reasons.
END_BREACH = "BREACH"
END_EPISODE = "EPISODE_END"
END_DATA = "DATA_END"

TRADE_COLUMNS = (
    "entry_index", "exit_index", "side", "contracts", "entry_price", "exit_price",
    "gross_pnl", "costs", "net_pnl", "bars_held", "exit_reason", "exit_at_close",
)


def session_minute(minute_of_day: np.ndarray | int) -> np.ndarray | int:
    """Minutes since the Globex session open (18:00 ET) for a minute of the ET day."""
    return (minute_of_day - SESSION_OPEN_MINUTE) % 1440


@dataclass(frozen=True)
class EpisodeWindow:
    """Bar indices of one session's trading window."""

    session: int
    first: int
    last: int
    last_entry: int
    """Last bar whose close may decide an entry (-1: none)."""


class TradingEnv(gym.Env):
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
    rules' flat-by time (16:59 ET for Apex).

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

    **Reward**: the change of account equity (balance plus open profit, net of
    commissions and slippage) over the step, in units of ``reward_scale`` dollars,
    minus ``breach_penalty`` on a breach.

    **Termination**: ``terminated`` when the prop-firm threshold is breached (and
    ``terminate_on_breach``); ``truncated`` at the end of the episode's last
    session or of the data. At the end ``info`` holds ``trades`` (the trade log, one
    dict per trade), ``end_reason`` (``BREACH``, ``EPISODE_END``, ``DATA_END``) and
    ``account`` (balance, threshold, peak, breach and target bar indices).

    The prop-firm threshold is evaluated conservatively within a bar: the peak uses
    the bar's favourable extreme and the breach check its adverse extreme.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        bars: Bars,
        features: Any = None,
        config: EnvConfig | None = None,
        *,
        sessions: Sequence[int] | None = None,
        risk_veto: Any = None,
    ) -> None:
        super().__init__()
        self.config = cfg = config or EnvConfig()
        if features is None:
            from hybrid_trader.features import compute_features

            features = compute_features(bars)
        if len(features.bar) != len(bars):
            raise ValueError("features were computed on other bars (length differs)")
        self.bars = bars
        self.features = features
        self.phase = cfg.phase
        self.contract: ContractSpec = get_contract(cfg.market or bars.market)
        self.rules: PropFirmRules = get_rules(cfg.rules, cfg.account, **cfg.rules_overrides)
        minis = cfg.contracts / 10 if self.contract.is_micro else cfg.contracts
        if minis > self.rules.max_contracts:
            raise UserError(
                f"env.contracts: {cfg.contracts} {self.contract.symbol} exceeds the {self.rules.name} limit "
                f"of {self.rules.max_contracts} mini contracts",
                fix=f"trade at most {self.rules.max_contracts * (10 if self.contract.is_micro else 1)} contracts",
            )
        self.risk_veto = risk_veto

        # Costs and scales.
        self.point_value = self.contract.point_value
        self.qty = cfg.contracts
        self.dollars_per_point = self.point_value * cfg.contracts
        commission = self.contract.commission_per_side if cfg.commission_per_side is None else cfg.commission_per_side
        self.commission = float(commission) * cfg.contracts
        self.slip = float(cfg.slippage_ticks) * self.contract.tick_size
        atr = np.asarray(features.atr, dtype=np.float64)
        if cfg.reward_scale is None:
            median_atr = float(np.median(atr[features.warmup:])) if len(atr) > features.warmup else float(np.median(atr))
            self.reward_scale = max(median_atr, self.contract.tick_size) * self.dollars_per_point
        else:
            self.reward_scale = float(cfg.reward_scale)

        # Hot-loop data as Python lists (fast scalar indexing) and the window view.
        self._open = bars.open.tolist()
        self._high = bars.high.tolist()
        self._low = bars.low.tolist()
        self._close = bars.close.tolist()
        self._atr = atr.tolist()
        self._windows = features.windows
        self._llm_market = features.llm_market

        # Trading windows per session.
        self._windows_by_session = self._build_windows(sessions)
        if not self._windows_by_session:
            raise UserError(
                f"no session of {bars.source} has at least {MIN_EPISODE_BARS} bars inside the trading window "
                f"{cfg.trade_start}-{cfg.trade_end} ET after the {features.warmup}-bar feature warm-up",
                fix="check the data's time zone (--tz, --time-shift) or widen env.trade_start/trade_end",
            )
        self.n_actions = n_actions(cfg.phase)
        self.obs_dim = BASE_DIM + (LLM_DIM if cfg.phase == 3 else 0)
        self.action_space = gym.spaces.Discrete(self.n_actions)
        self.observation_space = gym.spaces.Box(-OBS_BOUND, OBS_BOUND, shape=(self.obs_dim,), dtype=np.float32)
        self._obs = np.zeros(self.obs_dim, dtype=np.float32)
        self._mask = np.zeros(self.n_actions, dtype=bool)
        n = len(bars)
        self.equity_history = np.full(n, np.nan)
        self.position_history = np.zeros(n, dtype=np.int8)
        self._episode: list[EpisodeWindow] = []
        self._t = -1

    # ------------------------------------------------------------------ set-up
    def _build_windows(self, sessions: Sequence[int] | None) -> list[EpisodeWindow]:
        cfg = self.config
        start = session_minute(parse_hhmm(cfg.trade_start, "trade_start"))
        end = session_minute(parse_hhmm(cfg.trade_end, "trade_end")) or 1440
        flat_by = session_minute(parse_hhmm(self.rules.flat_by, "flat_by")) or 1440
        end = min(end, flat_by)
        last_entry = session_minute(parse_hhmm(cfg.last_entry, "last_entry")) or 1440
        sm = session_minute(self.bars.minute_of_day.astype(np.int64))
        first_valid = max(int(self.features.warmup), WINDOW - 1)
        bounds = self.bars.session_bounds
        chosen = range(len(bounds)) if sessions is None else sessions
        out = []
        for s in chosen:
            lo, hi = int(bounds[s, 0]), int(bounds[s, 1])
            idx = np.arange(max(lo, first_valid), hi + 1)
            if len(idx) == 0:
                continue
            m = sm[idx]
            inside = idx[(m >= start) & (m < end)]
            if len(inside) < MIN_EPISODE_BARS:
                continue
            # Entries need a later bar inside the window to fill on.
            entry_ok = inside[:-1][sm[inside[:-1]] <= last_entry]
            out.append(EpisodeWindow(int(s), int(inside[0]), int(inside[-1]), int(entry_ok[-1]) if len(entry_ok) else -1))
        return out

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
        self._reset_account()
        self._begin_day()
        obs = self._observe()
        return obs, ({"advisor_account": self.account_snapshot()} if self.phase == 3 else {})

    def _reset_account(self) -> None:
        r = self.rules
        self.balance = float(r.account_size)
        self.peak = self.balance
        self.threshold = r.initial_threshold
        self.breached = False
        self.breach_index = -1
        self.target_index = -1
        self._side = 0
        self._entry = 0.0
        self._raw_entry = 0.0
        self._stop = 0.0
        self._target = math.nan
        self._trail_on = False
        self._trail_dist = 0.0
        self._best = 0.0
        self._entry_index = -1
        self._mae = 0.0
        self._mfe = 0.0
        self.trades: list[tuple] = []
        self.consecutive_losses = 0
        self._recent: deque[int] = deque(maxlen=RECENT_HISTORY)
        self._recent_win_rate = math.nan  # over the last RECENT_TRADES, kept at each exit (read every step)
        self.veto_counts: dict[str, int] = {}
        self.veto_steps = 0
        self._last_exit_index = -1
        self.decision_steps = 0
        self._vetoed = False
        self.invalid_actions = 0
        self.equity_history[:] = np.nan
        self.position_history[:] = 0

    def _begin_day(self) -> None:
        w = self._episode[self._day]
        self._t = w.first
        self._day_first = w.first
        self._win_last = w.last
        self._last_entry = w.last_entry
        self._day_start_balance = self.balance
        self._day_locked = False
        self._record(self._t)

    def step(self, action):
        a = int(action)
        if not (0 <= a < self.n_actions):
            raise ValueError(f"action {a} is outside Discrete({self.n_actions}) ({', '.join(ACTION_NAMES[: self.n_actions])})")
        if not self._mask[a]:
            # A masked action is executed as HOLD and counted (MaskablePPO never samples one).
            self.invalid_actions += 1
            a = 0
        equity_before = self.equity()
        t = self._t
        pending = 0
        if a == Action.BUY:
            pending = 1
        elif a == Action.SELL:
            pending = -1
        elif a == Action.MOVE_SL_TO_BE:
            self._stop = self._entry
        elif a == Action.ENABLE_TRAIL:
            self._trail_on = True
            self._trail_dist = self.config.trail_atr * self._atr[t]
            c = self._close[t]
            self._best = c
            self._tighten_stop(c - self._side * self._trail_dist)
        elif a == Action.DISABLE_TRAIL:
            self._trail_on = False

        t += 1
        self._t = t
        breach = self._process_bar(t, pending)
        terminated = breach and self.config.terminate_on_breach
        day_over = t >= self._win_last
        if day_over and not terminated:
            self._end_day()
        self._record(t)
        reward = (self.equity() - equity_before) / self.reward_scale
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
            info["advisor_account"] = self.account_snapshot()
        return obs, float(reward), terminated, truncated, info

    # ------------------------------------------------------------------ bar logic
    def _tighten_stop(self, level: float) -> None:
        if self._side > 0:
            if level > self._stop:
                self._stop = level
        elif level < self._stop:
            self._stop = level

    def _process_bar(self, t: int, pending: int) -> bool:
        """Fill a pending entry at bar t's open, then run stops, targets and the rules. Returns breach."""
        o, h, lo = self._open[t], self._high[t], self._low[t]
        cfg = self.config
        balance_pre = self.balance
        if pending:
            atr = self._atr[t - 1]
            self._raw_entry = o
            self._entry = o + pending * self.slip
            self._side = pending
            self._stop = self._entry - pending * cfg.stop_atr * atr
            self._target = self._entry + pending * cfg.target_atr * atr if cfg.target_atr > 0 else math.nan
            self._trail_on = False
            self._entry_index = t
            self._mae = 0.0
            self._mfe = 0.0
            self.balance -= self.commission
            balance_pre = self.balance

        side = self._side
        exit_price = math.nan
        if side:
            entry, stop, target = self._entry, self._stop, self._target
            fav = h if side > 0 else lo
            adv = lo if side > 0 else h
            # Adverse and favourable excursions [points].
            self._mae = max(self._mae, side * (entry - adv))
            self._mfe = max(self._mfe, side * (fav - entry))
            if side * (o - stop) <= 0:  # opened through the stop
                exit_price, reason = o - side * self.slip, self._stop_reason()
            elif target == target and side * (o - target) >= 0:  # opened through the target
                exit_price, reason = o, EXIT_TARGET
            elif side * (adv - stop) <= 0:  # stop first when both are touched
                exit_price, reason = stop - side * self.slip, self._stop_reason()
            elif target == target and side * (fav - target) >= 0:
                exit_price, reason = target, EXIT_TARGET
            # The prop-firm threshold: peak first (favourable extreme), then the adverse one.
            worst = adv
            if exit_price == exit_price:
                if reason == EXIT_TARGET:
                    fav = exit_price  # out at the target: nothing better counts
                else:
                    worst = exit_price  # out at the stop: nothing worse counts
            peak_eq = balance_pre + side * (fav - entry) * self.dollars_per_point
            trough_eq = balance_pre + side * (worst - entry) * self.dollars_per_point
            if exit_price == exit_price:
                self._close_position(t, exit_price, reason, at_close=False)
            elif self._trail_on:
                self._best = fav if side * (fav - self._best) > 0 else self._best
                self._tighten_stop(self._best - side * self._trail_dist)
        else:
            peak_eq = trough_eq = self.balance
        return self._apply_rules(t, peak_eq, trough_eq)

    def _stop_reason(self) -> str:
        if self._trail_on:
            return EXIT_TRAIL
        if self._stop == self._entry:
            return EXIT_BREAKEVEN
        return EXIT_STOP

    def _apply_rules(self, t: int, peak_eq: float, trough_eq: float) -> bool:
        r = self.rules
        if self.breached:
            return False
        peak_eq = max(peak_eq, self.balance)
        if r.trail_mode == "intraday" and peak_eq > self.peak:
            self.peak = peak_eq
            self.threshold = min(max(self.threshold, peak_eq - r.trailing_drawdown), r.threshold_cap)
        if trough_eq <= self.threshold or self.balance <= self.threshold:
            if self._side:
                # Liquidated where equity met the threshold (or the bar's open if it gapped through).
                level = self._entry + (self.threshold - self.balance) / (self.dollars_per_point * self._side)
                o = self._open[t]
                price = o if self._side * (o - level) < 0 else level
                self._close_position(t, price - self._side * self.slip, EXIT_BREACH, at_close=False)
            self.breached = True
            self.breach_index = t
            return True
        if r.daily_loss_limit is not None and trough_eq - self._day_start_balance <= -r.daily_loss_limit:
            if self._side:
                level = self._entry + (self._day_start_balance - r.daily_loss_limit - self.balance) / (
                    self.dollars_per_point * self._side
                )
                o = self._open[t]
                price = o if self._side * (o - level) < 0 else level
                self._close_position(t, price - self._side * self.slip, EXIT_DAILY_LOSS, at_close=False)
            self._day_locked = True
        return False

    def _close_position(self, t: int, price: float, reason: str, *, at_close: bool) -> None:
        side = self._side
        raw_exit = price + side * self.slip if reason not in (EXIT_TARGET,) else price
        gross = side * (raw_exit - self._raw_entry) * self.dollars_per_point
        net = side * (price - self._entry) * self.dollars_per_point - 2 * self.commission
        self.balance += side * (price - self._entry) * self.dollars_per_point - self.commission
        self.trades.append(
            (self._entry_index, t, side, self.qty, self._entry, price, gross, gross - net, net,
             t - self._entry_index + 1, reason, at_close)
        )
        win = net > 0
        self._recent.append(1 if win else 0)
        recent = list(self._recent)[-RECENT_TRADES:]
        self._recent_win_rate = sum(recent) / len(recent)
        self.consecutive_losses = 0 if win else self.consecutive_losses + 1
        self._side = 0
        self._trail_on = False
        self._target = math.nan
        self._last_exit_index = t
        if self.target_index < 0 and self.balance >= self.rules.account_size + self.rules.profit_target:
            self.target_index = t

    def _end_day(self) -> None:
        """Close at the last bar of the day's window; EOD trailing moves here."""
        t = self._win_last
        if self._side:
            self._close_position(t, self._close[t] - self._side * self.slip, EXIT_SESSION_END, at_close=True)
        r = self.rules
        if r.trail_mode == "eod" and not self.breached and self.balance > self.peak:
            self.peak = self.balance
            self.threshold = min(max(self.threshold, self.balance - r.trailing_drawdown), r.threshold_cap)

    # ------------------------------------------------------------------ state
    def equity(self) -> float:
        """Balance plus open profit at the current bar's close [$]."""
        if self._side:
            return self.balance + self._side * (self._close[self._t] - self._entry) * self.dollars_per_point
        return self.balance

    def _record(self, t: int) -> None:
        self.equity_history[t] = self.equity()
        self.position_history[t] = self._side * self.qty

    def action_masks(self) -> np.ndarray:
        """Legal actions in the current state (bool array, HOLD always legal)."""
        return self._mask.copy()

    def _update_mask(self) -> np.ndarray:
        m = self._mask
        self._vetoed = False
        self.decision_steps += 1
        m[:] = False
        m[0] = True
        side = self._side
        if side == 0:
            if self._t <= self._last_entry and not self.breached and not self._day_locked:
                allowed = True
                if self.risk_veto is not None:
                    allowed = self.risk_veto.allows_entry(self)
                m[1] = m[2] = allowed
        elif self.n_actions > 3:
            c = self._close[self._t]
            m[3] = side * (self._stop - self._entry) < 0 and side * (c - self._entry) > 0
            m[4] = not self._trail_on and (self.risk_veto is None or self.risk_veto.allows_trail(self))
            m[5] = self._trail_on
        if self._vetoed:
            self.veto_steps += 1
        return m

    def _observe(self) -> np.ndarray:
        t = self._t
        obs = self._obs
        obs[:WINDOW_DIM] = self._windows[t - (WINDOW - 1)]
        side = self._side
        if side:
            atr = self._atr[t]
            c = self._close[t]
            obs[220] = side
            obs[221] = side * (c - self._entry) / atr
            obs[222] = side * (c - self._stop) / atr
            obs[223] = side * (self._target - c) / atr if self._target == self._target else 0.0
            obs[224] = (t - self._entry_index + 1) / 60.0
        else:
            obs[220:225] = 0.0
        mask = self._update_mask()
        obs[225] = mask[1]
        obs[226] = mask[3:].any() if self.n_actions > 3 else 0.0
        obs[227] = side != 0
        if self.phase == 3:
            obs[228:256] = self._llm_market[t]
            obs[256:261] = self.risk_features()
        return obs.copy()

    def risk_features(self) -> tuple[float, float, float, float, float]:
        """The 5 risk-context features (scaled to about [-1, 1])."""
        allowance = self.rules.trailing_drawdown
        equity = self.equity()
        upnl = (equity - self.balance) / allowance
        drawdown = (self.peak - equity) / allowance
        losses = min(self.consecutive_losses, 10) / 5.0
        win_rate = self._recent_win_rate
        win_rate = 0.5 if win_rate != win_rate else win_rate
        mae_mfe = min(self._mae / (self._mfe + 1e-9), 10.0) / 10.0 if self._side else 0.0
        return (upnl, drawdown, losses, win_rate, mae_mfe)

    @property
    def current_index(self) -> int:
        """Index of the bar whose close the agent is looking at."""
        return self._t

    @property
    def position(self) -> int:
        return self._side

    @property
    def recent_win_rate(self) -> float:
        """Share of winners among the last 10 trades (NaN before the first)."""
        return self._recent_win_rate

    def recent_trades(self) -> list[int]:
        """Outcomes of the most recent trades (1 won, 0 lost), oldest first."""
        return list(self._recent)

    def bars_since_exit_today(self) -> int:
        """Bars since the last exit in the current session (a large number when none today)."""
        if self._last_exit_index < self._day_first:
            return 1 << 30
        return self._t - self._last_exit_index

    def count_veto(self, code: str) -> None:
        """Record that the risk veto blocked an otherwise legal action now (reason ``code``)."""
        self.veto_counts[code] = self.veto_counts.get(code, 0) + 1
        self._vetoed = True

    def account_snapshot(self) -> AccountState:
        """The account at the current bar (NaN where undefined), for the risk veto and the advisor."""
        return AccountState(
            t=self._t,
            position=self._side,
            contracts=self.qty if self._side else 0,
            entry_price=self._entry if self._side else math.nan,
            unrealized_pnl=self.equity() - self.balance,
            balance=self.balance,
            win_rate=self._recent_win_rate,
            consecutive_losses=self.consecutive_losses,
            mask=tuple(self._mask.tolist()),
        )

    def drawdown_buffer(self) -> float:
        """Share of the trailing allowance still left above the threshold (1 = untouched)."""
        return (self.equity() - self.threshold) / self.rules.trailing_drawdown

    # ------------------------------------------------------------------ reporting
    def trade_log(self) -> pd.DataFrame:
        """The trades so far with ET timestamps (built outside the hot loop)."""
        df = pd.DataFrame(self.trades, columns=list(TRADE_COLUMNS))
        idx = self.bars.frame.index
        if len(df):
            df.insert(0, "entry_time", idx[df["entry_index"].to_numpy()])
            at_close = df["exit_at_close"].to_numpy(dtype=bool)
            exit_time = idx[df["exit_index"].to_numpy()] + pd.to_timedelta(np.where(at_close, self.bars.bar_minutes, 0), unit="m")
            df.insert(1, "exit_time", exit_time)
        else:
            df.insert(0, "entry_time", pd.Series([], dtype=f"datetime64[ns, {idx.tz}]"))
            df.insert(1, "exit_time", pd.Series([], dtype=f"datetime64[ns, {idx.tz}]"))
        return df

    def episode_info(self, end_reason: str | None) -> dict[str, Any]:
        return {
            "end_reason": end_reason,
            "trades": [dict(zip(TRADE_COLUMNS, tr)) for tr in self.trades],
            "account": {
                "balance": self.balance,
                "threshold": self.threshold,
                "peak": self.peak,
                "breach_index": self.breach_index,
                "target_index": self.target_index,
                "sessions": self._day + 1,
            },
            "episode_bars": int(np.count_nonzero(~np.isnan(self.equity_history))),
            "invalid_actions": self.invalid_actions,
            "veto_counts": dict(self.veto_counts),
            "veto_steps": self.veto_steps,
            "decision_steps": self.decision_steps,
        }
