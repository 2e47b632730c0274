"""Start the live account from the real account's standing, and report Apex's consistency rule.

``hybrid-trader run --account-balance X`` or ``--account-state FILE`` (JSON) make the
executor's :class:`~hybrid_trader.env.account.PropFirmAccount` start where the real account
stands instead of at the preset's starting balance. The file::

    {"balance": 51234.50, "threshold": 48834.50, "peak": 51334.50, "days_traded": 4, "best_day": 812.25}

``balance`` is required; ``peak`` defaults to the larger of the balance and the starting
balance; ``threshold`` defaults to where the rules put it for that peak (peak minus the
trailing drawdown, never below the initial threshold nor above the rules' cap);
``days_traded`` (default 0) and ``best_day`` (the largest profit of one day so far, default
0: the consistency rule) are what the firm's dashboard shows. Each value is checked: a
balance at or below the threshold is an account that has failed, a threshold outside the
rules' range or a peak below the balance is a typing error; every error names the file, the
field, the value and the fix.

:func:`note_consistency` journals the rule's state at the end of each trading day where a
day's profit is above the share (``account:consistency``), never blocking entries.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hybrid_trader.env.account import AccountStanding, PropFirmAccount
from hybrid_trader.env.consistency import CONSISTENCY_30
from hybrid_trader.env.rules import PropFirmRules
from hybrid_trader.errors import UserError, did_you_mean
from hybrid_trader.live.journal import Journal

FIELDS = ("balance", "threshold", "peak", "days_traded", "best_day")
EXAMPLE = '{"balance": 51234.5, "threshold": 48834.5, "peak": 51334.5, "days_traded": 4, "best_day": 812.25}'
CONSISTENCY_CODE = "account:consistency"
"""Journal reason code: a day ended with its profit above the consistency share of the total profit."""


def _number(data: dict[str, Any], key: str, file: str | None, *, integer: bool = False) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok or not math.isfinite(float(value)):
        kind = "a whole number" if integer else "a number of dollars"
        raise UserError(f"'{key}' must be {kind}", file=file, column=key, value=value,
                        fix=f"e.g. {EXAMPLE}")
    return float(value)


def standing_from(data: dict[str, Any], rules: PropFirmRules, file: str | None = None) -> AccountStanding:
    """The standing a JSON object (or ``{"balance": X}``) describes, checked against ``rules``."""
    if not isinstance(data, dict):
        raise UserError("the account state must be a JSON object", file=file, value=type(data).__name__,
                        fix=f"write e.g. {EXAMPLE}")
    unknown = [k for k in data if k not in FIELDS]
    if unknown:
        raise UserError(f"unknown field '{unknown[0]}'." + did_you_mean(str(unknown[0]), FIELDS), file=file,
                        column=str(unknown[0]), fix=f"use only {', '.join(FIELDS)}, e.g. {EXAMPLE}")
    balance = _number(data, "balance", file)
    if balance is None:
        raise UserError("'balance' is missing", file=file, column="balance",
                        fix=f"the account's balance as the firm shows it, e.g. {EXAMPLE}")
    if balance <= 0:
        raise UserError("'balance' must be positive", file=file, column="balance", value=balance,
                        fix="the account's balance in dollars, e.g. 51234.5")
    peak = _number(data, "peak", file)
    if peak is None:
        peak = max(balance, rules.account_size)
    elif peak < balance:
        raise UserError(f"'peak' {peak:g} is below the balance {balance:g}: the peak is the highest balance",
                        file=file, column="peak", value=peak, fix="give the highest balance reached, or leave it out")
    threshold = _number(data, "threshold", file)
    if threshold is None:
        threshold = min(max(rules.initial_threshold, peak - rules.trailing_drawdown), rules.threshold_cap)
    elif not rules.initial_threshold <= threshold <= rules.threshold_cap:
        cap = "" if math.isinf(rules.threshold_cap) else f" and {rules.threshold_cap:,.0f}"
        raise UserError(f"'threshold' {threshold:g} is outside the {rules.name} range: between "
                        f"{rules.initial_threshold:,.0f}{cap}", file=file, column="threshold", value=threshold,
                        fix="give the trailing threshold the firm's dashboard shows (or check --rules/--account "
                            "of the run)")
    if balance <= threshold:
        raise UserError(f"the balance {balance:,.2f} is at or below the trailing threshold {threshold:,.2f}: the "
                        "account has failed", file=file, column="balance", value=balance,
                        fix="trade a new or reset account")
    days = _number(data, "days_traded", file, integer=True)
    if days is not None and days < 0:
        raise UserError("'days_traded' must be 0 or more", file=file, column="days_traded", value=int(days),
                        fix="the trading days so far, e.g. 4")
    best = _number(data, "best_day", file)
    if best is not None and best < 0:
        raise UserError("'best_day' must be 0 or more (the largest profit of one day)", file=file,
                        column="best_day", value=best, fix="0 when no day made money")
    return AccountStanding(balance, peak, threshold, int(days or 0), float(best or 0.0))


def read_standing(balance: float | None, state_file: str | None, rules: PropFirmRules) -> AccountStanding | None:
    """The standing ``--account-balance`` or ``--account-state FILE`` give (None: the preset's start)."""
    if balance is not None and state_file is not None:
        raise UserError("--account-balance and --account-state both given", value=balance,
                        fix="put the balance in the state file, or give only --account-balance")
    if balance is not None:
        try:
            return standing_from({"balance": balance}, rules)
        except UserError as err:
            raise UserError(f"--account-balance: {err.message}", value=balance, fix=err.fix) from None
    if state_file is None:
        return None
    path = Path(state_file).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UserError(f"--account-state: cannot read the file ({err.strerror or err})", file=str(path),
                        fix=f"write a JSON file such as {EXAMPLE}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"--account-state: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})",
                        file=str(path), row=err.lineno, fix=f"write e.g. {EXAMPLE}") from None
    return standing_from(data, rules, str(path))


def note_consistency(account: PropFirmAccount, journal: Journal, tns: int, say: Any) -> None:
    """At a day's end: when the day's profit is above the rule's share of the total profit, journal it with
    :data:`CONSISTENCY_CODE` (and say it). Entries are not blocked (see ``env.consistency``)."""
    check = account.consistency()
    day = account.balance - account.day_start_balance
    if check is None or day <= 0 or (check.total > 0 and day <= check.share * check.total + 1e-9):
        return
    message = f"the day made {day:,.2f}, above {check.share:.0%} of the total profit; {check.message()}"
    journal.record_error("account", message, tns, code=CONSISTENCY_CODE)
    say(f"note: {message}")


def consistency_note(account: PropFirmAccount) -> str | None:
    """The rule's state for the run's summary when a payout would be refused by it (None otherwise)."""
    check = account.consistency()
    return check.message() if check is not None and check.code == CONSISTENCY_30 else None


__all__ = ["CONSISTENCY_CODE", "FIELDS", "consistency_note", "note_consistency", "read_standing", "standing_from"]
