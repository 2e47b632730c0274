"""Futures contract specifications (CME): tick size and tick value.

``point_value`` is dollars per one index point per contract. Commission and slippage
defaults are per side, per contract, and live here so that every part of the system
charges the same costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_trader.errors import UserError, did_you_mean


@dataclass(frozen=True)
class ContractSpec:
    """One futures contract."""

    symbol: str
    """Root symbol, e.g. ``NQ``."""
    name: str
    """Human-readable name."""
    tick_size: float
    """Minimum price increment in index points."""
    tick_value: float
    """Dollars per tick per contract."""
    commission_per_side: float
    """Default round-turn half: commission and fees per contract per side [$]."""
    is_micro: bool = False

    @property
    def point_value(self) -> float:
        """Dollars per index point per contract."""
        return self.tick_value / self.tick_size


CONTRACTS: dict[str, ContractSpec] = {
    c.symbol: c
    for c in (
        ContractSpec("NQ", "E-mini Nasdaq-100", 0.25, 5.00, 2.10),
        ContractSpec("MNQ", "Micro E-mini Nasdaq-100", 0.25, 0.50, 0.62, True),
        ContractSpec("ES", "E-mini S&P 500", 0.25, 12.50, 2.10),
        ContractSpec("MES", "Micro E-mini S&P 500", 0.25, 1.25, 0.62, True),
        ContractSpec("YM", "E-mini Dow ($5)", 1.0, 5.00, 2.10),
        ContractSpec("MYM", "Micro E-mini Dow", 1.0, 0.50, 0.62, True),
        ContractSpec("RTY", "E-mini Russell 2000", 0.10, 5.00, 2.10),
        ContractSpec("M2K", "Micro E-mini Russell 2000", 0.10, 0.50, 0.62, True),
    )
}


def get_contract(symbol: str) -> ContractSpec:
    """Look up a contract by root symbol (case-insensitive)."""
    key = str(symbol).strip().upper()
    if key not in CONTRACTS:
        raise UserError(
            f"unknown market '{symbol}'." + did_you_mean(key, CONTRACTS),
            fix=f"use one of: {', '.join(CONTRACTS)}",
        )
    return CONTRACTS[key]
