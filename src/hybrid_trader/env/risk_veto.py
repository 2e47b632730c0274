"""The risk veto as an action mask, so PPO stays on-policy.

A vetoed action gets probability zero in the policy's distribution: it is never
sampled, so no executed action ever differs from the sampled one. Each veto carries a
greppable reason code, counted per episode in ``env.veto_counts``:

=============================  ==============================================================
code                           blocks entries (BUY, SELL) when
=============================  ==============================================================
``VETO_CONSECUTIVE_LOSSES``    the last ``max_consecutive_losses`` trades or more all lost
``VETO_DRAWDOWN_BUFFER``       the buffer above the trailing threshold is below
                               ``dd_buffer_threshold`` of the allowance (also blocks
                               ENABLE_TRAIL)
``VETO_LOW_WIN_RATE``          the win rate over the last ``win_rate_window`` trades is below
                               ``min_win_rate`` (once that many trades exist)
=============================  ==============================================================

The losing-streak and win-rate vetoes are a pause, not a ban: they hold for
``cooldown_bars`` after the last exit and end with the day (otherwise, with no new
trades, nothing could ever lift them). The drawdown veto lasts as long as the buffer is
thin. HOLD, MOVE_SL_TO_BE and DISABLE_TRAIL are never vetoed: risk can always be reduced.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_trader.account_state import AccountState
from hybrid_trader.env.account import PropFirmAccount

VETO_CONSECUTIVE_LOSSES = "VETO_CONSECUTIVE_LOSSES"
VETO_DRAWDOWN_BUFFER = "VETO_DRAWDOWN_BUFFER"
VETO_LOW_WIN_RATE = "VETO_LOW_WIN_RATE"
VETO_CODES = (VETO_CONSECUTIVE_LOSSES, VETO_DRAWDOWN_BUFFER, VETO_LOW_WIN_RATE)


@dataclass
class RiskConfig:
    """The risk veto's thresholds (the ``risk`` section of a run's config)."""

    enable_risk_veto: bool = True
    """Apply the veto (phase 3)."""
    max_consecutive_losses: int = 3
    """Block entries after this many losing trades in a row."""
    dd_buffer_threshold: float = 0.2
    """Block entries and trail enabling when less than this share of the trailing allowance is left."""
    min_win_rate: float = 0.4
    """Block entries when the recent win rate is below this [0-1]."""
    win_rate_window: int = 10
    """Trades in the recent win rate (the veto applies once this many exist)."""
    cooldown_bars: int = 30
    """The losing-streak and win-rate vetoes last this many bars after the last exit, and never past the day."""


class RiskVeto:
    """Decides, from the account state the agent can see, which risk-adding actions are blocked.

    It reads an :class:`~hybrid_trader.account_state.AccountState` snapshot and the
    account's threshold and recent trades (read-only queries of
    :class:`~hybrid_trader.env.account.PropFirmAccount`), and returns reason codes; the
    environment masks the actions and counts the codes.
    """

    def __init__(self, config: RiskConfig | None = None) -> None:
        self.config = config or RiskConfig()

    def entry_veto(self, state: AccountState, account: PropFirmAccount) -> str | None:
        """The reason code that blocks a new entry now, or None."""
        return self.entry_code(state.balance + state.unrealized_pnl, state.t, state.consecutive_losses, account)

    def trail_veto(self, state: AccountState, account: PropFirmAccount) -> str | None:
        """The reason code that blocks enabling the trailing stop now, or None."""
        return self.trail_code(state.balance + state.unrealized_pnl, account)

    # The environment's hot loop passes the few values the vetoes read, not a whole snapshot.
    def entry_code(self, equity: float, t: int, consecutive_losses: int, account: PropFirmAccount) -> str | None:
        """:meth:`entry_veto` of an account at ``equity`` at bar ``t`` after ``consecutive_losses`` losses."""
        c = self.config
        if account.drawdown_buffer(equity) < c.dd_buffer_threshold:
            return VETO_DRAWDOWN_BUFFER
        if account.bars_since_exit_today(t) >= c.cooldown_bars:
            return None
        if consecutive_losses >= c.max_consecutive_losses:
            return VETO_CONSECUTIVE_LOSSES
        if len(account.recent) >= c.win_rate_window and account.win_rate(c.win_rate_window) < c.min_win_rate:
            return VETO_LOW_WIN_RATE
        return None

    def trail_code(self, equity: float, account: PropFirmAccount) -> str | None:
        """:meth:`trail_veto` of an account at ``equity``."""
        if account.drawdown_buffer(equity) < self.config.dd_buffer_threshold:
            return VETO_DRAWDOWN_BUFFER
        return None
