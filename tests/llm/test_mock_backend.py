"""The mock back end: deterministic rule-based advice over trend, RSI and position."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.llm import build_advisor
from hybrid_trader.llm.backends.mock import MockBackend
from hybrid_trader.llm.config import MockConfig
from hybrid_trader.llm.prompt import PromptBuilder
from tests.llm import LONG_MASK, make_context, mock_config


def ask(**ctx):
    adv = build_advisor(mock_config())
    try:
        return adv.advise_now([make_context(**ctx)])[0]
    finally:
        adv.close()


def test_same_context_when_asked_twice_gives_identical_advice():
    a, b = ask(rsi=58.0), ask(rsi=58.0)
    assert np.array_equal(a.probs, b.probs) and a.action == b.action


@pytest.mark.parametrize("ctx, expected", [
    (dict(trend_score=2, trend="strong uptrend", rsi=60.0), Action.BUY),
    (dict(trend_score=-2, trend="strong downtrend", rsi=40.0), Action.SELL),
    (dict(trend_score=0, trend="sideways", rsi=50.0), Action.HOLD),
    (dict(trend_score=2, trend="strong uptrend", rsi=60.0, consecutive_losses=3), Action.HOLD),
    (dict(position=1, position_status="LONG 1", unrealized_pnl=400.0, trend_score=0, legal=LONG_MASK),
     Action.MOVE_SL_TO_BE),
    (dict(position=1, position_status="LONG 1", unrealized_pnl=400.0, trend_score=2, legal=LONG_MASK),
     Action.ENABLE_TRAIL),
    (dict(position=1, position_status="LONG 1", unrealized_pnl=-300.0, trend_score=-1,
          legal=np.array([True, False, False, False, True, False])), Action.HOLD),
])
def test_rules_when_applied_give_the_expected_action(ctx, expected):
    adv = ask(**ctx)
    assert adv.action == expected and not adv.abstained
    assert np.all(adv.probs[~make_context(**ctx).legal] == 0)


def test_overbought_rsi_when_flat_in_uptrend_shifts_mass_to_hold():
    calm, hot = ask(trend_score=1, rsi=60.0), ask(trend_score=1, rsi=75.0)
    assert hot.probs[Action.HOLD] > calm.probs[Action.HOLD]


def test_generated_text_when_parsed_names_the_scored_action():
    cfg = mock_config()
    pb = PromptBuilder(cfg)
    be = MockBackend(cfg.mock)
    for rsi in (30.0, 50.0, 70.0):
        q = pb.query(make_context(rsi=rsi))
        scored = int(np.argmax(be.score([q])[0]))
        adv = build_advisor(mock_config(mode="generate"))
        try:
            gen = adv.advise_now([make_context(rsi=rsi)])[0]
        finally:
            adv.close()
        assert gen.action == scored and gen.reason and not gen.abstained


def test_coverage_when_configured_is_reported():
    assert ask().coverage == pytest.approx(0.9)
    be = MockBackend(MockConfig(coverage=0.5))
    pb = PromptBuilder(mock_config())
    assert be.score([pb.query(make_context())]).sum() == pytest.approx(0.5)


def test_latency_when_configured_is_simulated_per_batch():
    be = MockBackend(MockConfig(latency_ms=50))
    pb = PromptBuilder(mock_config())
    t0 = time.perf_counter()
    be.score([pb.query(make_context())] * 8)
    assert 0.045 <= time.perf_counter() - t0 < 2.0
