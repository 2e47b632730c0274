"""Configuration of the trading environment (the ``env`` section of a run's config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybrid_trader.calendar import CME_CALENDAR, parse_hhmm
from hybrid_trader.env.reward import REWARDS
from hybrid_trader.errors import UserError


@dataclass
class EnvConfig:
    """How one futures contract is traded in the simulation."""

    phase: int = 2
    """1: entries only (HOLD/BUY/SELL, fixed ATR stop and target); 2: six actions; 3: adds the 33 LLM features."""
    market: str | None = None
    """Contract traded (NQ, MNQ, ES, MES, YM, MYM, RTY, M2K); null: the bars' market
    (e.g. MNQ on NQ bars is allowed)."""
    rules: str = "apex-legacy"
    """Prop-firm rules preset: apex-legacy, apex-2026-intraday or apex-2026-eod."""
    account: str = "50K"
    """Account size of the preset (25K, 50K, 75K, 100K, 150K, 250K, 300K; 2026 presets: 25K-150K)."""
    rules_overrides: dict = field(default_factory=dict)
    """Fields of the rules preset to override, e.g. {trailing_drawdown: 2000}."""
    contracts: int = 1
    """Contracts per trade."""
    commission_per_side: float | None = None
    """Commission and fees per contract per side [$]; None: the contract's default."""
    slippage_ticks: float = 1.0
    """Slippage per side on market orders (entries, stops, forced exits) [ticks]; targets fill at their price."""
    stop_atr: float = 1.5
    """Initial stop distance from the entry fill [ATR(14) at the decision bar]."""
    target_atr: float = 3.0
    """Target distance from the entry fill [ATR]; 0 disables the target in phases 2-3."""
    trail_atr: float = 1.0
    """Trailing-stop distance from the best price since the trail was enabled [ATR]."""
    trade_start: str = "09:30"
    """Start of each session's trading window, US/Eastern (episodes begin here)."""
    trade_end: str = "16:00"
    """End of the trading window, US/Eastern: open positions are closed at the close of the last bar before it."""
    last_entry: str = "15:45"
    """No new entries decided after this time, US/Eastern."""
    calendar: str = CME_CALENDAR
    """exchange_calendars name whose early closes end those days' windows early, in backtests and live alike, by
    the margin the rules' flat-by time keeps before the close ('': none; a day whose bars stop early is then
    traded to its last bar without knowing it is the last)."""
    episode_sessions: int | None = 1
    """Sessions (trading days) per training episode; None: the whole split in order (evaluation)."""
    terminate_on_breach: bool = True
    """End the episode when the prop-firm threshold is breached."""
    breach_penalty: float = 5.0
    """Reward subtracted on a breach [reward units]."""
    reward_scale: float | None = None
    """Dollars per unit of reward; None: point value x contracts x median ATR of the bars of the days it trades."""
    reward: str = "pnl"
    """pnl: equity change per step; prop: pnl + a target bonus + a threshold-distance penalty; sharpe:
    the differential Sharpe ratio of the pnl rewards (docs/ENVIRONMENT.md). The breach penalty applies to all."""
    prop_target_bonus: float = 10.0
    """reward prop: bonus on the step the profit target is reached, once an episode [reward units]."""
    prop_threshold_penalty: float = 0.01
    """reward prop: penalty per step at (or below) the trailing threshold [reward units]; 0 at the zone's edge."""
    prop_threshold_zone: float = 0.5
    """reward prop: share of the trailing allowance left above the threshold below which the penalty starts."""
    sharpe_eta: float = 0.01
    """reward sharpe: rate of the moving estimates of the returns' mean and second moment (about 1/eta steps)."""
    sharpe_scale: float = 0.1
    """reward sharpe: reward units per unit of the differential Sharpe ratio (clipped to +-10 before scaling)."""

    def __post_init__(self) -> None:
        if self.phase not in (1, 2, 3):
            raise UserError(f"env.phase: {self.phase!r} is not a phase", fix="use 1, 2 or 3")
        if self.contracts < 1:
            raise UserError(f"env.contracts: {self.contracts!r} must be at least 1")
        for name in ("stop_atr", "trail_atr"):
            if getattr(self, name) <= 0:
                raise UserError(f"env.{name}: {getattr(self, name)!r} must be > 0")
        if self.target_atr < 0 or (self.phase == 1 and self.target_atr == 0):
            raise UserError(f"env.target_atr: {self.target_atr!r} must be > 0 (>= 0 in phases 2-3)")
        if self.slippage_ticks < 0:
            raise UserError(f"env.slippage_ticks: {self.slippage_ticks!r} must be >= 0")
        if self.episode_sessions is not None and self.episode_sessions < 1:
            raise UserError(f"env.episode_sessions: {self.episode_sessions!r} must be >= 1 or null")
        if self.reward not in REWARDS:
            raise UserError(f"env.reward: {self.reward!r} is not a reward", fix=f"use one of: {', '.join(REWARDS)}")
        for name in ("prop_target_bonus", "prop_threshold_penalty"):
            if getattr(self, name) < 0:
                raise UserError(f"env.{name}: {getattr(self, name)!r} must be >= 0")
        if not 0 < self.prop_threshold_zone <= 1:
            raise UserError(f"env.prop_threshold_zone: {self.prop_threshold_zone!r} must be in (0, 1]",
                            fix="e.g. 0.5: the penalty starts when half of the trailing allowance is left")
        if not 0 < self.sharpe_eta < 1:
            raise UserError(f"env.sharpe_eta: {self.sharpe_eta!r} must be in (0, 1)", fix="e.g. 0.01 (about 100 steps)")
        if self.sharpe_scale <= 0:
            raise UserError(f"env.sharpe_scale: {self.sharpe_scale!r} must be > 0")
        for name in ("trade_start", "trade_end", "last_entry"):
            parse_hhmm(getattr(self, name), name)
