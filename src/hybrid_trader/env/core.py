"""One bar of trading, shared by the environment and the live executor.

:class:`TradingCore` owns what happens at a bar, in this order: the decided action is
applied (stop and trail changes now, an entry pending for the next bar's open), the
next bar is processed (the broker's fills, stops and targets, then the account's
rules), the equity is recorded, the legal actions are masked (with the risk veto) and
the observation is built. :class:`~hybrid_trader.env.trading_env.TradingEnv` drives it
over precomputed arrays and episodes; ``hybrid_trader.live.executor`` drives it bar by
bar as bars arrive, with the same objects in the same order, so both decide alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import Action, n_actions
from hybrid_trader.env.account import PropFirmAccount
from hybrid_trader.env.broker import Broker
from hybrid_trader.env.config import EnvConfig
from hybrid_trader.env.observation import ObservationBuilder
from hybrid_trader.env.risk_veto import RiskVeto
from hybrid_trader.env.rules import get_rules
from hybrid_trader.markets import ContractSpec

CORE_STATE = ("n_actions", "mask", "t", "last_entry", "equity_now", "veto_counts", "veto_steps", "decision_steps",
              "invalid_actions")
"""The core's own state (:meth:`TradingCore.state`): what a snapshot keeps beside the broker and the account."""


def make_broker(cfg: EnvConfig, contract: ContractSpec) -> Broker:
    """The broker of ``cfg``'s contracts, costs and ATR stops on ``contract``."""
    commission = contract.commission_per_side if cfg.commission_per_side is None else cfg.commission_per_side
    return Broker(
        contracts=cfg.contracts, point_value=contract.point_value, commission_per_side=float(commission),
        slippage_points=float(cfg.slippage_ticks) * contract.tick_size,
        tick_size=contract.tick_size,
        stop_atr=cfg.stop_atr, target_atr=cfg.target_atr, trail_atr=cfg.trail_atr,
    )


@dataclass(frozen=True)
class CoreSeries:
    """The per-bar inputs of a :class:`TradingCore`: the prices and the ATR as Python lists (fast scalar indexing),
    the observation's windows and market rows (the environment's whole series, or the executor's bars and feature
    rows so far)."""

    open: list[float]
    high: list[float]
    low: list[float]
    close: list[float]
    atr: list[float]
    windows: np.ndarray
    llm_market: np.ndarray


class TradingCore:
    """The broker, the account, the mask and the observation at the current bar ``t``.

    The series' ``open``, ``high``, ``low``, ``close`` and ``atr`` are indexable by bar (Python lists in
    the hot loop; the executor appends to them as bars arrive). ``last_entry`` is the last
    bar whose close may decide an entry (set by the caller for each day's window).
    """

    def __init__(self, broker: Broker, account: PropFirmAccount, observer: ObservationBuilder, n_actions: int,
                 series: CoreSeries, risk_veto: RiskVeto | None = None) -> None:
        self.broker = broker
        self.account = account
        self.observer = observer
        self.n_actions = n_actions
        self._open: Sequence[float] = series.open
        self._high: Sequence[float] = series.high
        self._low: Sequence[float] = series.low
        self._close: Sequence[float] = series.close
        self._atr: Sequence[float] = series.atr
        self.risk_veto = risk_veto
        self.mask = np.zeros(n_actions, dtype=bool)
        self.t = -1
        self.last_entry = -1
        self.equity_now = 0.0
        """Equity at the last recorded bar (:meth:`record`)."""
        self.reset_counts()

    @classmethod
    def build(cls, config: EnvConfig, contract: ContractSpec, series: CoreSeries,
              veto: RiskVeto | None = None) -> TradingCore:
        """The core of ``config`` (rules, contracts, costs, phase) trading ``contract`` on ``series``: the rules'
        account (its contracts checked: a UserError over the limit), the broker, the observation builder."""
        account = PropFirmAccount(get_rules(config.rules, config.account, **config.rules_overrides))
        account.check_contracts(config.contracts, contract)
        broker = make_broker(config, contract)
        observer = ObservationBuilder(config.phase, series.windows, series.llm_market, series.atr, series.close,
                                      account.rules.trailing_drawdown)
        return cls(broker, account, observer, n_actions(config.phase), series, veto)

    def state(self) -> dict[str, Any]:
        """The core's own state (:data:`CORE_STATE`: the bar, the mask, the equity, the counters), without the
        broker and the account, which a snapshot keeps on their own."""
        return {k: getattr(self, k) for k in CORE_STATE}

    def restore(self, state: dict[str, Any], broker: Broker, account: PropFirmAccount) -> None:
        """Continue from a saved :meth:`state` with its broker and account (in place of the ones built)."""
        if set(state) != set(CORE_STATE) or state["n_actions"] != self.n_actions:
            raise ValueError(f"not this core's state (keys {sorted(state)}, {state.get('n_actions')} actions)")
        self.broker, self.account = broker, account
        for k, v in state.items():
            setattr(self, k, v)

    def reset_counts(self) -> None:
        """Zero the veto and invalid-action counters (a new episode)."""
        self.veto_counts: dict[str, int] = {}
        self.veto_steps = 0
        self.decision_steps = 0
        self.invalid_actions = 0

    # ------------------------------------------------------------------ the bar's steps, in order
    def apply(self, a: int) -> int:
        """Apply action ``a`` decided at the close of bar ``t``; returns the pending entry side (0: none).

        A masked action is executed as HOLD and counted in ``invalid_actions``.
        """
        if not self.mask[a]:
            self.invalid_actions += 1
            return 0
        if a == Action.BUY:
            return 1
        if a == Action.SELL:
            return -1
        broker = self.broker
        t = self.t
        if a == Action.MOVE_SL_TO_BE:
            broker.move_stop_to_breakeven()
        elif a == Action.ENABLE_TRAIL:
            broker.enable_trail(self._close[t], self._atr[t])
        elif a == Action.DISABLE_TRAIL:
            broker.disable_trail()
        return 0

    def process_bar(self, t: int, pending: int, window_end: bool) -> bool:
        """Bar t: the broker fills and runs stops and targets, then the account applies the rules.

        The account books the fills, and orders any forced liquidation (breach, daily loss,
        the end of the day's window, ``window_end``) from the broker itself. Returns True on a breach.
        """
        self.t = t
        self.broker.on_bar(t, pending, self._open[t], self._high[t], self._low[t], self._atr[t - 1])
        return self.account.on_bar(t, self.broker, self._open[t], self._close[t], window_end)

    def close_missed_window(self) -> bool:
        """The day's window ended at the current bar without a trader knowing it was the last (its bars stopped
        before the window's end: a gap, an early close the calendar lacks): the position is closed at its close;
        the entry decided on it is the caller's to drop. Returns True on a breach (the close's costs)."""
        t = self.t
        account = self.account
        account.close_session(t, self.broker, self._close[t])
        return account.breach_index == t

    def equity(self) -> float:
        """Balance plus open profit at the current bar's close [$]."""
        return self.account.balance + self.broker.open_pnl(self._close[self.t])

    def record(self) -> float:
        """Keep and return the equity at the current bar (the next step and the risk features read it)."""
        self.equity_now = equity = self.equity()
        return equity

    def update_mask(self) -> np.ndarray:
        """The legal actions at the close of bar ``t`` (HOLD always; the risk veto's codes are counted)."""
        m = self.mask
        vetoed = False
        self.decision_steps += 1
        m[:] = False
        m[0] = True
        b = self.broker
        side = b.side
        veto = self.risk_veto
        if side == 0:
            if self.t <= self.last_entry and self.account.can_enter:  # a plain bool: read every step
                allowed = True
                if veto is not None:
                    acc = self.account
                    code = veto.entry_code(self._snapshot_equity(), self.t, acc.consecutive_losses, acc)
                    if code is not None:
                        self._count_veto(code)
                        allowed = False
                        vetoed = True
                m[1] = m[2] = allowed
        elif self.n_actions > 3:
            c = self._close[self.t]
            m[3] = side * (b.stop - b.breakeven) < 0 and side * (c - b.entry) > 0
            if b.trail_on:
                m[5] = True
            elif veto is None:
                m[4] = True
            else:
                code = veto.trail_code(self._snapshot_equity(), self.account)
                if code is None:
                    m[4] = True
                else:
                    self._count_veto(code)
                    vetoed = True
        if vetoed:
            self.veto_steps += 1
        return m

    def _count_veto(self, code: str) -> None:
        self.veto_counts[code] = self.veto_counts.get(code, 0) + 1

    def observe(self) -> np.ndarray:
        """Mask the legal actions, then build the observation at the close of bar ``t``."""
        mask = self.update_mask()
        equity = self.equity_now if self.observer.phase == 3 else 0.0  # only the phase 3 risk features need it
        return self.observer.build(self.t, self.broker, mask, self.n_actions > 3, self.account, equity)

    def _snapshot_equity(self) -> float:
        """The equity the risk veto reads from a snapshot, ``balance + unrealized_pnl``, without building one.

        The same float operations, ``balance + (equity - balance)`` (it may differ from ``equity`` in the last bit).
        """
        balance = self.account.balance
        return balance + (self.equity() - balance)

    # ------------------------------------------------------------------ read-only views
    def account_snapshot(self) -> AccountState:
        """The account at the current bar (NaN where undefined), for the risk veto and the advisor."""
        b = self.broker
        acc = self.account
        side = b.side
        return AccountState(
            t=self.t,
            position=side,
            contracts=b.qty if side else 0,
            entry_price=b.entry if side else math.nan,  # the one NaN object: equal snapshots compare equal
            unrealized_pnl=self.equity() - acc.balance,
            balance=acc.balance,
            win_rate=acc.recent_win_rate,
            consecutive_losses=acc.consecutive_losses,
            mask=tuple(self.mask.tolist()),
        )


class CoreViews:
    """Read-only views of a :class:`TradingCore` (``self.core``) that policies, the advisor and reports read:
    the same on ``TradingEnv`` and on the live executor."""

    core: TradingCore

    @property
    def account(self) -> PropFirmAccount:
        """The prop-firm account (the core's)."""
        return self.core.account

    @property
    def broker(self) -> Broker:
        """The paper broker (the core's)."""
        return self.core.broker

    @property
    def current_index(self) -> int:
        """Index of the bar whose close the agent is looking at."""
        return self.core.t

    @property
    def invalid_actions(self) -> int:
        """Masked actions executed as HOLD in this episode."""
        return self.core.invalid_actions

    @property
    def veto_counts(self) -> dict[str, int]:
        """Risk veto reason codes counted in this episode."""
        return self.core.veto_counts

    @property
    def veto_steps(self) -> int:
        return self.core.veto_steps

    @property
    def decision_steps(self) -> int:
        return self.core.decision_steps

    def action_masks(self) -> np.ndarray:
        """Legal actions in the current state (bool array, HOLD always legal)."""
        return self.core.mask.copy()

    def account_snapshot(self) -> AccountState:
        """The account at the current bar (NaN where undefined), for the risk veto and the advisor."""
        return self.core.account_snapshot()
