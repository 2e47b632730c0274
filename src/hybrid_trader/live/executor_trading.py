"""The executor's trading: one accepted bar's day, decision, orders and fills, on the environment's core.

:class:`ExecutorTrading` holds the trading state (``env.core.TradingCore``: the rules, the account, the paper
broker, the observation; the day's window ``env.day_window.DayWindow`` and bookkeeping ``DayState``; the
NinjaTrader link) and the policy, and writes what it does to the journal (``live.executor_journal``: decisions,
orders, fills, account rows, stops and the restart checks). The executor gives it each accepted bar
(:meth:`ExecutorTrading.trade`, then :meth:`ExecutorTrading.bar_done`: the snapshot, the commit, the orders sent
to NinjaTrader).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid_trader.calendar import EASTERN, session_minute
from hybrid_trader.data.bars_so_far import BarsSoFar
from hybrid_trader.env.account import AccountStanding
from hybrid_trader.env.core import TradingCore
from hybrid_trader.env.day_window import DayState, DayWindow
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.features.features_so_far import FeaturesSoFar
from hybrid_trader.live.account_sync import note_consistency
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.executor_journal import ExecutorJournal
from hybrid_trader.live.executor_parts import ExecutorOptions, ExecutorSummary
from hybrid_trader.live.feed_position import BarStep, FeedPosition
from hybrid_trader.live.live_policy import LivePolicy
from hybrid_trader.live.ninjatrader import NinjaTraderBridge
from hybrid_trader.markets import ContractSpec
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import make_veto

if TYPE_CHECKING:
    from hybrid_trader.live.snapshot import Snapshots


class ExecutorTrading(ExecutorJournal):
    """The executor's trading state, its policy and its journal rows (see the module's docstring)."""

    def __init__(self, config: RunConfig, contract: ContractSpec, feed: FeedPosition, live: LivePolicy,
                 options: ExecutorOptions, bridge: NinjaTraderBridge | None, standing: AccountStanding | None,
                 say: Callable[..., Any]) -> None:
        cfg = config.env
        self.journal, self.say = feed.journal, say
        self.feed = feed
        self.summary: ExecutorSummary = feed.summary
        self.policy = live.policy
        self.advice_calibration = live.calibration
        dates = options.trade_dates
        self.trade_dates = None if dates is None else {np.datetime64(pd.Timestamp(d).date(), "D") for d in dates}
        veto = make_veto(config.risk) if cfg.phase == 3 else None  # as evaluation: the veto is phase 3's
        self.build_core = partial(TradingCore.build, cfg, contract, veto=veto)
        """The environment's core on the given series (``TradingCore.build``; again at a snapshot's restore)."""
        self.core = self.build_core(feed.series())
        if standing is not None:  # before a snapshot's restore, which replaces the account
            self.core.account.start_from(standing)
        self.day = DayState()
        """Where the executor is in its days (the date, its window open or done, the pending entry)."""
        self.window = DayWindow.of(cfg, self.account, feed.bars.bar_minutes)
        """The trading day's window (``env.day_window``: the environment's)."""
        self.link = None if bridge is None else BrokerLink(
            bridge, self.journal, self.broker, mismatch_bars=options.mismatch_bars, say=say,
            max_contracts=self.rules.max_contracts * (10 if contract.is_micro else 1))
        self.marks = self.journal_marks(self.journal)
        self.order_tag = ""
        self.entry_id: str | None = None
        self.last_decision: tuple[int, int, list[str]] | None = None
        """The last decision: (bar time ns, action, reason codes), for the status line."""
        self.latencies_ms: list[float] = []
        """Per decision: ms from the bar's arrival to the decision and its orders committed to the journal."""
        self.step: BarStep | None = None
        """The bar being traded."""

    # the policy's view of the state (an asynchronous advisor's context: ``live.live_policy.executor_context``)
    @property
    def bars(self) -> BarsSoFar:
        return self.feed.bars

    @property
    def feature_rows(self) -> FeaturesSoFar:
        return self.feed.rows

    @property
    def rules(self) -> PropFirmRules:
        return self.core.account.rules

    # ------------------------------------------------------------------ snapshots (live.snapshot)
    def day_state(self) -> dict[str, Any]:
        """The day's bookkeeping a snapshot keeps (the names are the snapshot format's, 3)."""
        d = self.day
        return {"_date": d.date, "_day_open": d.open, "_day_done": d.done, "_pending": d.pending,
                "_entry_id": self.entry_id, "_trades_seen": 0, "last_decision": self.last_decision}

    def resume(self, core: tuple[dict[str, Any], Any, Any], day: dict[str, Any]) -> None:
        """Continue from a snapshot: the core rebuilt on the feed's (restored) bars and feature rows
        (``TradingCore.build``, as ``__init__``) with ``core``'s (state, broker, account), and the day's bookkeeping
        (:meth:`day_state`); the NinjaTrader link follows the restored paper broker."""
        rebuilt = self.build_core(self.feed.series())
        rebuilt.restore(*core)
        self.core = rebuilt
        self.day = DayState(day["_date"], day["_day_open"], day["_day_done"], day["_pending"],
                            self.window.end_on(day["_date"]))  # not kept: the calendar's, again
        self.entry_id, self.last_decision = day["_entry_id"], day["last_decision"]
        if self.link is not None:
            self.link.broker = self.broker

    # ------------------------------------------------------------------ one bar
    def trade(self, step: BarStep) -> bool:
        """An accepted bar: the restart's check at the first new bar, then inside a traded window the day's
        bookkeeping, the decision and its orders; NinjaTrader's events read; a journaled stop made again. True when
        the bar traded (its rows are committed now)."""
        self.step = step
        if step.rebind:
            self.core.observer.rebind(self.feed.rows.windows, self.feed.rows.llm_market)
        if not step.replayed and not self.marks.recovery_checked:
            self.check_recovery()
        traded = self._trade(step)
        if not step.checked:
            self._check_broker(step.tns)
        self.replay_stop(step.replayed, step.tns)
        return traded

    def bar_done(self, step: BarStep, traded: bool, snapshots: Snapshots) -> None:
        """The bar's end: a snapshot when due, the journal's commit (after a traded bar, else batched), the orders
        written to NinjaTrader after it, the decision's latency."""
        link = self.link
        if link is not None and link.pending and not step.replayed:
            traded = True  # the bar's rows are committed before its orders are written
        if snapshots.maybe_take(step.replayed, traded, step.tns):
            traded = True  # the snapshot is committed with its bar's rows
        self.feed.batch.bar_done(traded, step.arrived)
        if link is not None:
            link.flush(live=not step.replayed)
        if step.decided:  # arrival -> decision and its orders committed to the journal
            self.latencies_ms.append((time.perf_counter() - step.arrived) * 1000.0)

    def _trade(self, step: BarStep) -> bool:
        """Bar t inside a traded window: the day's bookkeeping and the decision; False outside any. A history bar
        only keeps the day's bookkeeping (a window it is in is not traded); a late one is processed (fills, stops,
        rules) without a decision."""
        t, tns, held = step.t, step.tns, step.held
        minute, traded = self._day_of(t)
        day = self.day
        assert self.feed.features is not None
        place = self.window.at(minute, t, self.feed.features, day.window_end)
        if step.history:
            if traded and place.hours:
                day.done = True  # the window opened before the live point: the next one is traded
            return False
        if not (traded and place.inside):
            if day.open and place.over:
                self._close_missed_window(t)
                return True
            return False
        last = place.last
        core = self.core
        broker, account = core.broker, core.account
        if not day.open:
            if day.done or last:
                return False
            core.t = t
            account.begin_day(t)
            core.record()
            day.open = True
        else:
            n_before = len(broker.trades)
            breach = core.process_bar(t, day.pending, last)
            core.record()
            self._journal_fills(t, tns, n_before)
            day.pending = 0
            if breach and not step.replayed:  # journaled once: not again on a restart's replay of the bar
                self.journal.record_error("account", f"{self.rules.name}: trailing threshold breached at "
                                          f"{step.bar.time}; trading halted (account {account.status.value})", tns)
            if last:
                day.open, day.done = False, True
                self._journal_account(tns)
                self._note_consistency(tns)
                return True
        halted = self._check_broker(tns)
        if held is not None:  # late: its fills and the rules, no decision on it
            core.last_entry = -1
            self._journal_account(tns)
            return True
        may_enter = place.may_enter
        core.last_entry = t if may_enter and not halted else -1
        vetoes_before = dict(core.veto_counts)
        obs = core.observe()
        mask = core.mask.copy()
        codes = [f"veto:{c}" for c, n in core.veto_counts.items() if n > vetoes_before.get(c, 0)]
        if broker.side == 0:
            if not account.can_enter:
                codes.append(f"account:{account.status.value}")
            if not may_enter:
                codes.append("window:after_last_entry")
            if halted:
                codes.append(halted)
        action = int(self.policy(obs, mask, self))
        day.pending = core.apply(action)
        self.summary.decisions += 1
        self._journal_decision(tns, action, codes, step.arrived)
        self._journal_account(tns)
        return True

    def _day_of(self, t: int) -> tuple[int, bool]:
        """Bar t's session minute and whether its trading date is traded; a new date ends the last one's day."""
        bars = self.feed.bars
        date = bars.trading_date[t]
        if date != self.day.date:
            if self.day.open:  # the previous window's last bar never came: close at this bar
                self._close_missed_window(t)
            self.day.new_date(date, self.window.end_on(date))
        return session_minute(bars.minute_of_day[t]), self.trade_dates is None or date in self.trade_dates

    def _close_missed_window(self, t: int) -> None:
        """A window whose last bar never arrived (a gap, an early close the calendar lacks): the day ends at the
        previous bar's close as the environment's does (``TradingCore.close_missed_window``; the entry decided on
        that bar is dropped), noted in the journal."""
        prev = t - 1
        bars = self.feed.bars
        n_before = len(self.broker.trades)
        core = self.core
        core.t = prev
        core.close_missed_window()
        self._journal_fills(prev, bars.time_ns[prev], n_before)
        self._drop_pending("the trading window ended before its fill")
        self.journal.record_error("window", "the trading window's last bar did not arrive; the day was ended at "
                                  f"bar {pd.Timestamp(bars.time_ns[prev], tz='UTC').tz_convert(EASTERN)}",
                                  bars.time_ns[prev])
        self.day.end()
        self._note_consistency(bars.time_ns[prev])

    def _note_consistency(self, tns: int) -> None:
        """A day's end: the consistency rule's note in the journal (once: not again on a restart's replay)."""
        journaled = self.marks.account
        if journaled is None or tns > journaled:
            note_consistency(self.account, self.journal, tns, self.say)

    def _check_broker(self, tns: int) -> str:
        """NinjaTrader's events and position before the bar's decision; the halt's reason code ("" if none)."""
        step = self.step
        assert step is not None
        step.checked = True
        if self.link is None:
            return ""
        b = self.core.broker
        self.link.check(tns, b.side * b.qty if b.side else 0, step.replayed)
        return self.link.halted
