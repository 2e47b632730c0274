"""run_advisor: the run's advisor set up once (training, evaluation and the executor): overrides, calibration."""

from __future__ import annotations

import pytest

import hybrid_trader.llm as llm_package
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.run.advice_identity import RAW, advice_identity
from hybrid_trader.run.advisor import run_advisor
from hybrid_trader.run.calibration import AdviceCalibration, calibration_path
from tests.llm import make_mock_lean
from tests.training.conftest import student_cfg


@pytest.fixture
def config():
    return student_cfg(3, **{"llm.backend": "mock"})


def write_calibration(run_dir, llm, model: str | None = None) -> None:
    identity = advice_identity(llm)
    if model is not None:
        identity = {**identity, "model": model}
    run_dir.mkdir(parents=True, exist_ok=True)
    BatchCalibration({"NQ/flat": [0.5, 0.3, 0.2, 0.0, 0.0, 0.0]}, {"NQ/flat": 50}, identity).save(
        calibration_path(run_dir))


def test_run_advisor_applies_the_overrides_over_the_runs_llm_section(config):
    made = run_advisor(config, {"mock": {"latency_ms": 7.0}, "query": {"mode": "always"}})
    try:
        assert made.llm.mock.latency_ms == 7.0 and made.advisor.config == made.llm
        assert made.llm.query.mode == "always" and made.llm.backend == "mock"
    finally:
        made.advisor.close()
    plain = run_advisor(config)
    plain.advisor.close()
    assert plain.llm == config.llm.in_run()


def test_run_advisor_without_a_rule_takes_the_first_calibration_of_its_model_or_says_raw(config, tmp_path,
                                                                                         monkeypatch):
    make_mock_lean(monkeypatch)  # a leaning model: undivided, its advice is raw
    empty, other, mine = tmp_path / "empty", tmp_path / "other", tmp_path / "mine"
    empty.mkdir()
    llm = config.llm.in_run()
    write_calibration(other, llm, model="another model")  # another model's calibration: passed over
    made = run_advisor(config, homes=[None, tmp_path / "missing", empty, other])
    assert made.calibration.raw and made.calibration_record == RAW
    assert made.advisor.answerer.batch_calibration is None
    made.advisor.close()
    write_calibration(mine, llm)
    made = run_advisor(config, homes=[empty, other, mine])
    assert made.calibration.path == calibration_path(mine) and not made.calibration.raw
    assert made.advisor.answerer.batch_calibration is made.calibration.calibration is not None
    assert made.calibration_record == str(calibration_path(mine))
    made.advisor.close()


def test_run_advisor_asks_its_rule_first_in_the_home_of_this_models_calibration(config, tmp_path, monkeypatch):
    events: list[tuple] = []
    build = llm_package.build_advisor

    def building(llm):
        events.append(("build",))
        return build(llm)

    def rule(home, llm, say):
        events.append(("rule", home))
        say(f"asked in {home.name}")
        return AdviceCalibration(raw=True)

    monkeypatch.setattr(llm_package, "build_advisor", building)
    this, init = tmp_path / "p3", tmp_path / "p2"
    init.mkdir()
    said: list[str] = []
    made = run_advisor(config, homes=(this, init), calibrate=rule, say=said.append)  # this run: not made yet
    made.advisor.close()
    assert events == [("rule", init), ("build",)], "fitted, if at all, before the advisor loads its model"
    assert said == ["asked in p2"] and made.calibration.raw
    events.clear()
    write_calibration(this, config.llm.in_run())
    run_advisor(config, homes=(this, init), calibrate=rule).advisor.close()
    assert events == [("rule", this), ("build",)], "the run whose calibration is this model's"
