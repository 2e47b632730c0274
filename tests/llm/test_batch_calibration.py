"""Batch calibration: the mean answer per market and position state, divided out, renormalised over legal actions."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm import AccountState, context_from_market
from hybrid_trader.llm.answering import Answerer
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.batch_calibration import BatchCalibration, calibration_key, fit_batch_calibration
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.prompt import PromptBuilder

FLAT = np.array([True, True, True, False, False, False])
LONG = np.array([True, False, False, True, True, False])


def leaning_masses(n: int, seed: int = 0) -> np.ndarray:
    """Flat answers whose BUY mass is 10x what the state says: BUY tops almost every one raw."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(3), size=n)
    mass = np.zeros((n, 6))
    mass[:, :3] = p * np.array([1.0, 10.0, 1.0])
    return mass / mass.sum(axis=1, keepdims=True) * 0.8


def test_fit_averages_each_kind_of_state_when_given_flat_and_long_answers():
    flat = leaning_masses(40)
    long = np.tile([0.2, 0, 0, 0.1, 0.1, 0.3], (30, 1))  # DISABLE_TRAIL is illegal: it gets no mean
    mass = np.vstack([flat, long])
    legal = np.vstack([np.tile(FLAT, (40, 1)), np.tile(LONG, (30, 1))])
    cal = fit_batch_calibration(mass, legal, ["NQ"] * 70, [0] * 40 + [1] * 30, identity={"hash": "x"}, days=[3, 1])
    assert cal.counts == {"NQ/flat": 40, "NQ/long": 30}
    assert np.allclose(cal.means["NQ/long"], [0.5, 0, 0, 0.25, 0.25, 0])
    q = flat[:, :3] / flat[:, :3].sum(axis=1, keepdims=True)
    assert np.allclose(cal.means["NQ/flat"][:3], q.mean(axis=0), atol=1e-7)
    assert cal.divisor("NQ", -1) is None and cal.days == [1, 3] and cal.identity == {"hash": "x"}


def test_calibration_removes_a_constant_lean_when_applied():
    mass = leaning_masses(300)
    legal = np.tile(FLAT, (300, 1))
    raw_top = mass.argmax(axis=1)
    assert (raw_top == 1).mean() > 0.8
    cal = fit_batch_calibration(mass, legal, ["NQ"] * 300, [0] * 300)
    after = np.array([cal.apply(m, FLAT, "NQ", 0) for m in mass])
    assert np.allclose(after.sum(axis=1), 1.0) and (after[:, 3:] == 0).all()
    top = after.argmax(axis=1)
    assert max((top == a).mean() for a in range(3)) < 0.7  # the target: no action tops 70% of flat states
    assert (top == 1).mean() < (raw_top == 1).mean() - 0.25 and (top == 0).any() and (top == 2).any()
    # a per-kind rescaling: every state's BUY/SELL log-odds move by the same constant
    shift = np.log(after[:, 1] / after[:, 2]) - np.log(mass[:, 1] / mass[:, 2])
    assert np.allclose(shift, shift[0]) and shift[0] < 0


def test_fit_names_the_kind_and_the_fix_when_too_few_states():
    with pytest.raises(UserError) as err:
        fit_batch_calibration(leaning_masses(5), np.tile(FLAT, (5, 1)), ["ES"] * 5, [0] * 5, min_states=20)
    assert "ES/flat: 5" in str(err.value) and "max-states" in str(err.value)


def test_calibration_survives_a_round_trip_when_saved(tmp_path):
    cal = fit_batch_calibration(leaning_masses(30), np.tile(FLAT, (30, 1)), ["NQ"] * 30, [0] * 30,
                                identity={"hash": "abc"}, days=[0, 2])
    path = tmp_path / "llm_calibration.json"
    cal.save(path)
    assert BatchCalibration.load(path) == cal
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="cannot be read"):
        BatchCalibration.load(path)


class ConstantBackend(Backend):
    """Answers every query with the same masses."""

    name = "constant"

    def __init__(self, mass):
        self.mass = np.asarray(mass, dtype=np.float64)

    def score(self, queries):
        return np.tile(self.mass, (len(queries), 1))

    def generate(self, queries, max_new_tokens, temperature):
        raise NotImplementedError("scoring only")

    def describe(self) -> str:
        return "constant"


def test_answerer_divides_by_the_batch_mean_of_the_position_when_set():
    from hybrid_trader.data.synthetic import generate_bars
    from hybrid_trader.features import compute_features

    bars = generate_bars(days=2, seed=1)
    features = compute_features(bars)
    cfg = LLMConfig()
    answerer = Answerer(cfg, ConstantBackend([0.1, 0.6, 0.2, 0.0, 0.0, 0.0]), PromptBuilder(cfg))
    ctx = context_from_market(bars, features, 400, AccountState(balance=50_000.0), FLAT)
    prompts = PromptBuilder(cfg)
    raw = answerer.answer([prompts.query(ctx)])[0]
    assert raw.action == 1 and raw.probs[1] == pytest.approx(0.6 / 0.9, rel=1e-5)
    answerer.batch_calibration = BatchCalibration(
        means={calibration_key(ctx.market, 0): [0.25, 0.6, 0.15, 0, 0, 0]}, counts={calibration_key(ctx.market, 0): 50})
    mean = np.array(answerer.batch_calibration.means[calibration_key(ctx.market, 0)])
    out = answerer.answer([prompts.query(ctx)])[0]
    expect = np.array([0.1, 0.6, 0.2]) / mean[:3]
    assert np.allclose(out.probs[:3], expect / expect.sum(), atol=1e-6)
    assert out.action == 2 and int(np.argmax(expect)) == 2 and out.confidence == pytest.approx(float(out.probs.max()))
