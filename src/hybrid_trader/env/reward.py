"""The reward of a step (``env.reward``): the P&L reward and the two objectives built on it.

Every reward starts from the step's P&L reward ``r_t``: the change of equity over the
step in units of ``reward_scale`` dollars. ``pnl`` uses it as is; :class:`PropShaping`
and :class:`DifferentialSharpe` turn it into the step's reward; the environment then
subtracts ``breach_penalty`` on a breach, whatever the reward. Both are Python-scalar
objects called once a step (the hot loop); ``pnl`` calls nothing.
"""

from __future__ import annotations

from math import sqrt
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from hybrid_trader.env.account import PropFirmAccount
    from hybrid_trader.env.config import EnvConfig

REWARD_PNL = "pnl"
REWARD_PROP = "prop"
REWARD_SHARPE = "sharpe"
REWARDS = (REWARD_PNL, REWARD_PROP, REWARD_SHARPE)
"""The rewards ``env.reward`` may name."""

DSR_CLIP = 10.0
"""|D_t| is clipped to this before ``sharpe_scale``: the first returns of an episode, against a variance
estimate built from one or two returns, would otherwise give unbounded rewards."""
DSR_MIN_VARIANCE = 1e-12
"""D_t is 0 while the variance estimate ``B - A^2`` is at or below this [reward units squared] (no return yet)."""


class PropShaping:
    """``prop``: ``r_t``, plus ``target_bonus`` once on the step the profit target is reached,
    minus ``k x min(1, max(0, 1 - g_t / zone))``, with ``g_t = (equity_t - threshold_t) /
    trailing_drawdown`` the share of the trailing allowance left above the threshold at the
    step's close (1 on a fresh account).

    ``k`` is ``threshold_penalty`` and ``zone`` is ``threshold_zone``: the penalty is 0 while more than
    ``zone`` of the allowance is left and grows linearly to ``k`` at the threshold (``k`` at or below it).
    """

    __slots__ = ("account", "bonus", "penalty", "_zone_dollars", "paid")

    def __init__(self, account: PropFirmAccount, target_bonus: float, threshold_penalty: float,
                 threshold_zone: float) -> None:
        self.account = account
        self.bonus = float(target_bonus)
        self.penalty = float(threshold_penalty)
        self._zone_dollars = float(threshold_zone) * account.rules.trailing_drawdown
        self.paid = False
        """The target bonus was paid in this episode."""

    def reset(self) -> None:
        self.paid = False

    def __call__(self, r: float, equity: float) -> float:
        acc = self.account
        if not self.paid and acc.target_index >= 0:
            self.paid = True
            r += self.bonus
        gap = (equity - acc.threshold) / self._zone_dollars  # g_t / zone
        if gap < 1.0:
            r -= self.penalty * (1.0 - gap if gap > 0.0 else 1.0)
        return r


class DifferentialSharpe:
    """``sharpe``: ``sharpe_scale x D_t``, the differential Sharpe ratio of Moody and Saffell (1998, 2001)
    of the P&L rewards ``R_t = r_t``::

        dA_t = R_t - A_{t-1}                 A_t = A_{t-1} + eta dA_t
        dB_t = R_t^2 - B_{t-1}               B_t = B_{t-1} + eta dB_t
        D_t  = (B_{t-1} dA_t - 0.5 A_{t-1} dB_t) / (B_{t-1} - A_{t-1}^2)^(3/2)

    ``A`` and ``B`` (exponential moving estimates of the first and second moments of the returns, rate
    ``eta = sharpe_eta``) start at 0 each episode; D_t is 0 while ``B - A^2 <= DSR_MIN_VARIANCE`` and is
    clipped to ``+-DSR_CLIP``. Flat steps are returns of 0: they count.
    """

    __slots__ = ("eta", "scale", "a", "b")

    def __init__(self, eta: float, scale: float) -> None:
        self.eta = float(eta)
        self.scale = float(scale)
        self.a = 0.0
        self.b = 0.0

    def reset(self) -> None:
        self.a = 0.0
        self.b = 0.0

    def __call__(self, r: float, equity: float) -> float:
        a = self.a
        b = self.b
        da = r - a
        db = r * r - b
        var = b - a * a
        eta = self.eta
        self.a = a + eta * da
        self.b = b + eta * db
        if var <= DSR_MIN_VARIANCE:
            return 0.0
        d = (b * da - 0.5 * a * db) / (var * sqrt(var))
        if d > DSR_CLIP:
            d = DSR_CLIP
        elif d < -DSR_CLIP:
            d = -DSR_CLIP
        return self.scale * d


def make_reward(cfg: EnvConfig, account: PropFirmAccount) -> PropShaping | DifferentialSharpe | None:
    """The step's reward beyond the P&L reward for ``cfg.reward`` (None: ``pnl``, the P&L reward itself)."""
    if cfg.reward == REWARD_PROP:
        return PropShaping(account, cfg.prop_target_bonus, cfg.prop_threshold_penalty, cfg.prop_threshold_zone)
    if cfg.reward == REWARD_SHARPE:
        return DifferentialSharpe(cfg.sharpe_eta, cfg.sharpe_scale)
    return None
