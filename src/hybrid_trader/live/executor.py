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
bar inside ``env.trade_start``..``trade_end`` (ended by the rules' flat-by time, and before the ``env.calendar``'s
early closes) at or after the feature warm-up; its last bar is the one whose end reaches the window's end;
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

**The pipeline of a bar** (:meth:`Executor.on_bar`): the feed's position accepts it (``live.feed_position``: the
gate, the live point, its journal row, the bars and features so far), the trading decides and trades on it
(``live.executor_trading``: the day, the decision, its orders and fills, their journal rows), then ends it (the
snapshot, the commit, NinjaTrader's orders).

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

import pandas as pd

from hybrid_trader.agent.advised import AdvisedPolicy
from hybrid_trader.calendar import EASTERN
from hybrid_trader.data.bars_so_far import BarsSoFar
from hybrid_trader.env.account import AccountStanding
from hybrid_trader.env.broker import TRADE_LOG_COLUMNS, trades_frame
from hybrid_trader.env.core import CoreViews, TradingCore
from hybrid_trader.env.day_window import DayState, DayWindow
from hybrid_trader.env.observation import ObservationBuilder
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError
from hybrid_trader.features.features_so_far import FeaturesSoFar
from hybrid_trader.features.incremental import IncrementalFeatures
from hybrid_trader.live.bar_gate import BarGate
from hybrid_trader.live.broker_link import BrokerLink
from hybrid_trader.live.executor_journal import OnExit
from hybrid_trader.live.executor_parts import ExecutorOptions, ExecutorSummary, quiet, run_bar_minutes, split_dates
from hybrid_trader.live.executor_trading import ExecutorTrading
from hybrid_trader.live.feed_position import FeedPosition
from hybrid_trader.live.feeds import Bar, FollowFeed
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.live_point import LivePoint
from hybrid_trader.live.live_policy import LivePolicy
from hybrid_trader.live.ninjatrader import NinjaTraderBridge, order_tag
from hybrid_trader.live.policy_cache import executor_policy
from hybrid_trader.live.snapshot import Snapshots, run_identity
from hybrid_trader.markets import ContractSpec, get_contract
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig, run_market

__all__ = ["Executor", "ExecutorOptions", "ExecutorSummary", "run_bar_minutes", "split_dates"]


class Executor(CoreViews):
    """Trade a run's agent on a bar feed with the paper broker, journaling everything.

    ``options``: how (:class:`~hybrid_trader.live.executor_parts.ExecutorOptions`: the traded dates, the feed's
    market and bar size, the orders' tag, the LLM, the live point and the wall-clock rules; default: a replay of
    every day). ``bridge``: NinjaTrader's ATI bridge; the paper orders are then mirrored to it
    (:mod:`hybrid_trader.live.broker_link`). ``standing``: the real account's standing to start from
    (``live.account_sync``; None: the preset's start). ``say``: the progress lines; ``clock``: the wall clock judging
    a followed feed's bars (``options.max_bar_age_s``).

    Its parts: the feed's position :attr:`feed` (``live.feed_position``), the trading :attr:`trading` (``live.
    executor_trading``: the core, the day, the NinjaTrader link, the policy and their journal rows), the snapshots
    :attr:`snapshots` (``live.snapshot``), the summary :attr:`summary`, and :attr:`lock`.
    """

    def __init__(self, run_dir: str | Path, journal: str | Path | Journal, options: ExecutorOptions | None = None, *,
                 bridge: NinjaTraderBridge | None = None, standing: AccountStanding | None = None, say: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        opts = options or ExecutorOptions()
        self.run = RunDir(run_dir).require()
        self.config: RunConfig = self.run.load_config(RunConfig)
        self.say = say or quiet
        self.summary = ExecutorSummary()
        """What the run did (its ``notes`` are :attr:`notes`)."""
        owned = not isinstance(journal, Journal)
        journal = journal if isinstance(journal, Journal) else Journal(journal, writer=f"run {run_dir}")
        self.run_tag = opts.run_tag or self.run.path.name
        self.contract = self._contract(opts.market)
        bar_minutes = int(opts.bar_minutes)
        live_point = LivePoint(journal, opts.live_from, opts.max_bar_age_s, clock, bar_minutes)
        self.live = self._policy(opts)
        """The policy and what the status line says of its advice (``live.live_policy``)."""
        self.feed = FeedPosition(journal, self.summary, live_point, self.contract.symbol, bar_minutes,
                                 self.live.raw_keys)
        """The feed's position: the bars and features so far, the gate, the live point (``live.feed_position``)."""
        self.trading = ExecutorTrading(self.config, self.contract, self.feed, self.live, opts, bridge, standing,
                                       self.say)
        """The trading: the core, the day, the NinjaTrader link, the policy, their journal rows
        (``live.executor_trading``)."""
        self.lock = threading.RLock()
        """Held by each bar and by the flat guard's actions (``live.deadline``): they never interleave, and the
        journal's one connection is used by one thread at a time."""
        self.identity = run_identity(self)
        self._claim(owned)
        self.trading.claimed(self.run_tag if bridge is None else order_tag(self.run_tag, journal.run_id(),
                                                                            bridge.account))
        self.snapshots = Snapshots(self)  # the journal's latest snapshot, restored when it fits (live.snapshot)
        self.snapshots.restore()
        if self.snapshots.restored_ns is not None:  # a stop right after the snapshot's bar
            self.trading.replay_stop(True, self.snapshots.restored_ns)

    # ------------------------------------------------------------------ set-up
    def _contract(self, market: str | None) -> ContractSpec:
        """The feed's contract: its market, else the run's ``env.market``, else the market the run trained on."""
        trained, where = run_market(self.config)
        market = market or self.config.env.market or trained  # the feed's, by run.market.priced_market's rule, wins
        if not market:
            raise UserError(f"neither the run {self.run.path} nor the feed names the market ({where})",
                            fix="restore the run's data folder (its files' names say the market), or replay a "
                                "file whose name says it")
        return get_contract(market)

    def _policy(self, opts: ExecutorOptions) -> LivePolicy:
        """The evaluation's deterministic policy of the run (``live.live_policy.live_policy``; phases 1-2 from
        the numpy cache without torch where it holds this model: ``live.policy_cache``), with its notes."""
        live, _ = executor_policy(self.run, self.config, opts, say=self.say)
        self.notes.extend(live.notes)
        return live

    def _claim(self, owned: bool) -> None:
        """The journal made this run's before any row is written (another run's refused: ``Journal.claim``)."""
        try:
            note = self.journal.claim(self.identity)
        except BaseException:
            if owned:
                self.journal.close()
            raise
        if note:
            self.notes.append(note)

    # ------------------------------------------------------------------ views of the parts
    @property
    def journal(self) -> Journal:
        return self.feed.journal

    @property
    def policy(self) -> Any:
        return self.live.policy

    @property
    def advice_calibration(self) -> str:
        return self.live.calibration

    @property
    def advisor_label(self) -> str:
        """Who advises, for the status line (an asynchronous LLM with its health)."""
        if isinstance(self.policy, AdvisedPolicy) and self.policy.asynchronous:
            return f"{self.live.label} ({self.policy.health()})"
        return self.live.label

    @property
    def notes(self) -> list[str]:
        """What the run should tell its user (the summary's notes)."""
        return self.summary.notes

    @property
    def phase(self) -> int:
        return self.config.env.phase

    @property
    def bar_minutes(self) -> int:
        return self.feed.bars.bar_minutes

    @property
    def trade_dates(self) -> set | None:
        return self.trading.trade_dates

    @property
    def order_tag(self) -> str:
        """What the order ids start with: with NinjaTrader the account, the journal's run id and the run tag
        (``ninjatrader.order_tag``: unique per account and run there); paper orders never leave the journal, so the
        run tag alone."""
        return self.trading.order_tag

    @property
    def live_point(self) -> LivePoint:
        return self.feed.live_point

    @property
    def bars(self) -> BarsSoFar:
        return self.feed.bars

    @property
    def feature_rows(self) -> FeaturesSoFar:
        return self.feed.rows

    @property
    def features(self) -> IncrementalFeatures | None:
        return self.feed.features

    @property
    def gate(self) -> BarGate | None:
        return self.feed.gate

    @property
    def core(self) -> TradingCore:  # type: ignore[override]
        return self.trading.core

    @property
    def rules(self) -> PropFirmRules:
        return self.trading.rules

    @property
    def observer(self) -> ObservationBuilder:
        return self.trading.core.observer

    @property
    def day(self) -> DayState:
        return self.trading.day

    @property
    def window(self) -> DayWindow:
        return self.trading.window

    @property
    def link(self) -> BrokerLink | None:
        return self.trading.link

    @property
    def latencies_ms(self) -> list[float]:
        """Per decision: ms from the bar's arrival to the decision and its orders committed to the journal."""
        return self.trading.latencies_ms

    @property
    def last_decision(self) -> tuple[int, int, list[str]] | None:
        """The last decision: (bar time ns, action, reason codes), for the status line."""
        return self.trading.last_decision

    # ------------------------------------------------------------------ snapshots (live.snapshot)
    def day_state(self) -> dict[str, Any]:
        """The day's bookkeeping a snapshot keeps (``ExecutorTrading.day_state``)."""
        return self.trading.day_state()

    def resume_from(self, features: IncrementalFeatures, gate: BarGate, bars: BarsSoFar,
                    feature_rows: FeaturesSoFar, core: tuple[dict[str, Any], Any, Any], day: dict[str, Any]) -> None:
        """Continue from a snapshot's parts: the feed's features, gate, bars and feature rows, then the trading's core
        rebuilt on them with ``core``'s (state, broker, account) and the day's bookkeeping (:meth:`day_state`)."""
        self.feed.resume(features, gate, bars, feature_rows)
        self.trading.resume(core, day)

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
            self.trading.check_feed_end(self.snapshots)
            self.journal.commit()
            self.trading.finish_summary()
        return self.summary

    def on_bar(self, bar: Bar) -> None:
        """One arriving bar, under :attr:`lock` (the flat guard's thread never acts mid-bar): accepted (the gate, the
        live point, its journal row, the bars and features so far), traded (inside a traded window: the day, the
        decision, its orders and fills, their journal rows), ended (the snapshot, the commit, NinjaTrader's orders)."""
        with self.lock:
            step = self.feed.accept(bar, self.snapshots)
            if step is None:  # a bar the restored snapshot holds, or one refused (journaled with its reason)
                return
            traded = self.trading.trade(step)
            self.trading.bar_done(step, traded, self.snapshots)

    def commit_when_idle(self, feed: Iterable[Bar]) -> None:
        """A followed feed commits the journal's batch (:meth:`commit_batch`) each time it waits for its next bar."""
        if isinstance(feed, FollowFeed):
            feed.on_idle = self.commit_batch

    def commit_batch(self) -> None:
        """Commit the journal's batch of untraded bars now (the feed waits for its next bar: the commit costs no bar
        any time, and a watcher of the journal sees every bar that came, not all but the latest)."""
        with self.lock:
            self.feed.batch.commit()

    # ------------------------------------------------------------------ the end
    def stop(self, on_exit: OnExit) -> None:
        """Stop early (Ctrl-C, SIGTERM): ``flatten`` or ``protect`` (``ExecutorJournal.stop``)."""
        with self.lock:
            self.trading.stop(on_exit)

    def flatten(self, code: str, why: str) -> bool:
        """Flatten now, whatever the bar (the flat guard: ``live.deadline``; ``ExecutorJournal.flatten``)."""
        with self.lock:
            return self.trading.flatten(code, why)

    def holds_position(self) -> bool:
        """Whether anything is open: the paper position, an entry not yet filled, or NinjaTrader's last position."""
        return self.trading.holds_position()

    def trade_log(self) -> pd.DataFrame:
        """The trades so far (columns ``TRADE_LOG_COLUMNS``, ET times), as evaluation writes them."""
        bars = self.feed.bars
        if not bars.time_ns:
            return pd.DataFrame(columns=list(TRADE_LOG_COLUMNS))
        index = pd.DatetimeIndex(pd.to_datetime(bars.time_ns, utc=True)).tz_convert(EASTERN)
        return trades_frame(self.broker.trades, index, bars.bar_minutes)

    def close(self) -> None:
        if isinstance(self.policy, AdvisedPolicy) and self.policy.asynchronous:
            self.policy.close()
        self.journal.close()
