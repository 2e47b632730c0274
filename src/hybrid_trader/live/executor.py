"""The executor: a trained run trading a bar feed, every step journaled.

Per arriving bar: the gate (a rejected bar is journaled with its reason code and
skipped), the incremental features (equal to the batch ones), then, inside the trading
window of a traded day, the same :class:`~hybrid_trader.env.core.TradingCore` the
environment drives (the decided action, the broker's fills, the account's rules, the
mask with the risk veto, the observation) and the same policy objects evaluation uses
(``evaluation.policies.AgentPolicy``, its forward in numpy: ``live.fast_policy``; phase 3:
``HybridAgentPolicy`` with the run's student, or RL-only, in torch). So a replay of the run's
test days makes the trades ``evaluate`` reports (``tests/live/test_executor_parity.py``).

**Days and windows** (as ``TradingEnv`` builds them): a day's window starts on its first
bar inside ``env.trade_start``..``trade_end`` (ended by the rules' flat-by time) at or
after the feature warm-up; its last bar is the one whose end reaches the window's end;
entries are decided on bars up to ``env.last_entry``; a position left at the window's last
bar is closed at its close (``SESSION_END``). Bars outside the traded days only feed the
features (the history before the test days, without trading).

**Restarts.** The feed is read from its first bar every time (the features need the
history). Bars, decisions and account rows already in the journal are not written again;
orders and fills have deterministic ids (``live.ninjatrader.order_id``) and are journaled
idempotently, so nothing is sent or booked twice. When the replay reaches the journal's
last bar, the position and balance it rebuilt are checked against the journal's fills
and account row; a difference stops the executor with an error naming both.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from hybrid_trader.account_state import AccountState
from hybrid_trader.actions import ACTION_NAMES
from hybrid_trader.calendar import EASTERN, session_minute
from hybrid_trader.env.account import AccountStatus, PropFirmAccount
from hybrid_trader.env.broker import TRADE_LOG_COLUMNS, Trade, trades_frame
from hybrid_trader.env.core import TradingCore, make_broker, window_minutes
from hybrid_trader.env.observation import ObservationBuilder
from hybrid_trader.env.rules import get_rules
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.evaluate import load_policy, sessions_for
from hybrid_trader.evaluation.policies import AgentPolicy, HybridAgentPolicy
from hybrid_trader.features.feature_set import N_BAR, N_MARKET, make_windows
from hybrid_trader.features.names import WINDOW
from hybrid_trader.live.clock import EasternClock
from hybrid_trader.live.fast_policy import numpy_policy
from hybrid_trader.live.features import IncrementalFeatures
from hybrid_trader.live.feeds import Bar, BarGate
from hybrid_trader.live.journal import Journal
from hybrid_trader.live.ninjatrader import order_id
from hybrid_trader.markets import get_contract
from hybrid_trader.run import RunDir
from hybrid_trader.training.config import RunConfig
from hybrid_trader.training.market import load_market, make_veto

OnExit = Literal["flatten", "protect"]
EXIT_MANUAL = "MANUAL_EXIT"
"""Exit reason of a position flattened when the executor stops (``--on-exit flatten``)."""
BATCH_BARS = 1000
BATCH_S = 1.0
"""Journal rows of bars outside the trading window are committed together, at most this many or this old:
one fsync for many (a kill loses the batch, and the restart's replay writes it again)."""


@dataclass
class ExecutorSummary:
    """What a run of the executor did (the CLI's ``--json`` line)."""

    bars: int = 0
    rejected: int = 0
    decisions: int = 0
    trades: int = 0
    net_pnl: float = 0.0
    balance: float = 0.0
    account_status: str = ""
    recovered_bars: int = 0
    """Bars replayed from the journal's history at start (a restart), nothing sent again."""
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _LiveArrays:
    """The bars and features seen so far, in arrays the observation builder indexes by bar."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        self.open: list[float] = []
        self.high: list[float] = []
        self.low: list[float] = []
        self.close: list[float] = []
        self.atr: list[float] = []
        self.time_ns: list[int] = []
        self.bar = np.zeros((capacity, N_BAR), dtype=np.float32)
        self.market = np.zeros((capacity, N_MARKET), dtype=np.float32)
        self.windows = make_windows(self.bar)

    def push(self, bar: Bar, row_bar: np.ndarray, row_market: np.ndarray, atr: float) -> bool:
        """Append one bar; True when the feature buffers were reallocated (rebind the observer)."""
        t = len(self.close)
        grown = False
        if t >= len(self.bar):
            self.bar = np.concatenate([self.bar, np.zeros_like(self.bar)])
            self.market = np.concatenate([self.market, np.zeros_like(self.market)])
            self.windows = make_windows(self.bar)
            grown = True
        self.bar[t] = row_bar
        self.market[t] = row_market
        self.open.append(bar.open)
        self.high.append(bar.high)
        self.low.append(bar.low)
        self.close.append(bar.close)
        self.atr.append(atr)
        self.time_ns.append(int(bar.time_ns or 0))
        return grown


class Executor:
    """Trade a run's agent on a bar feed with the paper broker, journaling everything.

    ``market`` and ``bar_minutes``: the feed's (the run's ``env.market`` wins). ``trade_dates``: the
    trading dates to trade (None: every day); the other bars only
    warm the features up. ``run_tag`` names the orders (default: the run folder's name).
    """

    def __init__(self, run_dir: str | Path, journal: str | Path | Journal, *,
                 trade_dates: Iterable[Any] | None = None, run_tag: str | None = None,
                 market: str | None = None, bar_minutes: int = 1, say: Any = None) -> None:
        self.run = RunDir(run_dir).require()
        self.config: RunConfig = self.run.load_config(RunConfig)
        cfg = self.config.env
        self.say = say or (lambda *a: None)
        self.notes: list[str] = []
        self.journal = journal if isinstance(journal, Journal) else Journal(journal)
        self.run_tag = run_tag or self.run.path.name
        self.trade_dates = None if trade_dates is None else {np.datetime64(pd.Timestamp(d).date(), "D")
                                                              for d in trade_dates}
        data = self.config.data
        market = cfg.market or market or data.market or ("NQ" if data.path is None else None)
        if not market:
            raise UserError(f"neither the run {self.run.path} nor the feed names the market",
                            fix="set data.market in the run's config.yaml")
        self.contract = get_contract(market)
        self.bar_minutes = int(bar_minutes)
        self.rules = get_rules(cfg.rules, cfg.account, **cfg.rules_overrides)
        self.account = PropFirmAccount(self.rules)
        self.account.check_contracts(cfg.contracts, self.contract)
        self.broker = make_broker(cfg, self.contract)
        self.phase = cfg.phase
        self.arrays = a = _LiveArrays()
        n_actions = 3 if cfg.phase == 1 else 6
        self.observer = ObservationBuilder(cfg.phase, a.windows, a.market, a.atr, a.close,
                                           self.rules.trailing_drawdown)
        veto = make_veto(self.config.risk) if cfg.phase == 3 else None  # as evaluation: the veto is phase 3's
        self.core = TradingCore(self.broker, self.account, self.observer, n_actions, a.open, a.high, a.low,
                                a.close, a.atr, veto)
        self.window = window_minutes(cfg, self.account)
        self.policy = self._policy()
        self.features: IncrementalFeatures | None = None
        self.gate: BarGate | None = None
        self.summary = ExecutorSummary()
        self.summary.notes = self.notes
        # the day's state
        self._date: np.datetime64 | None = None
        self._day_open = False
        self._day_done = False
        self._pending = 0
        self._entry_id: str | None = None
        self._trades_seen = 0
        # restart: what the journal already holds
        j = self.journal
        self._journaled_bars = j.last_time("bars")
        self._journaled_decisions = j.last_time("decisions")
        self._journaled_account = j.last_time("account")
        self._recovery_checked = self._journaled_bars is None
        self.latencies_ms: list[float] = []
        """Per decision: ms from the bar's arrival to the decision and its orders committed to the journal."""
        self._decided = False
        self._batched = 0
        self._batch_started: float | None = None
        self._clock = EasternClock()

    # ------------------------------------------------------------------ set-up
    def _policy(self) -> Any:
        """The evaluation's deterministic policy of the run (phase 3: the student, or RL-only)."""
        model, vec, _ = load_policy(self.run.path, self.config.ppo.device, self.config.ppo.normalize_observations)
        self.model = model
        self.vec = vec
        if self.phase != 3:
            agent = AgentPolicy(model, vec)
            fast, why = numpy_policy(agent)  # the same decisions, ~20x faster than torch per call
            if fast is None:
                self.notes.append(f"the policy runs in torch ({why}: no numpy forward for it)")
            return fast or agent
        llm = self.config.llm.in_run()
        if llm.backend == "student":
            # phase 3 only: the advisor's back ends load torch models of their own.
            from hybrid_trader.llm import build_advisor

            advisor = build_advisor(llm)
            return HybridAgentPolicy(model, vec, advisor, None, self.config.fusion, max_samples=0)
        self.notes.append(f"llm.backend {llm.backend}: the executor decides RL-only (no LLM may block a "
                          "decision; only the distilled student advises every bar)")
        return HybridAgentPolicy(model, vec, None, None, self.config.fusion, use_llm=False, max_samples=0)

    # ------------------------------------------------------------------ the policy's view of the state
    @property
    def current_index(self) -> int:
        return self.core.t

    @property
    def veto_counts(self) -> dict[str, int]:
        return self.core.veto_counts

    @property
    def veto_steps(self) -> int:
        return self.core.veto_steps

    @property
    def decision_steps(self) -> int:
        return self.core.decision_steps

    def action_masks(self) -> np.ndarray:
        return self.core.mask.copy()

    def account_snapshot(self) -> AccountState:
        return self.core.account_snapshot()

    # ------------------------------------------------------------------ the loop
    def run_feed(self, feed: Iterable[Bar]) -> ExecutorSummary:
        """Process every bar of ``feed``; KeyboardInterrupt propagates (see :meth:`stop`)."""
        for bar in feed:
            self.on_bar(bar)
        self.journal.commit()
        self._finish_summary()
        return self.summary

    def on_bar(self, bar: Bar) -> None:
        """One arriving bar: gate, features, and inside a traded window the decision and its orders."""
        arrived = time.perf_counter()
        if self.features is None:
            self.features = IncrementalFeatures(self.contract.symbol, self.bar_minutes)
            self.gate = BarGate(market=self.contract.symbol, bar_minutes=self.bar_minutes, check_tick_grid=False)
        gate = self.gate
        assert gate is not None
        tns = bar.time_ns
        self.journal.begin()  # committed after a traded bar, or every BATCH_BARS / BATCH_S of the others
        if self._batch_started is None:
            self._batch_started = arrived
        replayed = tns is not None and self._journaled_bars is not None and tns <= self._journaled_bars
        rejection = gate.check(bar)
        if rejection is not None:
            self.summary.rejected += 1
            if not replayed:
                self.journal.record_bar(bar.time, bar.open, bar.high, bar.low, bar.close, bar.volume,
                                        accepted=False, reason=rejection.code, message=rejection.message,
                                        raw=bar.raw)
            self._commit_if_due(False, arrived)
            return
        assert tns is not None and bar.time is not None
        if not replayed:
            self.journal.record_bar(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        else:
            self.summary.recovered_bars += 1
        self.summary.bars += 1
        row = self.features.append(tns, bar.open, bar.high, bar.low, bar.close, bar.volume)
        if self.arrays.push(bar, row.bar, row.llm_market, row.atr):
            self.observer.rebind(self.arrays.windows, self.arrays.market)
        if not replayed and not self._recovery_checked:
            self._check_recovery()
        self._decided = False
        self._commit_if_due(self._trade(row.index, bar.time, tns, arrived), arrived)
        if self._decided:  # arrival -> decision and its orders committed to the journal
            self.latencies_ms.append((time.perf_counter() - arrived) * 1000.0)

    def _commit_if_due(self, traded: bool, arrived: float) -> None:
        """Commit the journal's open transaction after a traded bar, or when the batch is full or old."""
        self._batched += 1
        started = self._batch_started if self._batch_started is not None else arrived
        if traded or self._batched >= BATCH_BARS or arrived - started >= BATCH_S:
            self.journal.commit()
            self._batched = 0
            self._batch_started = None

    def _trade(self, t: int, time_et: pd.Timestamp, tns: int, arrived: float) -> bool:
        """Bar t inside a traded window: the day's bookkeeping and the decision; False outside any."""
        wall = self._clock.wall_ns(tns)
        date = self._clock.trading_date(wall)
        minute = session_minute(EasternClock.minute_of_day(wall))
        start, end, last_entry = self.window
        if date != self._date:
            if self._day_open:  # the previous window's last bar never came: close at this bar
                self._close_missed_window(t)
            self._date, self._day_open, self._day_done = date, False, False
        traded = self.trade_dates is None or date in self.trade_dates
        inside = traded and start <= minute < end and t >= max(self.features.warmup if self.features else 0,
                                                                WINDOW - 1)
        if not inside:
            if self._day_open and minute >= end:
                self._close_missed_window(t)
                return True
            return False
        last = minute + self.bar_minutes >= end
        core = self.core
        if not self._day_open:
            if self._day_done or last:
                return False
            core.t = t
            self.account.begin_day(t)
            core.record()
            self._day_open = True
        else:
            n_before = len(self.broker.trades)
            breach = core.process_bar(t, self._pending, last)
            core.record()
            self._journal_fills(t, tns, n_before)
            self._pending = 0
            if breach:
                self.journal.record_error("account", f"{self.rules.name}: trailing threshold breached at "
                                          f"{time_et}; trading halted (account {self.account.status.value})", tns)
            if last:
                self._day_open, self._day_done = False, True
                self._journal_account(tns)
                return True
        core.last_entry = t if minute <= last_entry else -1
        vetoes_before = dict(core.veto_counts)
        obs = core.observe()
        mask = core.mask.copy()
        codes = [f"veto:{c}" for c, n in core.veto_counts.items() if n > vetoes_before.get(c, 0)]
        if self.broker.side == 0:
            if not self.account.can_enter:
                codes.append(f"account:{self.account.status.value}")
            if core.last_entry < 0:
                codes.append("window:after_last_entry")
        action = int(self.policy(obs, mask, self))
        self._pending = core.apply(action)
        self.summary.decisions += 1
        self._journal_decision(tns, obs, mask, action, codes, arrived)
        self._journal_account(tns)
        return True

    def _close_missed_window(self, t: int) -> None:
        """A window whose last bar never arrived (a gap, an early close): the day ends at the previous bar's
        close as the environment's would (it knows that bar was the window's last; a decision made on it and
        its pending entry are dropped), noted in the journal."""
        prev = t - 1
        n_before = len(self.broker.trades)
        self.account.close_session(prev, self.broker, self.arrays.close[prev])
        self._journal_fills(prev, self.arrays.time_ns[prev], n_before)
        self._drop_pending("the trading window ended before its fill")
        self.journal.record_error("window", "the trading window's last bar did not arrive; the day was ended at "
                                  f"bar {pd.Timestamp(self.arrays.time_ns[prev], tz='UTC').tz_convert(EASTERN)}",
                                  self.arrays.time_ns[prev])
        self._pending = 0
        self._day_open, self._day_done = False, True

    def _drop_pending(self, why: str) -> None:
        """An entry decided but never filled: cancelled in the journal."""
        if self._entry_id is not None:
            self.journal.update_order_state(self._entry_id, "cancelled", note=why)
            self._entry_id = None
        self._pending = 0

    # ------------------------------------------------------------------ journal
    def _journal_decision(self, tns: int, obs: np.ndarray, mask: np.ndarray, action: int, codes: list[str],
                          arrived: float) -> None:
        """The decision (probabilities, reason codes: ``veto:<code>``, ``account:<status>``,
        ``window:after_last_entry``) and the entry order it makes."""
        if self._pending:
            oid = order_id(self.run_tag, _utc(tns), "entry")
            self.journal.record_order(oid, tns, "entry", "BUY" if self._pending > 0 else "SELL",
                                      self.broker.qty, state="sent")
            self._entry_id = oid
        latency = (time.perf_counter() - arrived) * 1000.0  # rows written, not yet committed
        self._decided = True
        if self._journaled_decisions is not None and tns <= self._journaled_decisions:
            return
        decision = getattr(self.policy, "last_decision", None)  # phase 3: the hybrid agent's Decision
        advice = None
        if decision is None:
            probs = self._probabilities(obs, mask)
        else:
            probs = decision.probs
            codes = [f"fusion:{decision.reason}", *codes]
            if decision.advice is not None:
                advice = {"action": ACTION_NAMES[decision.advice.action],
                          "confidence": round(float(decision.advice.confidence), 4),
                          "backend": decision.advice.backend, "trust": round(float(decision.trust), 4)}
        self.journal.record_decision(tns, action, {ACTION_NAMES[i]: round(float(p), 6) for i, p in enumerate(probs)},
                                     advice=advice, rule_codes=codes, latency_ms=latency)

    def _probabilities(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The masked policy distribution the deterministic action is the mode of."""
        last = getattr(self.policy, "last_probs", None)  # the numpy policy's, of this decision
        if last is not None:
            return last
        # torch only here: the decision itself goes through the evaluation's policy object.
        import torch as th

        x = self.vec.normalize_obs(obs) if self.vec is not None else obs
        with th.no_grad():
            obs_t, _ = self.model.policy.obs_to_tensor(x)
            dist = self.model.policy.get_distribution(obs_t, action_masks=mask[None])
            return dist.distribution.probs[0].numpy()

    def _journal_fills(self, t: int, tns: int, n_before: int) -> None:
        b = self.broker
        new: list[Trade] = b.trades[n_before:]
        if self._entry_id is not None and (b.side or new):
            entry_price = new[0].entry_price if new and new[0].entry_index == t else b.entry
            self.journal.record_fill(self._entry_id, b.qty, entry_price, tns, fill_id=self._entry_id)
            self.journal.update_order_state(self._entry_id, "filled")
            self._entry_id = None
        for trade in new:
            oid = order_id(self.run_tag, _utc(tns), f"exit-{trade.exit_reason}")
            self.journal.record_order(oid, tns, "exit", "SELL" if trade.side > 0 else "BUY", trade.contracts,
                                      state="filled", note=trade.exit_reason)
            self.journal.record_fill(oid, trade.contracts, trade.exit_price, tns, fill_id=oid)

    def _journal_account(self, tns: int) -> None:
        if self._journaled_account is not None and tns <= self._journaled_account:
            return
        acc = self.account
        self.journal.record_account(tns, acc.status.value, {
            "balance": acc.balance, "threshold": acc.threshold, "peak": acc.peak, "equity": self.core.equity_now,
            "position": self.broker.side * (self.broker.qty if self.broker.side else 0),
            "day_pnl": acc.balance - acc.day_start_balance, "verdict": acc.verdict.value})

    def _check_recovery(self) -> None:
        """At the first bar after the journal's last one: the rebuilt state must be the journal's."""
        self._recovery_checked = True
        pos = self.journal.position_from_fills()
        have = self.broker.side * (self.broker.qty if self.broker.side else 0)
        if pos.qty != have:
            raise UserError(f"the journal {self.journal.path} holds a position of {pos.qty} but the replay of its "
                            f"bars rebuilt {have}: the journal belongs to another run, feed or config",
                            fix="use a new --journal file for this run and feed")
        last = self.journal.last_account()
        if last is not None and not math.isclose(float(last.snapshot.get("balance", math.nan)),
                                                 self.account.balance, abs_tol=1e-6):
            raise UserError(f"the journal {self.journal.path} ends with a balance of {last.snapshot.get('balance')} "
                            f"but the replay of its bars rebuilt {self.account.balance}",
                            fix="use a new --journal file for this run and feed")
        self.say(f"recovered from {self.journal.path}: {self.summary.recovered_bars} bars replayed, position "
                 f"{have}, balance {self.account.balance:.2f}")

    # ------------------------------------------------------------------ the end
    def stop(self, on_exit: OnExit) -> None:
        """Stop early (Ctrl-C): ``flatten`` closes an open position at the last close; ``protect`` keeps it."""
        self.summary.interrupted = True
        self._drop_pending("stopped before its fill")
        self.journal.commit()
        t = self.core.t
        if on_exit == "flatten" and self.broker.side and t >= 0:
            n_before = len(self.broker.trades)
            trade, cash = self.broker.close_at_bar_close(t, self.arrays.close[t], EXIT_MANUAL)
            self.account.book(t, cash, trade.net_pnl)
            self._journal_fills(t, self.arrays.time_ns[t], n_before)
            self._journal_account(self.arrays.time_ns[t])
        elif self.broker.side:
            self.notes.append("stopped with an open position, left protected by its stop and target "
                              "(--on-exit protect)")
        self._finish_summary()

    def _finish_summary(self) -> None:
        s = self.summary
        s.trades = len(self.broker.trades)
        s.net_pnl = float(sum(tr.net_pnl for tr in self.broker.trades))
        s.balance = float(self.account.balance)
        s.account_status = self.account.status.value
        if self.account.status is AccountStatus.BREACHED:
            self.notes.append("the account breached its trailing threshold: trading halted")

    def trade_log(self) -> pd.DataFrame:
        """The trades so far (columns ``TRADE_LOG_COLUMNS``, ET times), as evaluation writes them."""
        if not self.arrays.time_ns:
            return pd.DataFrame(columns=list(TRADE_LOG_COLUMNS))
        index = pd.DatetimeIndex(pd.to_datetime(self.arrays.time_ns, utc=True)).tz_convert(EASTERN)
        return trades_frame(self.broker.trades, index, self.bar_minutes)

    def close(self) -> None:
        self.journal.close()


def _utc(tns: int) -> pd.Timestamp:
    return pd.Timestamp(tns, tz="UTC")


def split_dates(run_dir: str | Path, split: str) -> list[np.datetime64] | None:
    """The trading dates of the run's ``split`` (``all``: None, every day)."""
    if split == "all":
        return None
    run = RunDir(run_dir).require()
    config = run.load_config(RunConfig)
    market = load_market(config.data, config.split)
    sessions = sessions_for(market, split)
    return [market.bars.session_dates[s] for s in sessions]
