"""Prompt rendering: shared prefix + short suffix, n/a for missing values, clear errors for bad templates."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.llm.parsing import parse_cot_steps
from hybrid_trader.llm.prompt import COT_START, TEMPLATE_FIELDS, PromptBuilder, sample_context
from tests.llm import LONG_MASK, make_context


def builder(**prompt):
    return PromptBuilder(load_llm_config(overrides={"prompt": prompt} if prompt else None))


def test_default_prompt_when_rendered_has_every_seed_field():
    pb = builder()
    q = pb.query(make_context())
    assert q.text == q.prefix + q.suffix
    body = q.suffix
    for piece in ("10:31", "16850", "strong uptrend", "RSI 61", "mom +12",
                  "FLAT", "pnl +0", "win 55%", "losses 0", "bal 50000"):
        assert piece in body, piece
    assert "NQ futures" in q.prefix  # the market is named once, in the cached system text
    assert body.endswith("\nAnswer:")
    assert "BUY | 0.75" in q.prefix  # few-shot examples live in the cached prefix, not in every query


def test_prefix_when_contexts_differ_is_shared_and_suffix_is_not():
    pb = builder()
    a, b = pb.query(make_context(rsi=30.0)), pb.query(make_context(rsi=70.0))
    assert a.prefix is b.prefix
    assert a.suffix != b.suffix


def test_missing_values_when_rendered_print_na_whatever_the_format():
    pb = builder()
    text = pb.suffix(make_context(rsi=math.nan, win_rate=math.nan, momentum=math.nan))
    assert "RSI n/a" in text and "win n/a" in text and "mom n/a" in text


def test_unknown_template_field_when_building_raises_user_error_with_suggestion():
    with pytest.raises(UserError) as err:
        builder(context_template="RSI {rsii:.1f}")
    text = err.value.render()
    assert "unknown template field '{rsii}'" in text and "Did you mean 'rsi'" in text


def test_positional_field_when_building_raises_user_error():
    with pytest.raises(UserError, match="positional"):
        builder(context_template="RSI {}")


def test_bad_format_spec_when_building_raises_user_error():
    with pytest.raises(UserError, match="cannot be rendered"):
        builder(context_template="RSI {rsi:%Y}")


def test_unknown_system_field_when_building_raises_user_error():
    with pytest.raises(UserError, match="system"):
        builder(system="You trade {ticker}.")


def test_example_with_unknown_field_when_building_raises_user_error():
    with pytest.raises(UserError, match="examples"):
        builder(examples=[{"answer": "BUY", "context": {"rsx": 50}}])


def test_legal_actions_field_when_used_lists_only_legal_names():
    pb = builder(context_template="allowed {legal_actions}")
    assert pb.suffix(make_context(legal=LONG_MASK)).startswith("allowed HOLD MOVE_TO_BE ENABLE_TRAIL")


def test_content_free_suffix_when_rendered_has_no_numbers():
    pb = builder()
    text = pb.content_free_suffix()
    assert not any(ch.isdigit() for ch in text)
    assert "n/a" in text


def test_seed_field_names_when_used_render():
    pb = builder(context_template="Market: {market_name} Time: {current_time} ET Price: ${current_price:.2f}")
    assert pb.suffix(make_context()).startswith("Market: E-mini Nasdaq-100 Time: 10:31 ET Price: $16850.25")


def test_default_suffix_when_tokenized_roughly_is_short():
    # every query token costs model time; the default per-query part stays near 70 tokens (~4 chars/token)
    pb = builder()
    assert len(pb.suffix(make_context())) < 200
    assert set(TEMPLATE_FIELDS) >= {"market", "time", "price", "trend", "rsi", "adx", "vwap_distance", "momentum",
                                    "position_status", "unrealized_pnl", "win_rate", "consecutive_losses", "balance"}


def test_chain_of_thought_when_generating_adds_the_instruction_to_the_prefix():
    cfg = load_llm_config(overrides={"mode": "generate", "prompt": {"chain_of_thought": True},
                                     "generation": {"max_new_tokens": 200}})
    pb = PromptBuilder(cfg)
    assert "four short steps" in pb.prefix("NQ") and pb.chain_of_thought
    assert np.all(pb.content_free_query().context.legal)


def test_chain_of_thought_when_generating_shows_worked_four_step_examples_and_starts_the_first_step():
    cfg = load_llm_config(overrides={"mode": "generate", "prompt": {"chain_of_thought": True},
                                     "generation": {"max_new_tokens": 200}})
    pb = PromptBuilder(cfg)
    prefix = pb.prefix("NQ")
    assert prefix.count("\n4. Decision: ") == len(cfg.prompt.examples)
    assert "1. Market: downtrend, RSI 41, momentum -14." in prefix
    assert "4. Decision: SELL | 0.70 | downtrend below VWAP" in prefix
    assert parse_cot_steps(prefix.split("\n\n")[1])["decision"] == "SELL | 0.70 | downtrend below VWAP"
    assert pb.suffix(sample_context()).endswith("\n" + COT_START)
    plain = PromptBuilder(load_llm_config())
    assert plain.suffix(sample_context()).endswith("\nAnswer:") and "1. Market:" not in plain.prefix("NQ")
