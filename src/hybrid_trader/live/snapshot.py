"""Executor snapshots: a restart replays the bars after the latest snapshot, not the whole history.

The features carry state from the first bar of the feed (TA-Lib's recursions, pandas'
running sums: ``features.incremental``), so a restart used to replay every bar of the history
through the features, the broker and the account (~4 s for three months of 1-minute bars).
Now the executor journals its state (:class:`Snapshots`), in the transaction of the bar it follows, on the first bar
of each trading date and every :data:`SNAPSHOT_BARS` bars (only on bars outside a trading window, so that a decision
never waits for one; the journal keeps the latest): the incremental features, the bar gate, the bars so far and their
feature rows, the paper broker, the prop-firm account, the core's counters and the day's bookkeeping, pickled; each
saved and restored through its owner's public methods (``TradingCore.state``/``restore``,
``ExecutorTrading.day_state``/``Executor.resume_from``, ``ExecutorSummary.counts``/``restore_counts``).
Its size does not grow with the history: the prices and times of the bars stay in the journal's ``bars`` table (read
back at the restore: :meth:`Journal.bar_history`), the derived series keep their longest look-back, the feature rows
the newest observation's window. TA-Lib's stream handles do not pickle: they are opened again on the history they
were fed, which gives the values the updated handles would (TA-Lib's contract: a handle equals its function API on the
same bars; ``tests/live/test_snapshot.py`` checks the features against the batch ones).

At start the executor loads the journal's latest snapshot when its key matches (the
format, the program's version, the run's config.yaml and model files by sha256, the
market, bar size, traded dates and order tag): it skips the feed's bars up to the
snapshot's bar (that bar must be the one the snapshot holds, else the feed is not the
journal's: an error), then replays the rest of the journaled bars as before and checks
the position and balance at the first new bar. A snapshot of another run, model or
configuration, or one that cannot be read, is not used: the executor replays the whole
history, as without snapshots, and a note says why (the replay rebuilds the same state,
so falling back is safe; refusing would stop a trader over a file it can do without).
Not snapshotted: phase 3 runs advised by an asynchronous LLM (the advice in force): they
replay the whole history. Phase 3 with the run's student is: the student answers each bar
from its observation, and neither the hybrid agent nor the risk veto keeps state between
bars. With ``--broker ninjatrader`` a snapshot is taken only while the mirror is flat with
no order to send (its state is then the journal's halts, read again at restore).

The state is a pickle (as the run's ``vecnormalize.pkl``): open a journal you trust only.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hybrid_trader import __version__
from hybrid_trader.calendar import EASTERN
from hybrid_trader.errors import UserError
from hybrid_trader.live.feeds import Bar
from hybrid_trader.live.policy_cache import cache_key
from hybrid_trader.run import sha256_file
from hybrid_trader.run.model_files import final_model

if TYPE_CHECKING:
    from hybrid_trader.live.executor import Executor

SNAPSHOT_FORMAT = 3
"""Bump when the pickled state changes: a snapshot of another format is not used (the whole history is replayed).
2: the broker's levels on the tick grid (``Broker.tick``, ``Broker.breakeven``); 3: the bars so far
(``data.bars_so_far.BarsSoFar``) and their feature rows (``features.features_so_far.FeaturesSoFar``) in place of
the executor's arrays. (Saving through public methods kept format 3's layout, key for key: ``tests/live/
test_snapshot.py``.)"""
SNAPSHOT_BARS = 2000
"""Bars (outside trading windows) after which a snapshot is taken even without a new trading date."""
_STATE = ("features", "gate", "bars", "feature_rows", "broker", "account", "core", "executor", "summary")
_READ_ERRORS = (pickle.UnpicklingError, EOFError, AttributeError, ImportError, KeyError, TypeError,
                ValueError, IndexError)


def unsupported(ex: Executor) -> str:
    """Why the executor takes no snapshots ("" when it does). Phase 3 with the run's student is snapshotted: the
    student advises every bar from that bar's observation, the hybrid agent and the risk veto keep no state."""
    if ex.phase == 3 and getattr(ex.policy, "advise_batch", None) is None:
        return "phase 3 with an asynchronous LLM (the advice in force is not snapshotted)"
    return ""


def run_identity(ex: Executor) -> dict[str, str]:
    """What the executor's journal belongs to (``Journal.claim``): the run folder, its order tag, its model and
    normaliser (sha256), its config.yaml (sha256) and the market."""
    run = ex.run
    entry = run.manifest.expected(run.config_path)
    model_path, vec_path = final_model(run, ex.config.ppo.normalize_observations)
    return {"run": str(run.path.resolve()), "run_tag": ex.run_tag, "model": cache_key(run, model_path, vec_path),
            "config": entry["sha256"] if entry is not None else sha256_file(run.config_path),
            "market": ex.contract.symbol}


def snapshot_key(ex: Executor) -> str:
    """What a snapshot must have been taken with to be used (JSON: the note of a mismatch can name it)."""
    ident = ex.identity
    key = {"format": SNAPSHOT_FORMAT, "version": __version__, "config": ident["config"], "model": ident["model"],
           "market": ident["market"], "bar_minutes": ex.bar_minutes, "run_tag": ex.run_tag,
           "trade_dates": None if ex.trade_dates is None else hashlib.sha256(
               ",".join(sorted(str(d) for d in ex.trade_dates)).encode()).hexdigest()}
    return json.dumps(key, sort_keys=True)


def take(ex: Executor) -> bytes:
    """The executor's state after its latest bar, pickled (not compressed: zlib took longer than writing the
    bytes it saved, 0.17 s against 0.05 s for three months of 1-minute bars)."""
    feed, trading = ex.feed, ex.trading
    assert feed.features is not None
    feed.features.keep_for_snapshot()  # the prices stay in the journal's bars
    core = trading.core
    state = {"features": feed.features, "gate": feed.gate, "bars": feed.bars, "feature_rows": feed.rows,
             "broker": core.broker, "account": core.account, "core": core.state(), "executor": trading.day_state(),
             "summary": ex.summary.counts()}
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def load(blob: bytes, prices: Callable[[], dict[str, np.ndarray]]) -> dict[str, Any]:
    """The state :func:`take` wrote, with the prices it left out (``prices()``: the journal's bars up to it) and its
    TA-Lib handles opened again; an error of :data:`_READ_ERRORS` if damaged or not the journal's bars."""
    state = pickle.loads(blob)
    if not isinstance(state, dict) or set(state) != set(_STATE):
        raise ValueError("not an executor snapshot")
    history = prices()
    state["features"].reopen(history)
    state["bars"].fill(history)
    return state


def restore(ex: Executor, state: dict[str, Any]) -> None:
    """Put a loaded state into the executor through its public methods: its parts (``Executor.resume_from``: the
    core rebuilt on the bars and feature rows, then given the broker, the account and its own state) and the
    summary's counts (``ExecutorSummary.restore_counts``)."""
    ex.resume_from(state["features"], state["gate"], state["bars"], state["feature_rows"],
                   (state["core"], state["broker"], state["account"]), state["executor"])
    ex.summary.restore_counts(state["summary"])


class Snapshots:
    """The executor's snapshots: restored at start (:meth:`restore`), the bars they hold skipped (:meth:`skip`),
    a new one taken when due (:meth:`maybe_take`)."""

    def __init__(self, ex: Executor) -> None:
        self.ex = ex
        self.off = unsupported(ex)
        self.key = "" if self.off else snapshot_key(ex)
        self.resume_ns: int | None = None
        """The restored snapshot's bar time while the feed's bars up to it are skipped."""
        self.restored_ns: int | None = None
        self._seen: Bar | None = None
        self._date: Any = None
        self._since = 0

    def restore(self) -> None:
        """Load the journal's latest snapshot into the executor when it fits; else note why (whole replay)."""
        ex = self.ex
        row = ex.journal.last_snapshot()
        if row is None:
            return
        tns, key, blob = row
        when = pd.Timestamp(tns, tz="UTC").tz_convert(EASTERN)
        if self.off:
            ex.notes.append(f"the journal's snapshot of {when} was not used ({self.off}): the whole history was "
                            "replayed")
            return
        if key != self.key:
            ex.notes.append(f"the journal's snapshot of {when} was taken with another run, model, configuration or "
                            f"program version ({_differences(key, self.key)}): not used, the whole history was "
                            "replayed")
            return
        try:
            state = load(blob, lambda: ex.journal.bar_history(tns))
        except _READ_ERRORS as err:
            ex.notes.append(f"the journal's snapshot of {when} could not be read ({type(err).__name__}: {err}): not "
                            "used, the whole history was replayed")
            return
        restore(ex, state)  # the NinjaTrader link follows the restored paper broker (``ExecutorTrading.resume``)
        if ex.link is not None:  # the mirror was flat with nothing to send: only the journal's halts to read
            ex.link.replayed_to(tns)
        self.resume_ns = self.restored_ns = tns
        self._date = ex.day.date
        ex.say(f"restored the snapshot of {when} from {ex.journal.path}: {ex.summary.bars} bars not replayed")

    def skip(self, bar: Bar) -> bool:
        """Whether the feed's ``bar`` is one the restored snapshot holds (it is not processed again); the feed's bar
        at the snapshot's time must be the one the snapshot holds."""
        resume = self.resume_ns
        if resume is None:
            return False
        tns = bar.time_ns
        if tns is None or tns <= resume:
            if tns == resume:
                self._seen = bar
            return True
        self.check_seen()
        return False

    def check_seen(self) -> None:
        """The feed has passed (or ended at) the snapshot's bar: it must have held the bar the snapshot holds, else the
        journal belongs to another feed (a UserError)."""
        resume = self.resume_ns
        if resume is None:
            return
        self.resume_ns = None
        a, seen = self.ex.feed.bars, self._seen
        if seen is None or (seen.open, seen.high, seen.low, seen.close) != (a.open[-1], a.high[-1], a.low[-1],
                                                                              a.close[-1]):
            when = pd.Timestamp(resume, tz="UTC").tz_convert(EASTERN)
            raise UserError(f"the feed's bar at {when} is not the one the journal {self.ex.journal.path} snapshotted "
                            f"({'missing' if seen is None else (seen.open, seen.high, seen.low, seen.close)} against "
                            f"{(a.open[-1], a.high[-1], a.low[-1], a.close[-1])}): the journal belongs to another "
                            "feed", fix="use a new --journal file for this run and feed")

    def maybe_take(self, replayed: bool, traded: bool, tns: int) -> bool:
        """After a bar: journal a snapshot (in the bar's open transaction) on the first bar of a trading date or
        every ``SNAPSHOT_BARS`` bars, outside trading windows and never while replaying; True when taken."""
        if self.off or replayed or traded:
            return False
        ex = self.ex
        trading = ex.trading  # attributes, not the executor's properties: the bar's walk stays here
        link = trading.link
        if link is not None and (link.pending or link.mirrored is not None):
            return False  # NinjaTrader's mirror holds no position and no order to send: nothing of it to keep
        self._since += 1
        date = trading.day.date
        if date == self._date and self._since < SNAPSHOT_BARS:
            return False
        trading.journal.record_snapshot(tns, self.key, take(ex))
        self._date, self._since = date, 0
        return True


def _differences(old: str, new: str) -> str:
    """The fields in which two snapshot keys differ, for the note."""
    try:
        a, b = json.loads(old), json.loads(new)
    except json.JSONDecodeError:
        return "an unreadable key"
    return ", ".join(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))) or "the key"
