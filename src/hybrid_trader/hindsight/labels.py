"""Outcome labels: what BUY and SELL would have earned from a state, in hindsight (look-ahead by design).

For a flat state at bar t (the decision bar), each entry is simulated with the
environment's own :class:`~hybrid_trader.env.broker.Broker` (the same object the
environment fills with, not a re-implementation): the order fills at bar t+1's open plus
slippage with the phase 1 ATR stop and target of bar t, stops and targets are checked
against each later bar's high and low (stop first), and the position is closed at the
close (minus slippage) of the last bar of the session's trading window or of the
horizon, whichever comes first. The label value is the trade's net P&L [$] after both
commissions and slippage; HOLD is worth 0. The label is the best action, except that
HOLD wins when the best entry earns less than ``margin`` dollars.

Labels read bars after t: they **look ahead by design** and may only teach on the
training split. :func:`build_labels` with ``purpose="train"`` refuses any state of a
validation or test day (a :class:`UserError` naming the split and its dates); labels of
later days are built only with ``purpose="evaluate"``, to measure a model on them. A
label never reads past its own session's window, so no training label uses a bar of
an evaluation day. The prop-firm account (trailing threshold, daily loss limit) is not
simulated: one trade on a fresh account does not reach it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hybrid_trader.actions import Action
from hybrid_trader.data.bars import Bars
from hybrid_trader.env import Broker, EnvConfig, TradingEnv
from hybrid_trader.env.broker import EXIT_SESSION_END
from hybrid_trader.errors import UserError

LABEL_ACTIONS: tuple[int, ...] = (int(Action.HOLD), int(Action.BUY), int(Action.SELL))
"""The actions a label chooses among (phase 1 entries)."""
ENTRY_MASK = np.array([True, True, True, False, False, False])
"""Legal actions of a flat state inside the entry window (the states labels exist for)."""
Purpose = Literal["train", "evaluate"]


@dataclass(frozen=True)
class LabelConfig:
    """How hindsight labels are computed."""

    horizon: int | None = 60
    """Bars after the fill a trade may run before it is closed at a bar's close; None: to the session's end."""
    margin: float = 0.0
    """Net P&L [$] the best entry must exceed for it to beat HOLD (HOLD is worth 0)."""

    def __post_init__(self) -> None:
        if self.horizon is not None and self.horizon < 1:
            raise UserError(f"label horizon {self.horizon!r} must be >= 1 bar or None", fix="use e.g. 60")
        if self.margin < 0:
            raise UserError(f"label margin {self.margin!r} must be >= 0 [$]", fix="use 0 or a positive amount")


@dataclass
class OutcomeLabels:
    """Hindsight outcomes of the labelled states (one entry per state)."""

    t: np.ndarray
    """Decision bar index (int64)."""
    session: np.ndarray
    """Session index of the decision bar (int32)."""
    pnl: np.ndarray
    """Net P&L [$] of HOLD (0), BUY and SELL, shape (n, 3)."""
    exit_index: np.ndarray
    """Bar index of the BUY and SELL trades' exits, shape (n, 2)."""
    label: np.ndarray
    """Best action (Action index: 0 HOLD, 1 BUY, 2 SELL), int8."""

    def __len__(self) -> int:
        return len(self.t)

    def counts(self) -> dict[str, int]:
        """How many states each action labels."""
        return {Action(a).name: int((self.label == a).sum()) for a in LABEL_ACTIONS}


def label_broker(env: TradingEnv) -> Broker:
    """A broker with the environment's contract, costs, stop and target (a fresh copy of ``env.broker``)."""
    b = env.broker
    return Broker(contracts=b.qty, point_value=b.dollars_per_point / b.qty, commission_per_side=b.commission / b.qty,
                  slippage_points=b.slip, tick_size=b.tick,
                  stop_atr=b.stop_atr, target_atr=b.target_atr, trail_atr=b.trail_atr)


def trade_outcome(broker: Broker, bars: Bars, atr: np.ndarray, t: int, side: int, last: int) -> tuple[float, int]:
    """Net P&L [$] and exit bar of an entry decided at bar t, filled at t+1, closed by bar ``last`` at the latest.

    Replays what :class:`TradingEnv` does bar by bar: ``Broker.open`` at t+1's open with
    bar t's ATR, ``Broker.scan_bar`` on every bar from t+1, and a close at bar ``last``'s
    close minus slippage when no stop or target was hit. An entry decided on the window's last
    bar (one not known as the last: ``EpisodeWindow.end_known``) is dropped: 0 at bar t.
    """
    if last <= t:
        return 0.0, t
    o, h, lo, c = bars.open, bars.high, bars.low, bars.close
    broker.reset()
    broker.open(t + 1, side, float(o[t + 1]), float(atr[t]))
    for k in range(t + 1, last + 1):
        price = broker.scan_bar(float(o[k]), float(h[k]), float(lo[k]))
        if price == price:
            trade, _ = broker.close(k, price, broker.exit_reason, at_close=False)
            return trade.net_pnl, k
    trade, _ = broker.close(last, float(c[last]) - side * broker.slip, EXIT_SESSION_END, at_close=True)
    return trade.net_pnl, last


def choose_label(pnl: np.ndarray, margin: float) -> np.ndarray:
    """Best of HOLD (0), BUY, SELL per row of ``pnl`` (n, 3); HOLD unless an entry earns more than ``margin``."""
    best_entry = np.where(pnl[:, 2] > pnl[:, 1], int(Action.SELL), int(Action.BUY))
    best_value = np.maximum(pnl[:, 1], pnl[:, 2])
    return np.where(best_value > margin, best_entry, int(Action.HOLD)).astype(np.int8)


def _dates(market, sessions: range) -> str:
    dates = market.bars.session_dates
    if not len(sessions):
        return "no day"
    return f"{dates[sessions.start]} to {dates[sessions.stop - 1]}"


def check_training_days(market, part: str, purpose: Purpose, t: np.ndarray | None = None) -> None:
    """Refuse labels that would teach on validation or test days.

    ``purpose="train"`` requires ``part == "train"`` and every requested bar in a
    training session; a UserError names the split and its dates otherwise.
    """
    if purpose != "train":
        return
    split = market.split
    if part != "train":
        raise UserError(
            f"training labels on the {part} split ({_dates(market, split.part(part))}) would teach the model on "
            "days it is evaluated on: hindsight labels look ahead",
            value=part, fix="build training labels on the train split only; label later days only to evaluate")
    if t is not None and len(t):
        sess = market.bars.session_id[np.asarray(t, dtype=np.int64)]
        outside = ~np.isin(sess, np.asarray(split.train))
        if outside.any():
            bad = int(np.asarray(t)[outside][0])
            name = next((p for p in ("val", "test") if int(market.bars.session_id[bad]) in split.part(p)), "another")
            date = market.bars.session_dates[int(market.bars.session_id[bad])]
            raise UserError(
                f"{int(outside.sum())} requested training state(s) lie on {name} days (first: bar {bad}, {date}; "
                f"{name} split {_dates(market, split.part(name)) if name != 'another' else ''})",
                value=bad, fix="take training states from the train split's days only")


def build_labels(market, env_config: EnvConfig, part: str, *, t: np.ndarray | None = None,
                 config: LabelConfig | None = None, purpose: Purpose = "train") -> tuple[OutcomeLabels, np.ndarray]:
    """Hindsight labels of the ``part`` split's flat states.

    ``market``: a :class:`~hybrid_trader.run.market.Market` (bars, features, split).
    ``t``: the decision bars to label (e.g. the advice dataset's flat rows); None: every
    bar of the part's trading windows that may decide an entry. Returns the labels and
    a boolean array over ``t`` (or over the chosen bars) saying which could be labelled
    (a bar outside a trading window, or after the last entry time, cannot).
    """
    config = config or LabelConfig()
    check_training_days(market, part, purpose, t)
    sessions = list(market.split.part(part))
    if not sessions:
        raise UserError(f"the {part} split holds no trading day", fix="choose another split")
    cfg = dataclasses.replace(env_config, phase=1, target_atr=env_config.target_atr or 3.0, episode_sessions=None)
    env = TradingEnv(market.bars, market.features, cfg, sessions=sessions)
    windows = env.episode_windows
    bars = market.bars
    atr = np.asarray(market.features.atr, dtype=np.float64)
    if t is None:
        t = np.concatenate([np.arange(w.first, w.last_entry + 1) for w in windows if w.last_entry >= 0] or
                           [np.zeros(0, np.int64)]).astype(np.int64)
    t = np.asarray(t, dtype=np.int64)
    by_session = {w.session: w for w in windows}
    sess = bars.session_id[t] if len(t) else np.zeros(0, np.int64)
    broker = label_broker(env)
    ok = np.zeros(len(t), dtype=bool)
    pnl_rows, exits, kept = [], [], []
    for i, (ti, si) in enumerate(zip(t.tolist(), sess.tolist())):
        w = by_session.get(int(si))
        if w is None or not (w.first <= ti <= w.last_entry):
            continue
        last = w.last if config.horizon is None else min(w.last, ti + config.horizon)
        buy, buy_exit = trade_outcome(broker, bars, atr, ti, +1, last)
        sell, sell_exit = trade_outcome(broker, bars, atr, ti, -1, last)
        ok[i] = True
        kept.append(i)
        pnl_rows.append((0.0, buy, sell))
        exits.append((buy_exit, sell_exit))
    idx = np.asarray(kept, dtype=np.int64)
    pnl = np.asarray(pnl_rows, dtype=np.float64).reshape(-1, 3)
    labels = OutcomeLabels(
        t=t[idx], session=sess[idx].astype(np.int32), pnl=pnl,
        exit_index=np.asarray(exits, dtype=np.int64).reshape(-1, 2), label=choose_label(pnl, config.margin),
    )
    return labels, ok
