"""Configuration of the trading environment (the ``env`` section of a run's config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybrid_trader.calendar import parse_hhmm
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
    episode_sessions: int | None = 1
    """Sessions (trading days) per training episode; None: the whole split in order (evaluation)."""
    terminate_on_breach: bool = True
    """End the episode when the prop-firm threshold is breached."""
    breach_penalty: float = 5.0
    """Reward subtracted on a breach [reward units]."""
    reward_scale: float | None = None
    """Dollars per unit of reward; None: point value x contracts x median ATR of the bars."""

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
        for name in ("trade_start", "trade_end", "last_entry"):
            parse_hhmm(getattr(self, name), name)
