"""The executor: a trained run trading a bar feed, every step journaled.

Per arriving bar: the gate (a rejected bar is journaled with its reason code and
skipped), the incremental features (equal to the batch ones), then, inside the trading
window of a traded day, the same :class:`~hybrid_trader.env.core.TradingCore` the
environment drives (the decided action, the broker's fills, the account's rules, the
mask with the risk veto, the observation) and the same policy objects evaluation uses
(``evaluation.policies.AgentPolicy``, its forward in numpy: ``live.fast_policy``; phase 3: the one advised
decision ``agent.advised.AdvisedPolicy`` with the run's advisor: its student, an LLM asked asynchronously, or
RL-only, in torch). So a replay of the run's
test days makes the trades ``evaluate`` reports (``tests/live/test_executor.py``,
``test_replay_makes_evaluations_trades_when_fed_the_runs_test_days``).

**Days and windows** (``env.day_window.DayWindow``, the window ``TradingEnv`` reads; the core is built by
``TradingCore.build`` as the environment's): a day's window starts on its first
bar inside ``env.trade_start``..``trade_end`` (ended by the rules' flat-by time) at or
after the feature warm-up; its last bar is the one whose end reaches the window's end;
entries are decided on bars up to ``env.last_entry``; a position left at the window's last
bar is closed at its close (``SESSION_END``). Bars outside the traded days only feed the
features (the history before the test days, without trading).

**History is never traded** (``live.live_point.LivePoint``). ``live_from`` is the live point: an accepted bar that
ends at or before it is history (journaled with reason ``history``): it warms the features and nothing else, no
decision, no paper trade, no order; a trading window that opened before the live point is not traded (the next one is,
from its first bar, so decisions from then on are ``evaluate``'s). With ``max_bar_age_s`` (a followed feed) the wall
clock ``clock`` judges each new bar: one from the future is refused (``future``); one whose end is older than that
when it arrives is ``late``: it warms the features and the paper broker's fills, stops and window end (NinjaTrader's
bracket acts on it too), but no decision is made on it and no entry sent. A restart takes these verdicts from the
journal.

**Restarts.** The feed is read from its first bar every time (the features need the
history); the bars up to the journal's latest snapshot are skipped, the state after them
restored from it (``live.snapshot``), and the later ones replayed. Bars, decisions and
account rows already in the journal are not written again;
orders and fills have deterministic ids (``live.ninjatrader.order_id``) and are journaled
idempotently, so nothing is sent or booked twice; a stop (Ctrl-C: ``--on-exit flatten`` and its
``MANUAL_EXIT``, or ``protect``) journaled after a bar is made again after that bar. When the
replay reaches the journal's last bar, the position and balance it rebuilt are checked against
the journal's fills and account row; a difference stops the executor with an error naming both,
and so does a feed that ends before the journal's last bar (not the journal's feed).

**One run, one writer.** The journal is opened holding its writer lock (a second process is
refused naming the first's PID) and claimed for the run (``Journal.claim``: the run, its model,
config and market, checked before any row is written; another run's journal is refused).

**NinjaTrader** (``bridge``): the decisions stay these; :class:`~hybrid_trader.live.broker_link.BrokerLink`
mirrors the paper orders to NinjaTrader after each bar's commit and checks its fills and position before
each decision (a disagreement or a rejection halts new entries, with a reason code).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.calendar import EASTERN, session_minute
from hybrid_trader.data.bars_so_far import BarsSoFar
from hybrid_trader.env.account import AccountStanding
from hybrid_trader.env.broker import TRADE_LOG_COLUMNS, trades_frame
from hybrid_trader.env.core import CoreSeries, TradingCore
from hybrid_trader.env.day_window import DayState, DayWindow
from hybrid_trader.env.observation import ObservationBuilder
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError
from hybrid_trader.features.features_so_far import FeaturesSoFar
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.live.account_sync import note_consistency
from hybrid_trader.live.bar_gate import CODE_HISTORY, BarGate
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.executor_journal import ExecutorJournal
from hybrid_trader.live.executor_parts import ExecutorSummary, run_bar_minutes, split_dates
from hybrid_trader.live.feeds import Bar, FollowFeed
from hybrid_trader.live.journal import CommitBatch, Journal
from hybrid_trader.live.live_point import Held, LivePoint
from hybrid_trader.live.live_policy import LivePolicy
from hybrid_trader.live.ninjatrader import NinjaTraderBridge, order_tag
from hybrid_trader.live.policy_cache import executor_policy
from hybrid_trader.live.snapshot import Snapshots, run_identity
from hybrid_trader.markets import get_contract
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig, run_market
from hybrid_trader.run.market import make_veto

__all__ = ["Executor", "ExecutorSummary", "run_bar_minutes", "split_dates"]


class Executor(ExecutorJournal):
    """Trade a run's agent on a bar feed with the paper broker, journaling everything.

    ``market`` and ``bar_minutes``: the feed's (the run's ``env.market`` wins; without either, the market the run
    trained on: ``run.config.run_market``). ``trade_dates``: the
    trading dates to trade (None: every day); the other bars only
    warm the features up. ``run_tag`` names the orders (default: the run folder's name).
    ``llm``, ``llm_budget_ms``: a phase 3 run's LLM (not its student) asked asynchronously, a
    decision waiting at most that long for its own bar's answer (``async``), or not at all (``off``);
    ``llm_overrides``: ``llm.*`` keys over the run's. ``calibrate=False`` (``--no-calibrate``): a leaning
    model's raw answers, journaled as such with every decision's advice.
    ``bridge``: NinjaTrader's ATI bridge; the paper orders are then mirrored to it
    (:mod:`hybrid_trader.live.broker_link`; ``mismatch_bars``: how long the positions may differ).
    ``live_from`` (a tz-aware time or ns): the live point, bars ending at or before it are history (None: every
    bar is live, a replay's default); ``max_bar_age_s``: a followed feed's wall-clock rules (late and future bars,
    by ``clock``; None: off).
    ``standing``: the real account's standing to start from (``live.account_sync``; None: the preset's start).
    """

    def __init__(self, run_dir: str | Path, journal: str | Path | Journal, *,
                 trade_dates: Iterable[Any] | None = None, run_tag: str | None = None,
                 market: str | None = None, bar_minutes: int = 1, say: Any = None, llm: str = "async",
                 llm_budget_ms: float = 0.0, llm_overrides: dict | None = None,
                 bridge: NinjaTraderBridge | None = None, mismatch_bars: int = 2,
                 live_from: pd.Timestamp | int | None = None, max_bar_age_s: float | None = None,
                 clock: Callable[[], float] = time.time, calibrate: bool = True,
                 standing: AccountStanding | None = None) -> None:
        self.run = RunDir(run_dir).require()
        self.config: RunConfig = self.run.load_config(RunConfig)
        cfg = self.config.env
        self.say = say or (lambda *a: None)
        self.summary = ExecutorSummary()
        """What the run did (its ``notes`` are :attr:`notes`)."""
        owned = not isinstance(journal, Journal)
        self.journal = journal if isinstance(journal, Journal) else Journal(journal, writer=f"run {run_dir}")
        self.run_tag = run_tag or self.run.path.name
        self.trade_dates = None if trade_dates is None else {np.datetime64(pd.Timestamp(d).date(), "D")
                                                              for d in trade_dates}
        trained, where = run_market(self.config)
        market = market or cfg.market or trained  # the feed's, by run.market.priced_market's rule, wins
        if not market:
            raise UserError(f"neither the run {self.run.path} nor the feed names the market ({where})",
                            fix="restore the run's data folder (its files' names say the market), or replay a "
                                "file whose name says it")
        self.contract = get_contract(market)
        self.bar_minutes = int(bar_minutes)
        self.live_point = LivePoint(self.journal, live_from, max_bar_age_s, clock, self.bar_minutes)
        """Which accepted bars are traded (history, late, future: ``live.live_point``)."""
        live = self._policy(llm, llm_budget_ms, llm_overrides, calibrate)
        self.policy = live.policy
        self.bars = BarsSoFar(self.contract.symbol, self.bar_minutes)
        """The accepted bars so far (``Bars``' attributes)."""
        self.feature_rows = FeaturesSoFar(raw_keys=live.raw_keys)
        """Their features (``FeatureSet``'s attributes; ``raw``: what an asynchronous advisor's contexts read)."""
        veto = make_veto(self.config.risk) if cfg.phase == 3 else None  # as evaluation: the veto is phase 3's
        self.core = TradingCore.build(cfg, self.contract, self._series(), veto)
        if standing is not None:  # before a snapshot's restore, which replaces the account
            self.core.account.start_from(standing)
        self.day = DayState()
        """Where the executor is in its days (the date, its window open or done, the pending entry)."""
        self.window = DayWindow.of(cfg, self.account, self.bar_minutes)
        """The trading day's window (``env.day_window``: the environment's)."""
        self.link = None if bridge is None else BrokerLink(
            bridge, self.journal, self.broker, mismatch_bars=mismatch_bars, say=self.say,
            max_contracts=self.rules.max_contracts * (10 if self.contract.is_micro else 1))
        self.features: IncrementalFeatures | None = None
        self.gate: BarGate | None = None
        self._entry_id: str | None = None
        # restart: what the journal already holds
        j = self.journal
        self._journaled_bars = j.last_time("bars")
        self._journaled_decisions = j.last_time("decisions")
        self._journaled_account = j.last_time("account")
        self._recovery_checked = self._journaled_bars is None
        self.latencies_ms: list[float] = []
        """Per decision: ms from the bar's arrival to the decision and its orders committed to the journal."""
        self._decided = False
        self.last_decision: tuple[int, int, list[str]] | None = None
        """The last decision: (bar time ns, action, reason codes), for the status line."""
        self._replayed = False
        self._checked = False
        self.batch = CommitBatch(self.journal)
        """The journal's rows of untraded bars, committed together."""
        self._last_seen_ns: int | None = None
        """The latest bar time the feed gave (the snapshot's skipped bars included)."""
        self.lock = threading.RLock()
        """Held by each bar and by the flat guard's actions (``live.deadline``): they never interleave, and the
        journal's one connection is used by one thread at a time."""
        self.identity = run_identity(self)
        self._stops = self._claim_journal(owned)
        self.order_tag = self.run_tag if bridge is None else order_tag(self.run_tag, self.journal.run_id(),
                                                                        bridge.account)
        """What the order ids start with: with NinjaTrader the account, the journal's run id and the run tag
        (``ninjatrader.order_tag``: unique per account and run there); paper orders never leave the journal, so the
        run tag alone."""
        self.snapshots = Snapshots(self)  # the journal's latest snapshot, restored when it fits (live.snapshot)
        self.snapshots.restore()
        if self.gate is not None:  # a restored gate judges late bars by this command's --max-bar-age
            self.gate.late_after_s = max_bar_age_s
        if self.snapshots.restored_ns in self._stops:  # a stop right after the snapshot's bar
            self._apply_stop(self._stops[self.snapshots.restored_ns])

    # ------------------------------------------------------------------ set-up
    def _policy(self, llm: str, budget_ms: float, llm_overrides: dict | None, calibrate: bool = True) -> LivePolicy:
        """The evaluation's deterministic policy of the run (``live.live_policy.live_policy``; phases 1-2 from
        the numpy cache without torch where it holds this model: ``live.policy_cache``), with its notes."""
        live, _ = executor_policy(self.run, self.config, llm=llm, budget_ms=budget_ms, llm_overrides=llm_overrides,
                                  calibrate=calibrate, say=self.say)
        self.notes.extend(live.notes)
        self.advice_calibration = live.calibration
        self._advisor_label = live.label
        return live

    @property
    def advisor_label(self) -> str:
        """Who advises, for the status line (an asynchronous LLM with its health)."""
        if isinstance(self.policy, AdvisedPolicy) and self.policy.asynchronous:
            return f"{self._advisor_label} ({self.policy.health()})"
        return self._advisor_label

    @property
    def phase(self) -> int:
        return self.config.env.phase

    @property
    def rules(self) -> PropFirmRules:
        return self.core.account.rules

    @property
    def observer(self) -> ObservationBuilder:
        return self.core.observer

    def _series(self) -> CoreSeries:
        """What the core reads per bar: the bars so far and their feature rows."""
        b, r = self.bars, self.feature_rows
        return CoreSeries(b.open, b.high, b.low, b.close, r.atr, r.windows, r.llm_market)

    # ------------------------------------------------------------------ snapshots (live.snapshot)
    def day_state(self) -> dict[str, Any]:
        """The day's bookkeeping a snapshot keeps (the names are the snapshot format's, 3)."""
        d = self.day
        return {"_date": d.date, "_day_open": d.open, "_day_done": d.done, "_pending": d.pending,
                "_entry_id": self._entry_id, "_trades_seen": 0, "last_decision": self.last_decision}

    def resume_from(self, features: IncrementalFeatures, gate: BarGate, bars: BarsSoFar,
                    feature_rows: FeaturesSoFar, core: tuple[dict[str, Any], Any, Any], day: dict[str, Any]) -> None:
        """Continue from a snapshot's parts: the features and gate, the bars and feature rows so far, the core
        rebuilt on them (``TradingCore.build``, as ``__init__``) with ``core``'s (state, broker, account), and
        the day's bookkeeping (:meth:`day_state`)."""
        self.features, self.gate, self.bars, self.feature_rows = features, gate, bars, feature_rows
        rebuilt = TradingCore.build(self.config.env, self.contract, self._series(), self.core.risk_veto)
        rebuilt.restore(*core)
        self.core = rebuilt
        self.day = DayState(day["_date"], day["_day_open"], day["_day_done"], day["_pending"])
        self._entry_id, self.last_decision = day["_entry_id"], day["last_decision"]

    # ------------------------------------------------------------------ the policy's view of the state
    # ------------------------------------------------------------------ the loop
    def run_feed(self, feed: Iterable[Bar], on_bar: Callable[[Executor], None] | None = None) -> ExecutorSummary:
        """Process every bar of ``feed``, calling ``on_bar(self)`` after each (the status line);
        KeyboardInterrupt propagates (see :meth:`stop`)."""
        self.commit_when_idle(feed)
        for bar in feed:
            self.on_bar(bar)
            if on_bar is not None:
                on_bar(self)
        with self.lock:
            self._check_feed_end()
            self.journal.commit()
            self._finish_summary()
        return self.summary

    def on_bar(self, bar: Bar) -> None:
        """One arriving bar: gate, features, and inside a traded window the decision and its orders (under
        :attr:`lock`: the flat guard's thread never acts mid-bar)."""
        with self.lock:
            self._on_bar(bar)

    def _on_bar(self, bar: Bar) -> None:
        arrived = time.perf_counter()
        self._saw(bar.time_ns)
        if self.snapshots.skip(bar):  # a bar the restored snapshot holds
            return
        if self.features is None:
            self.features = IncrementalFeatures(self.contract.symbol, self.bar_minutes)
            self.gate = BarGate(market=self.contract.symbol, bar_minutes=self.bar_minutes, check_tick_grid=False,
                                late_after_s=self.live_point.max_bar_age_s)
        gate = self.gate
        assert gate is not None
        tns = bar.time_ns
        self.batch.begin(arrived)  # committed after a traded bar, or every BATCH_BARS / BATCH_S of the others
        replayed = tns is not None and self._journaled_bars is not None and tns <= self._journaled_bars
        now = self.live_point.now(replayed)
        rejection = self.live_point.check(gate, bar, tns, replayed, now)
        if rejection is not None:
            self.summary.rejected += 1
            if not replayed:
                self.journal.record_bar(bar.time, (bar.open, bar.high, bar.low, bar.close, bar.volume),
                                        accepted=False, reason=rejection.code, message=rejection.message,
                                        raw=bar.raw)
            self.batch.bar_done(False, arrived)
            return
        assert tns is not None and bar.time is not None
        held = self._accept(bar, tns, replayed, self.live_point.held(gate, bar, tns, replayed, now))
        row = self.features.append(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        self.bars.push(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        rows = self.feature_rows
        if rows.push(row):
            self.observer.rebind(rows.windows, rows.llm_market)
        if not replayed and not self._recovery_checked:
            self._check_recovery()
        self._decided = False
        history = held is not None and held[0] == CODE_HISTORY
        self._replayed, self._checked = replayed, history  # history: NinjaTrader is first read at the live point
        traded = self._trade(row.index, bar.time, tns, arrived, held)
        if not self._checked:
            self._check_broker(tns)
        self._replay_stop(replayed, tns)
        link = self.link
        if link is not None and link.pending and not replayed:
            traded = True  # the bar's rows are committed before its orders are written
        if self.snapshots.maybe_take(replayed, traded, tns):
            traded = True  # the snapshot is committed with its bar's rows
        self.batch.bar_done(traded, arrived)
        if link is not None:
            link.flush(live=not replayed)
        if self._decided:  # arrival -> decision and its orders committed to the journal
            self.latencies_ms.append((time.perf_counter() - arrived) * 1000.0)

    def commit_when_idle(self, feed: Iterable[Bar]) -> None:
        """A followed feed commits the journal's batch (:meth:`commit_batch`) each time it waits for its next bar."""
        if isinstance(feed, FollowFeed):
            feed.on_idle = self.commit_batch

    def commit_batch(self) -> None:
        """Commit the journal's batch of untraded bars now (the feed waits for its next bar: the commit costs no bar
        any time, and a watcher of the journal sees every bar that came, not all but the latest)."""
        with self.lock:
            self.batch.commit()

    def _saw(self, tns: int | None) -> None:
        """Keep the latest bar time the feed gave (for :meth:`_check_feed_end`)."""
        if tns is not None and (self._last_seen_ns is None or tns > self._last_seen_ns):
            self._last_seen_ns = tns

    def _accept(self, bar: Bar, tns: int, replayed: bool, held: Held | None) -> Held | None:
        """An accepted bar journaled (a new one) and counted, with why it is not traded (``held``:
        ``LivePoint.held``)."""
        if not replayed:
            self.journal.record_bar(tns, (bar.open, bar.high, bar.low, bar.close, bar.volume),
                                    reason=None if held is None else held[0], message=None if held is None else held[1])
        else:
            self.summary.recovered_bars += 1
        self.summary.bars += 1
        if held is not None:
            if held[0] == CODE_HISTORY:
                self.summary.history_bars += 1
            else:
                self.summary.late_bars += 1
        return held

    def _trade(self, t: int, time_et: pd.Timestamp, tns: int, arrived: float,
               held: tuple[str, str | None] | None = None) -> bool:
        """Bar t inside a traded window: the day's bookkeeping and the decision; False outside any. ``held``: a
        history bar only keeps the day's bookkeeping (a window it is in is not traded); a late one is processed
        (fills, stops, rules) without a decision."""
        minute, traded = self._day_of(t)
        day = self.day
        assert self.features is not None
        place = self.window.at(minute, t, self.features)
        if held is not None and held[0] == CODE_HISTORY:
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
            if breach and not self._replayed:  # journaled once: not again on a restart's replay of the bar
                self.journal.record_error("account", f"{self.rules.name}: trailing threshold breached at "
                                          f"{time_et}; trading halted (account {account.status.value})", tns)
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
        self._journal_decision(tns, action, codes, arrived)
        self._journal_account(tns)
        return True

    def _day_of(self, t: int) -> tuple[int, bool]:
        """Bar t's session minute and whether its trading date is traded; a new date ends the last one's day."""
        date = self.bars.trading_date[t]
        if date != self.day.date:
            if self.day.open:  # the previous window's last bar never came: close at this bar
                self._close_missed_window(t)
            self.day.new_date(date)
        return session_minute(self.bars.minute_of_day[t]), self.trade_dates is None or date in self.trade_dates

    def _close_missed_window(self, t: int) -> None:
        """A window whose last bar never arrived (a gap, an early close): the day ends at the previous bar's
        close as the environment's would (it knows that bar was the window's last; a decision made on it and
        its pending entry are dropped), noted in the journal."""
        prev = t - 1
        n_before = len(self.broker.trades)
        self.account.close_session(prev, self.broker, self.bars.close[prev])
        self._journal_fills(prev, self.bars.time_ns[prev], n_before)
        self._drop_pending("the trading window ended before its fill")
        self.journal.record_error("window", "the trading window's last bar did not arrive; the day was ended at "
                                  f"bar {pd.Timestamp(self.bars.time_ns[prev], tz='UTC').tz_convert(EASTERN)}",
                                  self.bars.time_ns[prev])
        self.day.end()
        self._note_consistency(self.bars.time_ns[prev])

    def _note_consistency(self, tns: int) -> None:
        """A day's end: the consistency rule's note in the journal (once: not again on a restart's replay)."""
        if self._journaled_account is None or tns > self._journaled_account:
            note_consistency(self.account, self.journal, tns, self.say)

    def _check_broker(self, tns: int) -> str:
        """NinjaTrader's events and position before the bar's decision; the halt's reason code ("" if none)."""
        self._checked = True
        if self.link is None:
            return ""
        b = self.core.broker
        self.link.check(tns, b.side * b.qty if b.side else 0, self._replayed)
        return self.link.halted

    def trade_log(self) -> pd.DataFrame:
        """The trades so far (columns ``TRADE_LOG_COLUMNS``, ET times), as evaluation writes them."""
        if not self.bars.time_ns:
            return pd.DataFrame(columns=list(TRADE_LOG_COLUMNS))
        index = pd.DatetimeIndex(pd.to_datetime(self.bars.time_ns, utc=True)).tz_convert(EASTERN)
        return trades_frame(self.broker.trades, index, self.bar_minutes)

    def close(self) -> None:
        if isinstance(self.policy, AdvisedPolicy) and self.policy.asynchronous:
            self.policy.close()
        self.journal.close()
