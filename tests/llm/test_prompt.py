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


def test_labels_prompt_when_rendered_has_every_seed_field():
    pb = builder(preset="labels")
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
    pb = builder(preset="labels")
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
    cfg = load_llm_config(overrides={"mode": "generate", "prompt": {"chain_of_thought": True, "preset": "labels"},
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


# --------------------------------------------------------------- numbers preset, example orders (issue 21)
def _entry_answers(prefix: str) -> list[str]:
    return [line.split()[1] for line in prefix.splitlines() if line.startswith("Answer: ")
            and line.split()[1] in ("HOLD", "BUY", "SELL")]


def test_numbers_preset_when_rendered_shows_numbers_and_no_trend_words():
    pb = builder(preset="numbers")
    q = pb.query(make_context())
    for word in ("uptrend", "downtrend", "sideways", "trend"):
        assert word not in q.text.lower()
    for piece in ("ret ", "atr ", "vwap ", "hi ", "lo ", "FLAT", "pnl "):
        assert piece in q.suffix, piece
    answers = _entry_answers(q.prefix)
    assert sorted(answers) == ["BUY", "BUY", "HOLD", "HOLD", "SELL", "SELL"]  # balanced over the entries
    assert "MOVE_TO_BE" in q.prefix  # and the position-management example of the default


def test_example_orders_when_several_give_one_cached_prefix_per_order_ending_on_each_entry():
    pb = builder(preset="numbers", example_orders=3)
    prefixes = [pb.prefix("NQ", r) for r in range(3)]
    assert len(set(prefixes)) == 3 and all(pb.prefix("NQ", r) is prefixes[r] for r in range(3))
    assert {_entry_answers(p)[-1] for p in prefixes} == {"BUY", "SELL", "HOLD"}
    assert all(sorted(_entry_answers(p)) == sorted(_entry_answers(prefixes[0])) for p in prefixes)


def test_example_order_when_chosen_per_state_is_reproducible_and_varies():
    import datetime as dt

    a, b = builder(preset="numbers", example_orders=3), builder(preset="numbers", example_orders=3)
    base = sample_context().timestamp
    contexts = [make_context() for _ in range(30)]
    for i, ctx in enumerate(contexts):
        ctx.timestamp = base + dt.timedelta(minutes=5 * i)
    orders = [a.order_of(c) for c in contexts]
    assert orders == [b.order_of(c) for c in contexts] and set(orders) == {0, 1, 2}
    assert all(a.query(c).prefix == a.prefix("NQ", r) for c, r in zip(contexts, orders))
    assert {builder(preset="numbers").order_of(c) for c in contexts} == {0}  # one order: as written


def test_basis_point_fields_when_rendered_are_the_fractions_times_ten_thousand():
    pb = builder(context_template="{ret_5_bp:+.0f} {ret_20_bp:+.0f} {ret_60_bp:+.0f} {vwap_bp:+.0f}")
    ctx = sample_context()
    expected = " ".join(f"{1e4 * v:+.0f}" for v in (ctx.ret_5, ctx.ret_20, ctx.ret_60, ctx.vwap_distance))
    assert pb.suffix(ctx).startswith(expected + "\n") and expected == "+8 +20 +40 +15"


def test_chain_of_thought_when_the_prompt_has_no_trend_words_describes_the_market_by_its_numbers():
    cfg = load_llm_config(overrides={"mode": "generate", "prompt": {"chain_of_thought": True, "preset": "numbers"},
                                     "generation": {"max_new_tokens": 200}})
    prefix = PromptBuilder(cfg).prefix("NQ")
    assert "1. Market: returns -21 -48 -65 bp, vwap -18 bp." in prefix
    assert "n/a" not in prefix and "trend" not in prefix
