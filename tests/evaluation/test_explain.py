"""Chain-of-thought explanations of sample decisions (evaluate --explain): steps stored, parse figures, report."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.explain import explain_decisions, explainer_config
from hybrid_trader.evaluation.report import _decisions_html
from hybrid_trader.evaluation.results import EXPLAINED_BY_KEY, REASONING_KEY
from hybrid_trader.llm.advice import Advice
from hybrid_trader.llm.config import LLMConfig

FOUR_STEPS = ("1. Market: uptrend above VWAP, RSI 62.\n2. Options: HOLD BUY SELL.\n3. Risks: stop 1.5 ATR away.\n"
              "4. Decision: BUY | 0.70 | trend up")


class ScriptedAdvisor:
    """Answers each context with the next scripted text; counts contexts."""

    class backend:
        @staticmethod
        def describe() -> str:
            return "scripted"

    def __init__(self, texts):
        self.texts = list(texts)
        self.asked = 0

    def advise_now(self, contexts):
        self.asked += len(contexts)
        return [Advice(probs=np.full(6, 1 / 6), action=1, confidence=0.7, coverage=1.0, backend="scripted",
                       raw=self.texts.pop(0)) for _ in contexts]


def test_explain_stores_the_four_steps_when_the_model_writes_them():
    samples = [{"time": "t0"}, {"time": "t1"}, {"time": "t2"}]
    advisor = ScriptedAdvisor([FOUR_STEPS, "I cannot tell."])
    figures = explain_decisions(samples, ["c0", "c1", "c2"], LLMConfig(), 2, say=lambda s: None, advisor=advisor)
    assert advisor.asked == 2  # only the first N
    assert samples[0][REASONING_KEY]["risks"] == "stop 1.5 ATR away."
    assert set(samples[0][REASONING_KEY]) == {"market", "options", "risks", "decision"}
    assert samples[0][EXPLAINED_BY_KEY] == "scripted"
    assert samples[1][REASONING_KEY] == {"raw": "I cannot tell."}  # malformed: kept raw, counted as unparsed
    assert REASONING_KEY not in samples[2]
    assert figures["explained"] == 2 and figures["decision_parsed_pct"] == 50.0
    assert figures["all_four_steps_pct"] == 50.0 and figures["median_latency_s"] >= 0


def test_explainer_is_the_teacher_when_the_run_is_advised_by_the_student():
    cfg = explainer_config(LLMConfig(backend="student"))
    assert cfg.backend == "transformers" and cfg.mode == "generate" and cfg.prompt.chain_of_thought
    assert explainer_config(LLMConfig(backend="mock"), "mock").backend == "mock"
    with pytest.raises(UserError, match="no reasoning"):
        explainer_config(LLMConfig(), "student")


def test_report_shows_the_steps_under_their_decision_when_explained():
    html = _decisions_html([{"time": "t0", "executed": "BUY", REASONING_KEY: {"market": "up <b>", "decision": "BUY"},
                             EXPLAINED_BY_KEY: "gemma"}, {"time": "t1", "executed": "SELL"}])
    assert html.count('<tr class="cot">') == 1 and "up &lt;b&gt;" in html and "chain of thought by gemma" in html
    assert f">{REASONING_KEY}<" not in html  # not a column
