"""The trend_rule back end: advice from the prompt's trend label alone (a control for the LLM)."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.trend_rule_backend import TrendRuleBackend
from hybrid_trader.llm.prompt import PromptBuilder
from tests.llm import LONG_MASK, make_context, mock_config


def top(**ctx):
    cfg = mock_config()
    q = PromptBuilder(cfg).query(make_context(**ctx))
    return int(np.argmax(TrendRuleBackend(cfg.mock).score([q])[0]))


@pytest.mark.parametrize("score, expected", [
    (2, Action.BUY), (1, Action.BUY), (0, Action.HOLD), (-1, Action.SELL), (-2, Action.SELL)])
def test_flat_advice_when_trend_label_varies_follows_the_label(score, expected):
    assert top(trend_score=score) == expected


def test_advice_when_only_other_numbers_change_is_unchanged():
    cfg = mock_config()
    pb, be = PromptBuilder(cfg), TrendRuleBackend(cfg.mock)
    a = be.score([pb.query(make_context(trend_score=1, rsi=20.0))])
    b = be.score([pb.query(make_context(trend_score=1, rsi=85.0, consecutive_losses=5))])
    assert np.array_equal(a, b)


def test_in_position_when_asked_holds_and_respects_legal_mask():
    cfg = mock_config()
    q = PromptBuilder(cfg).query(make_context(position=1, position_status="LONG 1", trend_score=2, legal=LONG_MASK))
    p = TrendRuleBackend(cfg.mock).score([q])[0]
    assert int(np.argmax(p)) == Action.HOLD and np.all(p[~LONG_MASK] == 0)


def test_registry_when_named_makes_the_trend_rule():
    cfg = mock_config()
    cfg.backend = "trend_rule"
    assert isinstance(make_backend(cfg), TrendRuleBackend)
