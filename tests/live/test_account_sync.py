"""--account-balance / --account-state: the real account's standing, checked against the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid_trader.env.account import AccountStanding
from hybrid_trader.env.rules import get_rules
from hybrid_trader.errors import UserError
from hybrid_trader.live.account_sync import read_standing, standing_from

LEGACY_50K = get_rules("apex-legacy", "50K")  # threshold 47,500 .. 50,100, drawdown 2,500
EOD_50K = get_rules("apex-2026-eod", "50K")  # threshold from 48,000, trails until the target (no cap)


def test_standing_defaults_peak_and_threshold_from_the_rules_when_only_balance_given() -> None:
    assert standing_from({"balance": 51_000}, LEGACY_50K) == AccountStanding(51_000.0, 51_000.0, 48_500.0)
    assert standing_from({"balance": 49_000}, LEGACY_50K) == AccountStanding(49_000.0, 50_000.0, 47_500.0)
    assert standing_from({"balance": 54_000}, LEGACY_50K).threshold == 50_100.0  # the legacy cap
    assert standing_from({"balance": 54_000}, EOD_50K).threshold == 51_000.0  # trails until the target: 53,000 - 2,000


def test_read_standing_reads_every_field_when_file_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text(json.dumps({"balance": 51_234.5, "threshold": 48_834.5, "peak": 51_334.5, "days_traded": 4,
                                "best_day": 812.25}))
    assert read_standing(None, str(path), LEGACY_50K) == AccountStanding(51_234.5, 51_334.5, 48_834.5, 4, 812.25)
    assert read_standing(None, None, LEGACY_50K) is None


@pytest.mark.parametrize(("data", "column", "message"), [
    ({}, "balance", "'balance' is missing"),
    ({"balance": "51k"}, "balance", "must be a number of dollars"),
    ({"balance": 51_000, "treshold": 48_000}, "treshold", "unknown field 'treshold'. Did you mean 'threshold'?"),
    ({"balance": 51_000, "threshold": 47_000}, "threshold", "outside the apex-legacy/50K range: between 47,500 and "
                                                           "50,100"),
    ({"balance": 48_000, "threshold": 48_000}, "balance", "at or below the trailing threshold 48,000.00: the "
                                                         "account has failed"),
    ({"balance": 51_000, "peak": 50_500}, "peak", "is below the balance"),
    ({"balance": 51_000, "days_traded": 2.5}, "days_traded", "must be a whole number"),
    ({"balance": 51_000, "best_day": -3}, "best_day", "must be 0 or more"),
])
def test_read_standing_names_file_field_and_value_when_state_is_bad(tmp_path: Path, data: dict, column: str,
                                                                    message: str) -> None:
    path = tmp_path / "apex.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as err:
        read_standing(None, str(path), LEGACY_50K)
    assert message in err.value.message and err.value.column == column and err.value.file == str(path)
    assert err.value.fix


def test_read_standing_refuses_bad_json_and_both_options_when_given(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text('{"balance": 51000,\n "peak": }')
    with pytest.raises(UserError, match="not valid JSON") as err:
        read_standing(None, str(path), LEGACY_50K)
    assert err.value.row == 2
    with pytest.raises(UserError, match="cannot read the file"):
        read_standing(None, str(tmp_path / "missing.json"), LEGACY_50K)
    with pytest.raises(UserError, match="--account-balance and --account-state both given"):
        read_standing(51_000.0, str(path), LEGACY_50K)
    with pytest.raises(UserError, match="--account-balance: the balance 47,000.00 is at or below"):
        read_standing(47_000.0, None, LEGACY_50K)
