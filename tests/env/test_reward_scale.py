"""The default reward scale reads only the days the environment trades: never the later days' volatility."""

from __future__ import annotations

import numpy as np

from hybrid_trader.data.bars import Bars
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.run.config import SplitConfig
from hybrid_trader.run.market import make_split


def test_a_training_environments_default_reward_scale_ignores_the_test_days():
    """Found by the search's selection test: the median ATR was taken over every bar the environment was given,
    test days included, so a training environment's rewards read the test days' volatility."""
    bars = generate_bars(days=14, seed=3, edge=0.3)
    split = make_split(bars.n_sessions, SplitConfig(), bars.session_dates)
    test = np.isin(bars.session_id, list(split.part("test")))
    frame = bars.frame.copy()
    cols = ["open", "high", "low", "close"]
    start = float(frame.loc[test, "open"].iloc[0])
    frame.loc[test, cols] = start + 3.0 * (frame.loc[test, cols] - start)
    moved = Bars(frame, market=bars.market)
    train = list(split.part("train"))
    scales = [TradingEnv(b, None, EnvConfig(phase=2), sessions=train).reward_scale for b in (bars, moved)]
    assert scales[0] == scales[1]
    # the test days do move the scale of an environment that trades them (the test can fail)
    every = [TradingEnv(b, None, EnvConfig(phase=2)).reward_scale for b in (bars, moved)]
    assert every[0] != every[1]
