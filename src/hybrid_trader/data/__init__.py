"""Bars in: loading, validation, repair, summaries and the built-in synthetic market."""

from hybrid_trader.data.bars import EASTERN, OHLCV, Bars
from hybrid_trader.data.findings import DataFinding, Repair
from hybrid_trader.data.loader import load_bars
from hybrid_trader.data.summary import format_summary, summarize
from hybrid_trader.data.synthetic import SyntheticMarket, generate_bars, generate_market

__all__ = [
    "Bars",
    "EASTERN",
    "DataFinding",
    "OHLCV",
    "Repair",
    "SyntheticMarket",
    "format_summary",
    "generate_bars",
    "generate_market",
    "load_bars",
    "summarize",
]
