"""Parsing written answers: ACTION | confidence | reason, robust to case, spacing, synonyms, text around."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid_trader.actions import Action
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.parsing import COT_STEPS, ParseError, has_decision_line, parse_answer, parse_cot_steps


@pytest.mark.parametrize("text, action, conf, reason", [
    ("BUY | 0.85 | Strong uptrend with volume confirmation", Action.BUY, 0.85,
     "Strong uptrend with volume confirmation"),
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


# ---------------------------------------------------------------- chain of thought
COT = ("uptrend above VWAP, RSI 62.\n2. Options: HOLD BUY SELL.\n3. Risks: stop 1.5 ATR away.\n"
       "4. Decision: BUY | 0.7 | trend")


def test_chain_of_thought_steps_when_well_formed_are_split_into_the_four_steps():
    assert parse_cot_steps(COT) == {"market": "uptrend above VWAP, RSI 62.", "options": "HOLD BUY SELL.",
                                    "risks": "stop 1.5 ATR away.", "decision": "BUY | 0.7 | trend"}
    assert parse_answer(COT, chain_of_thought=True).action == Action.BUY


@pytest.mark.parametrize("text, steps, action", [
    # markdown, other numbering and header words, case
    ("**Step 1 - Market analysis:** choppy\n**Step 2 - options:** hold or sell\n**STEP 3 - RISKS:** whipsaw\n"
     "**Step 4 - Decision:** SELL | 60% | fading", {"market", "options", "risks", "decision"}, Action.SELL),
    # steps on one line, a step missing
    ("1. Market: weak. 3. Risks: none. 4. Decision: hold | 0.5", {"market", "risks", "decision"}, Action.HOLD),
    # repeated decision: the last one counts for the action, the first for the step text
    ("1. Market: up\n4. Decision: BUY | 0.6\n4. Decision: SELL | 0.9 | changed my mind", {"market", "decision"},
     Action.SELL),
    # cut off before the decision (max_new_tokens): steps kept, no action
    ("strong uptrend, RSI 70.\n2. Options: HOLD BUY\n3. Risks: RSI", {"market", "options", "risks"}, None),
])
def test_chain_of_thought_steps_when_malformed_are_recovered(text, steps, action):
    assert set(parse_cot_steps(text)) == steps
    if action is None:
        assert not has_decision_line(text)
        with pytest.raises(ParseError):
            parse_answer("3. Risks: RSI", chain_of_thought=True)
    else:
        assert has_decision_line(text) and parse_answer(text, chain_of_thought=True).action == action


@pytest.mark.parametrize("text", [None, "", "   ", "no steps at all, just words", "BUY | 0.8 | plain answer"])
def test_chain_of_thought_steps_when_absent_give_nothing(text):
    assert parse_cot_steps(text) == {}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_chain_of_thought_steps_of_any_text_are_known_keys_and_short(text):
    steps = parse_cot_steps(text)
    assert set(steps) <= set(COT_STEPS) and all(0 < len(v) <= 300 for v in steps.values())
