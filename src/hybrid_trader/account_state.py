"""The one account-state type: the trading account at a decision bar.

The environment produces it (``TradingEnv.account_snapshot()``), the risk veto and the
LLM advisor's query policy and prompt read it. It is immutable and holds plain numbers,
so it crosses process boundaries (``SubprocVecEnv`` infos) cheaply and is never copied.
Undefined values are NaN (``entry_price`` when flat, ``win_rate`` before the first trade).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class AccountState:
    """The trading account as the environment sees it at the decision bar."""

    position: int = 0
    """-1 short, 0 flat, +1 long."""
    contracts: int = 0
    """Contracts held (0 when flat)."""
    entry_price: float = math.nan
    """Average entry price of the open position [points]; NaN when flat."""
    unrealized_pnl: float = 0.0
    """Open profit or loss of the position at the bar's close [$]."""
    balance: float = 50_000.0
    """Account balance, realised [$]."""
    win_rate: float = math.nan
    """Share of winning trades among the last ten [0-1]; NaN before the first trade."""
    consecutive_losses: int = 0
    """Losing trades in a row, most recent first."""
    t: int = -1
    """Index of the bar whose close the agent looks at (-1: not tied to a bar)."""
    mask: tuple = ()
    """Legal actions (bools, in action order); empty when not known."""

    def __deepcopy__(self, memo: dict) -> AccountState:
        return self  # VecEnvs deep-copy infos every step; an immutable value needs no copy
