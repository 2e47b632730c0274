"""Parsing written answers: ACTION | confidence | reason, robust to case, spacing, synonyms, text around."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_trader.actions import Action
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.parsing import ParseError, parse_answer


@pytest.mark.parametrize("text, action, conf, reason", [
    ("BUY | 0.85 | Strong uptrend with volume confirmation", Action.BUY, 0.85, "Strong uptrend with volume confirmation"),
    ("  sell|92%|bearish divergence", Action.SELL, 0.92, "bearish divergence"),
    ("HOLD | .6 | wait", Action.HOLD, 0.6, "wait"),
    ("MOVE_TO_BE | 0.75 | protect profits", Action.MOVE_SL_TO_BE, 0.75, "protect profits"),
    ("move to breakeven | 70 | lock it", Action.MOVE_SL_TO_BE, 0.70, "lock it"),
    ("ENABLE_TRAIL | 0.80 | strong momentum", Action.ENABLE_TRAIL, 0.80, "strong momentum"),
    ("Disable-Trail | 0.5 | chop", Action.DISABLE_TRAIL, 0.5, "chop"),
    ("LONG | 0.7 | breakout", Action.BUY, 0.7, "breakout"),
    ("short | 0.65", Action.SELL, 0.65, None),
    ("FLAT | 0.4 | nothing to do", Action.HOLD, 0.4, "nothing to do"),
    ("WAIT", Action.HOLD, None, None),
    ("Sure! My answer: **BUY** (confidence 0.8) momentum is up.", Action.BUY, 0.8, "momentum is up"),
    ("Answer: SELL | high | trend down", Action.SELL, 0.8, "trend down"),
    ("I would not BUY here. HOLD | 0.55 | overbought", Action.HOLD, 0.55, "overbought"),
    ("SELL | 0.7 | reason one\nBUY | 0.9 | a second line is ignored", Action.SELL, 0.7, "reason one"),
    ("Breakeven now, 0.8", Action.MOVE_SL_TO_BE, 0.8, None),
])
def test_answer_when_parsed_gives_action_confidence_and_reason(text, action, conf, reason):
    p = parse_answer(text)
    assert p.action == action
    assert p.confidence == (pytest.approx(conf) if conf is not None else None)
    assert p.reason == reason


@pytest.mark.parametrize("text", ["", "   ", "I am not sure.", "0.85 | something", "BUYING is fun"])
def test_answer_without_action_when_parsed_raises_parse_error(text):
    with pytest.raises(ParseError):
        parse_answer(text)


def test_confidence_out_of_range_when_parsed_is_dropped():
    assert parse_answer("BUY | 250 | huge").confidence is None


def test_chain_of_thought_when_parsed_reads_the_decision_line():
    text = ("Step 1. Analyze: uptrend, BUY looks tempting.\nStep 2. Options: BUY or HOLD.\n"
            "Step 3. Risks: RSI 78 is overbought.\nStep 4. Decide.\nDecision: HOLD | 0.6 | overbought, wait")
    p = parse_answer(text, chain_of_thought=True)
    assert p.action == Action.HOLD and p.confidence == pytest.approx(0.6)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_any_text_when_parsed_either_parses_or_raises_parse_error(text):
    try:
        p = parse_answer(text)
    except ParseError:
        return
    assert 0 <= p.action < 6
    assert p.confidence is None or 0.0 <= p.confidence <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(ACTION_WORDS), st.floats(0, 1), st.sampled_from(["", " ", "  "]),
       st.sampled_from(["", "Answer: ", "ok -> "]), st.booleans(), st.booleans())
def test_formatted_answer_when_parsed_round_trips(word, conf, pad, lead, lower, pct):
    shown = word.lower() if lower else word
    c = f"{round(conf * 100)}%" if pct else f"{conf:.2f}"
    p = parse_answer(f"{lead}{shown}{pad}|{pad}{c}{pad}|{pad}because")
    assert p.action == ACTION_WORDS.index(word)
    expected = round(conf * 100) / 100 if pct else round(conf, 2)
    assert p.confidence == pytest.approx(expected, abs=1e-9)
    assert p.reason == "because"
