"""The market a run trained on: recorded when guessed from the file name, read by `run --feed follow:`, and
checked by `evaluate --data` (another market's bars are refused, or priced as `--market` says and recorded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.data.synthetic import generate_bars
from hybrid_trader.run import RunDir
from hybrid_trader.run.config import RunConfig
from tests.faults.helpers import train_args


@pytest.fixture(scope="module")
def nq_run(tmp_path_factory):
    """A tiny run trained on ``NQ_tiny.csv`` without --market, and other bars named ``ES_tiny.csv``."""
    root = tmp_path_factory.mktemp("market")
    nq, es = root / "NQ_tiny.csv", root / "ES_tiny.csv"
    for path, days, seed in ((nq, 12, 5), (es, 8, 11)):
        generate_bars(days, seed=seed).frame.tz_convert("America/New_York").tz_localize(None).to_csv(
            path, index_label="timestamp")
    run = root / "run"
    assert main(train_args(run, 256, "--quiet", "--data", str(nq))) == 0
    return run, nq, es


def _follow(run: Path, csv: Path, journal: Path, capsys) -> dict:
    capsys.readouterr()
    code = main(["run", str(run), "--feed", f"follow:{csv}", "--idle-exit", "0.5", "--journal", str(journal),
                 "--split", "test", "--json", "--no-status"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out.strip().splitlines()[-1])


def test_a_market_guessed_at_training_is_recorded_and_a_followed_file_is_traded(nq_run, tmp_path, capsys):
    run, nq, _ = nq_run
    config = RunDir(run).load_config(RunConfig)
    assert config.data.market == "NQ" and config.env.market is None  # guessed from NQ_tiny.csv, recorded
    summary = _follow(run, nq, tmp_path / "j.sqlite", capsys)
    assert summary["bars"] > 0


def test_a_run_recorded_before_the_market_was_follows_a_file_with_its_data_paths_market(nq_run, tmp_path, capsys):
    run, nq, _ = nq_run
    old = tmp_path / "old"
    shutil.copytree(run, old)
    rd = RunDir(old)
    config = rd.load_config(RunConfig)
    rd.save_config(RunConfig(**{**config.__dict__, "data": type(config.data)(**{**config.data.__dict__,
                                                                                 "market": None})}),
                   header="a run trained before the market was recorded")
    assert rd.load_config(RunConfig).data.market is None
    recorded = _follow(run, nq, tmp_path / "new.sqlite", capsys)
    guessed = _follow(old, nq, tmp_path / "old.sqlite", capsys)
    for key in ("bars", "decisions", "trades", "net_pnl"):
        assert guessed[key] == recorded[key], key


def test_resume_without_market_is_not_a_conflict_with_the_recorded_one(nq_run, tmp_path, capsys):
    run, nq, _ = nq_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["train", "--out", str(copy), "--resume", "--data", str(nq), "--timesteps", "384", "--quiet"]) == 0
    assert RunDir(copy).load_config(RunConfig).data.market == "NQ"


def test_evaluate_refuses_bars_of_another_market_naming_both(nq_run, tmp_path, capsys):
    run, _, es = nq_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["evaluate", str(copy), "--data", str(es), "--split", "all", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--data holds ES bars" in err and "trained on NQ" in err and "--market ES" in err and str(es) in err
    assert not any((copy / "eval").glob("ES_tiny-*")), "nothing evaluated"


def test_evaluate_market_prices_the_bars_as_told_and_records_the_contract(nq_run, tmp_path, capsys):
    run, _, es = nq_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["evaluate", str(copy), "--data", str(es), "--split", "all", "--seeds", "1", "--market", "es"]) == 0
    out = capsys.readouterr()
    assert "--market ES: the bars are priced as ES" in out.err and "trained on NQ" in out.err
    assert "priced as ES ($50 a point" in out.out
    as_es = next((copy / "eval").glob("ES_tiny-*/all-as-ES"))
    info = json.loads((as_es / "results.json").read_text())["info"]
    assert info["contract"]["symbol"] == "ES" and info["contract"]["point_value"] == 50.0
    assert info["run_market"] == "NQ" and "trained on NQ" in info["contract_note"]
    # --market NQ: the run's own market, the file's name misleads: no note, NQ's $20 a point
    assert main(["evaluate", str(copy), "--data", str(es), "--split", "all", "--seeds", "1", "--market", "NQ"]) == 0
    as_nq = next((copy / "eval").glob("ES_tiny-*/all"))
    info = json.loads((as_nq / "results.json").read_text())["info"]
    assert info["contract"]["symbol"] == "NQ" and info["contract"]["point_value"] == 20.0
    assert "contract_note" not in info
    es_trades = pd.read_csv(as_es / "agent.trades.csv")
    nq_trades = pd.read_csv(as_nq / "agent.trades.csv")
    assert len(es_trades) and es_trades["entry_time"][0] == nq_trades["entry_time"][0]
    assert es_trades["gross_pnl"][0] == pytest.approx(nq_trades["gross_pnl"][0] * 50.0 / 20.0)


def test_evaluate_market_is_checked_as_train_checks_it(nq_run, tmp_path, capsys):
    run, _, _ = nq_run
    assert main(["evaluate", str(run), "--market", "XX", "--seeds", "1"]) == 2
    assert "unknown market 'XX'" in capsys.readouterr().err


def test_the_run_market_of_an_older_run_is_what_training_read_from_its_data_path(tmp_path):
    from hybrid_trader.config import merge_overrides
    from hybrid_trader.data.loader import named_market
    from hybrid_trader.run.config import run_market

    folder = tmp_path / "bars"
    folder.mkdir()
    for name in ("ES_2024-01.csv", "ESH4.csv"):
        (folder / name).write_text("timestamp,open,high,low,close,volume\n")
    assert named_market(folder) == ("ES", "name")
    assert named_market(str(folder / "*.csv")) == ("ES", "name")
    (folder / "NQ_2024-02.csv").write_text("timestamp,open,high,low,close,volume\n")
    assert named_market(folder) == (None, "its files' names say ES, NQ")
    assert named_market(tmp_path / "export.csv") == ("NQ", "assumed")  # as load_bars assumes it

    def market(**keys):
        return run_market(merge_overrides(RunConfig(), keys))[0]

    assert market() == "NQ"  # the synthetic market
    assert market(**{"data.path": str(tmp_path / "MES_1min.csv")}) == "MES"
    assert market(**{"data.path": str(tmp_path / "MES_1min.csv"), "data.market": "mnq"}) == "MNQ"
    assert market(**{"data.path": str(tmp_path / "x.csv"), "data.market": "NQ", "env.market": "ES"}) == "ES"
    gone, why = run_market(merge_overrides(RunConfig(), {"data.path": str(tmp_path / "none" / "*.csv")}))
    assert gone is None and "no bars file matches" in why


def test_run_refuses_a_feed_of_another_market_and_trades_it_as_market_says(nq_run, tmp_path, capsys):
    """`run` reads the feed's market by evaluate's rule: ES bars on an NQ run are refused naming both, and traded
    as ES only when --market says so (the journal's identity records the contract)."""
    run, _, es = nq_run
    journal = tmp_path / "es.sqlite"
    args = ["run", str(run), "--feed", f"replay:{es}", "--journal", str(journal), "--split", "all", "--json",
            "--no-status"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--feed holds ES bars" in err and "trained on NQ" in err and "--market ES" in err
    assert not journal.exists() or not journal.stat().st_size, "nothing journaled"
    assert main([*args, "--market", "ES"]) == 0
    capsys.readouterr()
    from hybrid_trader.live.journal import Journal

    with Journal(journal) as j:
        assert j.identity()["market"] == "ES"
