"""``run`` from the real account's standing, Apex's consistency note, and the contract's roll check."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hybrid_trader.cli.main import main
from hybrid_trader.env.account import PropFirmAccount
from hybrid_trader.env.rules import get_rules
from hybrid_trader.live.account_sync import CONSISTENCY_CODE, note_consistency
from hybrid_trader.live.journal import Journal
from tests.env.test_account import flat_broker

ACCOUNT = "Sim101"


def _errors(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT code, message FROM errors ORDER BY id").fetchall()


def test_note_consistency_journals_a_day_above_30_percent_and_not_one_below(tmp_path: Path) -> None:
    acc = PropFirmAccount(get_rules("apex-legacy", "50K"))
    said: list[str] = []
    with Journal(tmp_path / "j.sqlite") as journal:
        for t, pnl in ((0, 500.0), (10, 300.0), (20, 200.0), (30, 700.0)):
            acc.begin_day(t)
            acc.book(t + 1, pnl, pnl)
            acc.close_session(t + 2, flat_broker(), 100.0)
            note_consistency(acc, journal, 1_000 + t, said.append)
    rows = _errors(tmp_path / "j.sqlite")
    # day 1: 500 of 500 (100%); day 2: 300 of 800 (37.5%); day 3: 200 of 1,000 (20%): no note; day 4: 700 of 1,700
    assert [code for code, _ in rows] == [CONSISTENCY_CODE] * 3
    assert rows[1][1].startswith("the day made 300.00, above 30% of the total profit; consistency (30%): best day "
                                 "500.00 of a total profit 800.00 (62%) [CONSISTENCY_30]: a payout needs 866.67 more")
    assert "best day 700.00 of a total profit 1,700.00" in rows[2][1] and len(said) == 3


def _run(tiny, tmp_path: Path, *extra: str) -> tuple[int, Path]:
    run, csv, _ = tiny
    journal = tmp_path / "j.sqlite"
    code = main(["run", str(run), "--feed", f"replay:{csv}", "--split", "test", "--journal", str(journal),
                 "--no-status", *extra])
    return code, journal


def test_run_starts_from_the_account_state_when_given(tiny, tmp_path: Path, capsys) -> None:
    state = tmp_path / "apex.json"
    state.write_text(json.dumps({"balance": 51_000.0, "days_traded": 3, "best_day": 5_000.0}))
    code, journal = _run(tiny, tmp_path, "--account-state", str(state), "--json")
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["balance"] - summary["net_pnl"] == pytest.approx(51_000.0)
    assert any(n.startswith("consistency (30%): best day 5,000.00") and "[CONSISTENCY_30]" in n
               for n in summary["notes"])  # a payout would wait: said in the summary
    with sqlite3.connect(journal) as db:
        first = json.loads(db.execute("SELECT snapshot FROM account ORDER BY id LIMIT 1").fetchone()[0])
    assert first["threshold"] == pytest.approx(48_500.0)  # 51,000 - 2,500: where the rules put it


def test_run_refuses_a_failed_account_balance_before_starting(tiny, tmp_path: Path, capsys) -> None:
    code, journal = _run(tiny, tmp_path, "--account-balance", "47500")
    assert code == 2
    err = capsys.readouterr().err
    assert "--account-balance: the balance 47,500.00 is at or below the trailing threshold" in err and "fix:" in err
    assert not journal.exists()


def test_run_refuses_an_expired_contract_when_broker_is_ninjatrader(tiny, tmp_path: Path, capsys) -> None:
    nt_dir = tmp_path / "NinjaTrader 8"
    (nt_dir / "incoming").mkdir(parents=True)
    (nt_dir / "outgoing").mkdir()
    code, journal = _run(tiny, tmp_path, "--broker", "ninjatrader", "--nt-dir", str(nt_dir), "--nt-account",
                         ACCOUNT, "--nt-instrument", "NQ 03-20", "--live-from", "now")
    assert code == 2
    err = capsys.readouterr().err
    assert "--nt-instrument 'NQ 03-20' expired on Fri 2020-03-20" in err and "'NQ 06-20'" in err
    assert not journal.exists() and list((nt_dir / "incoming").iterdir()) == []
