"""Bars in: loading, validation, repair, summaries and the built-in synthetic market."""

from hybrid_trader.data.bars import EASTERN, OHLCV, Bars

__all__ = ["Bars", "EASTERN", "OHLCV"]
