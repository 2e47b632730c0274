"""``advise calibrate``: fitted on training days only, refused under another prompt, applied by collect."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hybrid_trader.account_state import AccountState
from hybrid_trader.advise.calibrate import CalibrationFit, calibrate_run, calibration_contexts, fit_calibration
from hybrid_trader.advise.collect import CollectRequest, collect_split
from hybrid_trader.cli.main import main
from hybrid_trader.config import merge_overrides
from hybrid_trader.data.bars import Bars
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.diagnose import diagnose_run
from hybrid_trader.llm import build_advisor
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.run.advice_dataset import read_split
from hybrid_trader.run.advice_identity import raw_advice
from hybrid_trader.run.calibration import attach_calibration, calibration_path, load_calibration
from hybrid_trader.run.market import load_market
from tests.llm import LeaningMock, make_mock_lean


def leaning(config):
    return LeaningMock(config.mock)


def test_calibration_removes_the_lean_of_flat_states_when_fitted(run_dir, run_parts, mock_config):
    cfg, market, _ = run_parts
    cal, table = calibrate_run(run_dir, cfg, mock_config, market,
                               CalibrationFit(max_states=120, backend=leaning(mock_config)))
    assert calibration_path(run_dir).is_file() and cal.counts == {"NQ/flat": 120, "NQ/long": 120, "NQ/short": 120}
    assert set(cal.days) <= set(market.split.part("train"))
    flat = [r for r in table if r["position"] == "flat"]
    n = sum(r["states"] for r in flat)
    raw_buy = sum(r["raw"]["BUY"] * r["states"] for r in flat) / n
    cal_top = max(sum(r["calibrated"][a] * r["states"] for r in flat) / n for a in ("HOLD", "BUY", "SELL"))
    assert raw_buy > 85.0 and cal_top < 70.0, (raw_buy, cal_top)
    down = [r for r in flat if "downtrend" in r["trend"]]
    assert down and all(r["calibrated"]["SELL"] > r["raw"]["SELL"] for r in down)  # the trend shows through


def test_a_flat_only_fit_gives_the_flat_means_of_the_full_fit_and_stores_nothing(run_dir, run_parts, mock_config):
    from hybrid_trader.llm.prompt import PromptBuilder

    cfg, market, _ = run_parts
    full, _ = calibrate_run(run_dir, cfg, mock_config, market,
                            CalibrationFit(max_states=60, backend=leaning(mock_config)))
    stored = calibration_path(run_dir).read_bytes()
    flat, contexts, mass = fit_calibration(PromptBuilder(mock_config), market, cfg,
                                           CalibrationFit(max_states=60, positions=(0,), backend=leaning(mock_config)))
    assert flat.counts == {"NQ/flat": 60} and flat.means["NQ/flat"] == full.means["NQ/flat"]
    assert flat.identity == full.identity and flat.days == full.days
    assert len(contexts) == len(mass) == 60 and all(c.position == 0 for c in contexts)
    assert calibration_path(run_dir).read_bytes() == stored
    with pytest.raises(ValueError, match="some of"):
        calibration_contexts(market, [int(min(market.split.part("train")))], positions=(2,))


def test_calibration_ignores_later_days_when_val_and_test_bars_change(run_dir, run_parts, mock_config, tmp_path):
    cfg, market, _ = run_parts
    a, _ = calibrate_run(run_dir, cfg, mock_config, market, CalibrationFit(max_states=80, backend=leaning(mock_config)))
    first_val = int(np.flatnonzero(market.bars.session_id == min(market.split.part("val")))[0])
    frame = market.bars.frame.copy()
    scale = np.where(np.arange(len(frame)) >= first_val, 1.0, 0.0) * np.linspace(0, 0.2, len(frame))
    for col in ("open", "high", "low", "close"):
        frame[col] = frame[col] * (1.0 - scale)  # a crash on every later day
    frame["volume"] = frame["volume"] * (1.0 + 5 * scale)
    bars = Bars(frame, market=market.bars.market, bar_minutes=market.bars.bar_minutes, source="perturbed")
    perturbed = load_market(cfg.data, cfg.split, bars=bars)
    assert not np.allclose(perturbed.bars.close, market.bars.close)
    b, _ = calibrate_run(tmp_path, cfg, mock_config, perturbed,
                         CalibrationFit(max_states=80, backend=leaning(mock_config)))
    assert a.means == b.means and a.counts == b.counts and a.days == b.days


def test_run_refuses_the_calibration_when_fitted_with_another_prompt(run_dir, run_parts, mock_config):
    cfg, market, _ = run_parts
    calibrate_run(run_dir, cfg, mock_config, market, CalibrationFit(max_states=40, backend=leaning(mock_config)))
    assert load_calibration(run_dir, mock_config) is not None
    other = merge_overrides(mock_config, {"prompt.system": "You are a cautious trader."})
    with pytest.raises(UserError) as err:
        load_calibration(run_dir, other)
    assert "another model or prompt" in str(err.value) and "prompt" in str(err.value)
    with pytest.raises(UserError, match="already has"):
        calibrate_run(run_dir, cfg, mock_config, market, CalibrationFit(max_states=40, backend=leaning(mock_config)))


def test_run_refuses_the_calibration_when_the_numbers_preset_replaces_the_prompt(run_dir, run_parts, mock_config):
    from hybrid_trader.run.advice_identity import advice_identity

    cfg, market, _ = run_parts
    calibrate_run(run_dir, cfg, mock_config, market, CalibrationFit(max_states=40, backend=leaning(mock_config)))
    numbers = merge_overrides(mock_config, {"prompt.preset": "numbers"})
    with pytest.raises(UserError) as err:
        load_calibration(run_dir, numbers)
    text = str(err.value)
    assert advice_identity(mock_config)["hash"] in text and advice_identity(numbers)["hash"] in text
    assert "template" in text and "advise calibrate" in text


def test_calibrate_says_the_fix_when_too_few_states(run_dir, run_parts, mock_config):
    cfg, market, _ = run_parts
    with pytest.raises(UserError) as err:
        calibrate_run(run_dir, cfg, mock_config, market,
                      CalibrationFit(max_states=5, min_states=20, backend=leaning(mock_config)))
    assert "too few states" in str(err.value) and "--max-states" in str(err.value)
    assert not calibration_path(run_dir).exists()


def test_collect_stores_calibrated_advice_when_the_run_has_a_calibration(run_dir, run_parts, mock_config, tmp_path):
    cfg, market, policy = run_parts
    plain = tmp_path / "plain"
    shutil.copytree(run_dir, plain)
    cal, _ = calibrate_run(run_dir, cfg, mock_config, market,
                           CalibrationFit(max_states=60, backend=leaning(mock_config)))
    for d in (run_dir, plain):
        collect_split(d, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                              max_states=60, progress=False, say=lambda s: None))
    rows, meta = read_split(run_dir, "train")
    raw, raw_meta = read_split(plain, "train")
    assert meta["calibration"].startswith("batch:") and raw_meta["calibration"] == ""
    assert np.array_equal(rows.t, raw.t) and np.array_equal(rows.position, raw.position)
    masks = rows.masks()
    ok = ~rows.abstained
    assert ok.sum() > 30 and not np.allclose(rows.probs[ok], raw.probs[ok], atol=1e-3)
    for i in np.flatnonzero(ok):
        expect = cal.apply(raw.probs[i], masks[i], "NQ", int(rows.position[i]))
        assert np.allclose(rows.probs[i], expect, atol=1e-5)
        assert rows.confidence[i] == pytest.approx(float(expect.max()), abs=1e-5)
    with pytest.raises(UserError, match="calibrated with no batch calibration"):  # the plain dataset, now calibrated
        shutil.copy(calibration_path(run_dir), calibration_path(plain))
        collect_split(plain, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                                  max_states=80, progress=False, say=lambda s: None))


def test_cli_calibrate_prints_the_table_and_a_json_line_when_run(run_dir, capsys):
    assert main(["advise", "calibrate", str(run_dir), "--llm", "mock", "--max-states", "40"]) == 0
    out = capsys.readouterr().out
    assert "raw -> calibrated" in out and "mean answer NQ/flat" in out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["calibration"]["counts"]["NQ/flat"] == 40 and summary["table"]
    assert main(["advise", "calibrate", str(run_dir), "--llm", "mock", "--max-states", "40"]) == 2
    assert "already has" in capsys.readouterr().err


def test_advisor_answers_calibrated_when_a_run_dir_has_a_calibration(run_dir, run_parts, mock_config):
    cfg, market, _ = run_parts
    cal, _ = calibrate_run(run_dir, cfg, mock_config, market,
                           CalibrationFit(max_states=40, backend=leaning(mock_config)))
    advisor = build_advisor(mock_config)
    try:
        ctx = context_from_market(market.bars, market.features, 500, AccountState(balance=50_000.0),
                                  np.array([True, True, True, False, False, False]))
        raw = advisor.advise_now([ctx], use_cache=False)[0]
        assert attach_calibration(advisor, mock_config, [None, run_dir]) == calibration_path(run_dir)
        after = advisor.advise_now([ctx], use_cache=False)[0]
        assert np.allclose(after.probs, cal.apply(raw.probs, ctx.legal, ctx.market, 0), atol=1e-6)
        student = merge_overrides(mock_config, {"backend": "student"})
        assert load_calibration(run_dir, student) is None  # the student learnt calibrated advice already
    finally:
        advisor.close()


def test_bench_llm_divides_by_the_run_calibration_when_given_one(run_dir, capsys):
    assert main(["advise", "calibrate", str(run_dir), "--llm", "mock", "--max-states", "30"]) == 0
    capsys.readouterr()
    assert main(["bench", "llm", "--backend", "mock", "--queries", "64", "--step-ms", "0",
                 "--calibration-run", str(run_dir)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["calibration"] == "batch" and out["queries"] >= 64
    assert main(["bench", "llm", "--backend", "mock", "--queries", "64", "--calibration-run",
                 str(run_dir.parent / "nothing")]) == 2
    assert "no batch calibration" in capsys.readouterr().err


def test_llm_ask_shows_calibrated_advice_when_given_the_run(run_dir, capsys):
    assert main(["advise", "calibrate", str(run_dir), "--llm", "mock", "--max-states", "30"]) == 0
    capsys.readouterr()
    assert main(["llm", "ask", "--backend", "mock", "--bar", "300"]) == 0
    raw = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["llm", "ask", "--backend", "mock", "--bar", "300", "--run", str(run_dir)]) == 0
    out = capsys.readouterr().out
    cal = json.loads(out.strip().splitlines()[-1])
    assert raw["calibration"] is None and cal["calibration"].endswith("llm_calibration.json")
    assert "divided by the batch calibration" in out and cal["probs"] != raw["probs"]
    assert main(["llm", "ask", "--backend", "mock", "--run", str(run_dir.parent / "none")]) == 2


def test_advisor_of_another_model_passes_over_the_calibration_when_evaluated_from_the_run(run_dir, run_parts,
                                                                                          mock_config):
    cfg, market, _ = run_parts
    calibrate_run(run_dir, cfg, mock_config, market, CalibrationFit(max_states=40, backend=leaning(mock_config)))
    rule = merge_overrides(mock_config, {"backend": "trend_rule"})
    advisor = build_advisor(rule)
    try:
        assert attach_calibration(advisor, rule, [run_dir]) is None  # the mock's calibration is not the rule's
        assert advisor.answerer.batch_calibration is None
        with pytest.raises(UserError, match="another model or prompt"):  # asked for it explicitly: refused
            load_calibration(run_dir, rule)
        other_prompt = merge_overrides(mock_config, {"prompt.system": "You are a cautious trader."})
        with pytest.raises(UserError, match="another model or prompt"):  # same model, other prompt: refused
            attach_calibration(advisor, other_prompt, [run_dir])
    finally:
        advisor.close()


def test_run_refuses_the_calibration_when_fitted_with_other_retrieval_settings(run_dir, run_parts, mock_config):
    from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
    from hybrid_trader.llm.prompt import PromptBuilder

    cfg, market, _ = run_parts

    def retrieving(k):
        llm = merge_overrides(mock_config, {"prompt.retrieval.k": k})
        builder = PromptBuilder(llm)
        attach_run_pool(builder, market, cfg)
        return llm, builder.retrieval.identity()

    two, two_identity = retrieving(2)
    cal, _ = calibrate_run(run_dir, cfg, two, market, CalibrationFit(max_states=40, backend=leaning(two)))
    assert cal.identity["retrieval"] and load_calibration(run_dir, two, retrieval=two_identity) is not None
    three, three_identity = retrieving(3)
    with pytest.raises(UserError, match="another model or prompt") as err:
        load_calibration(run_dir, three, retrieval=three_identity)
    assert "retrieval" in str(err.value) and cal.identity["hash"] in str(err.value)
    with pytest.raises(UserError, match="another model or prompt"):
        load_calibration(run_dir, mock_config)  # the fixed examples: another prompt


def flat_top_share(rows) -> float:
    """The most frequent top action's share of the answered flat states."""
    flat = (rows.position == 0) & ~rows.abstained
    top = np.argmax(np.where(rows.masks()[flat], rows.probs[flat], -1.0), axis=1)
    return float(np.bincount(top, minlength=6).max() / flat.sum())


def test_collect_fits_the_calibration_first_when_a_leaning_model_asks_a_run_without_one(run_dir, run_parts,
                                                                                         mock_config, monkeypatch,
                                                                                         tmp_path):
    make_mock_lean(monkeypatch)
    cfg, market, policy = run_parts
    plain = tmp_path / "plain"
    shutil.copytree(run_dir, plain)
    said: list[str] = []
    collect_split(run_dir, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                                max_states=80, progress=False, say=said.append))
    assert calibration_path(run_dir).is_file()
    assert any("fitting the batch calibration" in s and "600 states" in s for s in said), said
    assert any(s.startswith("batch calibration fitted in") and " s on 600 states" in s for s in said), said
    rows, meta = read_split(run_dir, "train")
    assert meta["calibration"].startswith("batch:") and raw_advice(meta) is None
    assert "calibration" not in meta["advice"]
    # --no-calibrate: the same states, raw and marked so; nothing fitted
    collect_split(plain, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                              max_states=80, progress=False, say=said.append,
                                                              calibrate=False))
    raw, raw_meta = read_split(plain, "train")
    assert not calibration_path(plain).exists()
    assert raw_meta["calibration"] == "raw" and raw_meta["advice"]["calibration"] == "raw"
    assert raw_meta["advice"]["hash"] != meta["advice"]["hash"]
    assert raw_advice(raw_meta) == "collected with --no-calibrate"
    assert np.array_equal(rows.t, raw.t)
    assert flat_top_share(raw) > 0.9 and flat_top_share(rows) < flat_top_share(raw) - 0.1  # the lean, divided out


def test_collect_never_fits_nor_marks_raw_a_back_end_without_a_lean(run_dir, run_parts, mock_config):
    cfg, market, policy = run_parts
    collect_split(run_dir, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                                max_states=40, progress=False, say=lambda s: None))
    _, meta = read_split(run_dir, "train")
    assert not calibration_path(run_dir).exists() and meta["calibration"] == "" and raw_advice(meta) is None


def test_distill_refuses_raw_advice_unless_allowed_and_the_student_it_makes_is_named_constant(run_dir, run_parts,
                                                                                               mock_config,
                                                                                               monkeypatch, capsys):
    make_mock_lean(monkeypatch)
    monkeypatch.setattr(LeaningMock, "lean", 1e6)  # Gemma's raw lean: BUY on every flat state
    cfg, market, policy = run_parts
    collect_split(run_dir, "train", mock_config, CollectRequest(market=market, run_config=cfg, policy=policy,
                                                                max_states=200, progress=False, say=lambda s: None,
                                                                calibrate=False))
    assert main(["advise", "distill", str(run_dir), "--epochs", "5"]) == 2
    err = capsys.readouterr().err
    assert "raw answers" in err and "--allow-raw" in err and "advise collect" in err
    assert not (run_dir / "advice" / "student.pt").exists()
    assert main(["advise", "distill", str(run_dir), "--epochs", "40", "--allow-raw"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["info"]["raw_advice"] and out["metrics"]["val"]["Flat top action share [%]"] > 90
    found = {f.code: f for f in diagnose_run(run_dir)}
    assert "STUDENT_CONSTANT" in found
    f = found["STUDENT_CONSTANT"]
    assert f.evidence["top action"] == "BUY" and f.evidence["advice"].startswith("raw")
    assert "advise collect" in f.fix and "calibration" in f.fix
