"""Prop-firm rules as named presets: Apex Trader Funding before and after March 2026.

The figures come from Apex's public descriptions of its evaluation accounts. Firms
change their rules often: check the firm's current terms, and override any field in
the ``rules`` section of a run's config (see ``EnvConfig.rules_overrides``).

How the trailing threshold works (intraday mode, the Apex default):

* it starts at ``account_size - trailing_drawdown``;
* it trails the **intraday peak of balance including open profit** (so it needs each
  bar's high or low, not its close), never moving down;
* it stops trailing once it reaches ``account_size + trail_stop_offset`` (legacy Apex:
  the starting balance plus $100); ``None`` means it trails until the profit target;
* equity (balance plus open profit at the worst price of a bar) at or below the
  threshold is a breach: the account fails.

In ``eod`` mode the threshold only moves at the end of each session, from the closing
balance, and a daily loss limit flattens the position and stops trading for the rest
of that session (``DAILY_LOSS_LIMIT``) instead of failing the account.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from hybrid_trader.errors import UserError, did_you_mean


@dataclass(frozen=True)
class PropFirmRules:
    """The rules of one prop-firm evaluation account."""

    name: str
    """Preset name, e.g. ``apex-legacy/50K``."""
    account_size: float
    """Starting balance [$]."""
    trailing_drawdown: float
    """Distance from the peak to the threshold [$]."""
    profit_target: float
    """Profit that passes the evaluation [$]."""
    max_contracts: int
    """Largest position in mini contracts (a micro counts as 1/10 of a mini)."""
    trail_mode: Literal["intraday", "eod"] = "intraday"
    """``intraday``: trails the live peak including open profit; ``eod``: trails closing balances."""
    trail_stop_offset: float | None = 100.0
    """The threshold stops trailing at ``account_size + trail_stop_offset`` [$]; None: it trails until the profit
    target (it stops at ``account_size + profit_target - trailing_drawdown``)."""
    daily_loss_limit: float | None = None
    """Loss in one session that flattens and stops trading for the day [$] (EOD accounts)."""
    flat_by: str = "16:59"
    """Positions must be flat by this time, US/Eastern."""
    consistency_share: float | None = 0.30
    """At payout no trading day's profit may exceed this share of the total profit (Apex: 30%); None: no such
    rule. Reported (``env.consistency``), never a breach, never a block on entries."""

    @property
    def initial_threshold(self) -> float:
        return self.account_size - self.trailing_drawdown

    @property
    def threshold_cap(self) -> float:
        """Highest level the trailing threshold can reach [$]: the starting balance plus ``trail_stop_offset``, or,
        without one, where it stands when the peak reaches the profit target."""
        if self.trail_stop_offset is None:
            return self.account_size + self.profit_target - self.trailing_drawdown
        return self.account_size + self.trail_stop_offset


def _preset(family: str, size: str, **fields: object) -> PropFirmRules:
    return PropFirmRules(name=f"{family}/{size}", **fields)  # type: ignore[arg-type]


# Apex legacy accounts: intraday trailing, stops trailing at the starting balance + $100.
_APEX_LEGACY = {size: _preset("apex-legacy", size, account_size=bal, trailing_drawdown=dd, profit_target=target,
                              max_contracts=maxc)
                for size, bal, dd, target, maxc in [
                    # size    account   trailing dd  target   max minis
                    ("25K", 25_000, 1_500, 1_500, 4),
                    ("50K", 50_000, 2_500, 3_000, 10),
                    ("75K", 75_000, 2_750, 4_250, 12),
                    ("100K", 100_000, 3_000, 6_000, 14),
                    ("150K", 150_000, 5_000, 9_000, 17),
                    ("250K", 250_000, 6_500, 15_000, 27),
                    ("300K", 300_000, 7_500, 20_000, 35),
                ]}


def _apex_2026(trail_mode: str) -> dict[str, PropFirmRules]:
    """Apex "4.0" (accounts bought from 1 March 2026): four sizes, the threshold trails until the target.

    The daily loss limit applies to the EOD accounts only.
    """
    family = f"apex-2026-{trail_mode}"
    return {size: _preset(family, size, account_size=bal, trailing_drawdown=dd, profit_target=target,
                          max_contracts=maxc, trail_mode=trail_mode, trail_stop_offset=None,
                          daily_loss_limit=dll if trail_mode == "eod" else None)
            for size, bal, dd, target, maxc, dll in [
                # size    account   trailing dd  target  max minis  daily loss limit (EOD)
                ("25K", 25_000, 1_000, 1_500, 4, 500),
                ("50K", 50_000, 2_000, 3_000, 6, 1_000),
                ("100K", 100_000, 3_000, 6_000, 8, 1_500),
                ("150K", 150_000, 4_000, 9_000, 12, 2_000),
            ]}


RULE_PRESETS: dict[str, dict[str, PropFirmRules]] = {
    "apex-legacy": _APEX_LEGACY,
    "apex-2026-intraday": _apex_2026("intraday"),
    "apex-2026-eod": _apex_2026("eod"),
}
"""Every preset by family and account size; each value a complete, named :class:`PropFirmRules`."""


def get_rules(preset: str = "apex-legacy", account: str = "50K", **overrides: object) -> PropFirmRules:
    """The rules of a preset and account size, with optional field overrides."""
    key = str(preset).strip().lower()
    if key not in RULE_PRESETS:
        raise UserError(
            f"unknown rules preset '{preset}'." + did_you_mean(key, RULE_PRESETS),
            fix=f"use one of: {', '.join(RULE_PRESETS)}",
        )
    sizes = RULE_PRESETS[key]
    size = str(account).strip().upper()
    if size.isdigit():
        size = f"{int(size) // 1000}K"
    if size not in sizes:
        raise UserError(
            f"account size '{account}' does not exist in preset '{key}'.",
            fix=f"use one of: {', '.join(sizes)}",
        )
    rules = sizes[size]
    if overrides:
        unknown = [k for k in overrides if k not in PropFirmRules.__dataclass_fields__]
        if unknown:
            raise UserError(
                f"unknown rules field '{unknown[0]}'." + did_you_mean(unknown[0], PropFirmRules.__dataclass_fields__)
            )
        rules = replace(rules, **overrides)  # type: ignore[arg-type]
    return rules
