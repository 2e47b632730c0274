"""The feature columns, defined once for both feature paths: the 261 observation names, their groups,
descriptions and who fills them, and the raw indicators (``RAW_INDICATORS``).

The observation the environment builds at bar t is laid out exactly as ``FEATURE_NAMES``::

    [ window 220 | position 5 | flags 3 ]                               = BASE (228, phases 1-2)
    [ market context 10 | multi-timeframe 8 | pattern 10 | risk 5 ]     = LLM  (33, phase 3)

The window holds the 11 per-bar features of bars t-19 .. t (oldest first, bar-major:
all 11 features of bar t-19, then of bar t-18, ...). ``compute_features`` fills the
window and the 28 market features (batch; ``IncrementalFeatures`` the same columns one bar at a
time); the environment fills the 5 position, 3 flag and
5 risk features (``filled_by == "env"``).

``python -m hybrid_trader.features.names`` prints the Markdown table of
``docs/FEATURES.md``.
"""

from __future__ import annotations

WINDOW = 20
"""Bars in the observation window (bar t-19 .. bar t)."""

# ---- per-bar features (the window) -------------------------------------------------
BAR_FEATURES: dict[str, str] = {
    "log_ret": "log(close / previous close) divided by ATR(14)/previous close "
    "(about the close-to-close change in ATRs), clipped to [-10, 10]",
    "range_atr": "(high - low) / ATR(14), clipped to [0, 10]",
    "body_atr": "(close - open) / ATR(14), clipped to [-10, 10]",
    "volume_z": "z-score of log(1 + volume) against the last 20 bars (rolling mean and "
    "std, std floored at 0.05), clipped to [-10, 10]",
    "sma20_gap_atr": "(close - SMA(20)) / ATR(14), clipped to [-10, 10]",
    "sma50_gap_atr": "(close - SMA(50)) / ATR(14), clipped to [-10, 10]",
    "rsi14": "(RSI(14) - 50) / 50, in [-1, 1]",
    "macd_hist_atr": "MACD(12, 26, 9) histogram / ATR(14), clipped to [-10, 10]",
    "tod_sin": "sin(2 pi * minute of day ET / 1440) of the bar's start",
    "tod_cos": "cos(2 pi * minute of day ET / 1440) of the bar's start",
    "session_progress": "minutes since the Globex session open (18:00 ET) / 1380: "
    "0 at 18:00, 1379/1380 at 16:59",
}
BAR_FEATURE_NAMES: list[str] = list(BAR_FEATURES)

# ---- position and validity flags (filled by the environment) -----------------------
POSITION_FEATURES: dict[str, str] = {
    "position": "side of the open position: +1 long, -1 short, 0 flat",
    "entry_dist_atr": "side * (close - entry price) / ATR(14): open profit in ATRs, 0 when flat",
    "stop_dist_atr": "side * (close - stop price) / ATR(14): room to the stop in ATRs "
    "(positive while the stop is on the protective side), 0 when flat",
    "target_dist_atr": "side * (target price - close) / ATR(14): room to the target in ATRs, "
    "0 when flat or without a target",
    "time_in_position": "(bars since entry + 1) / 60, 0 when flat",
}
POSITION_FEATURE_NAMES: list[str] = list(POSITION_FEATURES)

FLAG_FEATURES: dict[str, str] = {
    "can_enter": "1 if an entry (BUY / SELL) is legal at this bar (action mask), else 0",
    "can_manage": "1 if a management action (break-even, trail on / off) is legal, else 0 "
    "(always 0 in phase 1)",
    "has_position": "1 if a position is open, else 0",
}
FLAG_FEATURE_NAMES: list[str] = list(FLAG_FEATURES)

BASE_FEATURE_NAMES: list[str] = (
    [f"{name}[t-{lag}]" for lag in range(WINDOW - 1, -1, -1) for name in BAR_FEATURE_NAMES]
    + POSITION_FEATURE_NAMES
    + FLAG_FEATURE_NAMES
)

# ---- the 33 LLM-phase (phase 3) features ------------------------------------------
MARKET_CONTEXT: dict[str, str] = {
    "adx_slope": "(ADX(14)[t] - ADX(14)[t-5]) / 5: ADX points per bar over the last 5 bars, "
    "clipped to [-10, 10]",
    "vwap_dist_pct": "100 * (close - session VWAP) / session VWAP, in percent; the VWAP of "
    "typical price resets at each Globex session open (18:00 ET); clipped to [-10, 10]",
    "volatility_regime": "log(ATR(14) / mean ATR(14) of the last 900 minutes of bars), "
    "clipped to [-5, 5]",
    "volume_regime": "log((mean volume of the last 60 min + 1) / (mean volume of the last "
    "900 min + 1)), clipped to [-5, 5]",
    "momentum_20m": "(close - close 20 min ago) / (ATR(14) * sqrt(bars in 20 min)): "
    "volatility-scaled move, clipped to [-10, 10]",
    "momentum_60m": "(close - close 60 min ago) / (ATR(14) * sqrt(bars in 60 min)), "
    "clipped to [-10, 10]",
    "efficiency_ratio": "Kaufman efficiency ratio over 20 bars: |net close change| / sum of "
    "|bar-to-bar close changes|, in [0, 1]",
    "spread_ratio": "spread proxy (high - low) / close, in units of 10 basis points "
    "(x 1000), clipped to [0, 10] (bars carry no bid/ask, so the bar range stands in)",
    "session_trend": "(close - session open) / (ATR(14) * sqrt(bars since the Globex "
    "session open + 1)), clipped to [-10, 10]",
    "market_regime": "sign(SMA(20) - SMA(50)) * clip((ADX(14) - 20) / 20, 0, 1): 0 ranging "
    "(ADX <= 20), +1 / -1 strong up / down trend (ADX >= 40)",
}
MARKET_CONTEXT_NAMES: list[str] = list(MARKET_CONTEXT)

MULTI_TIMEFRAME: dict[str, str] = {
    "sma50_slope_atr": "(SMA(50)[t] - SMA(50)[t-10]) / ATR(14), clipped to [-10, 10]",
    "sma200_slope_atr": "(SMA(200)[t] - SMA(200)[t-10]) / ATR(14), clipped to [-10, 10]",
    "rsi_15m": "(RSI(14) of 15-minute closes ending at t - 50) / 50: Wilder RSI over the "
    "closes t, t-k, t-2k, ... (k = bars in 15 min), in [-1, 1]",
    "rsi_60m": "(RSI(14) of 60-minute closes ending at t - 50) / 50, in [-1, 1]",
    "volume_ratio_5m": "log((mean volume of the last 5 min + 1) / (mean volume of the last "
    "60 min + 1)), clipped to [-5, 5]",
    "volume_ratio_20m": "log((mean volume of the last 20 min + 1) / (mean volume of the last "
    "60 min + 1)), clipped to [-5, 5]",
    "price_change_60m": "100 * log(close / close 60 min ago): 60-minute change in percent, "
    "clipped to [-10, 10]",
    "sr_position_240m": "where the close sits in the range of the last 240 min: -1 at the "
    "lowest low (support), +1 at the highest high (resistance), 0 if flat",
}
MULTI_TIMEFRAME_NAMES: list[str] = list(MULTI_TIMEFRAME)

PATTERNS: dict[str, str] = {
    "higher_high": "1 if the highest high of the last 15 min exceeds that of the 15 min "
    "before, else 0",
    "higher_low": "1 if the lowest low of the last 15 min exceeds that of the 15 min before, "
    "else 0",
    "lower_high": "1 if the highest high of the last 15 min is below that of the 15 min "
    "before, else 0",
    "lower_low": "1 if the lowest low of the last 15 min is below that of the 15 min before, "
    "else 0",
    "double_top": "1 if the last 60 min hold two highs (one per half) within 0.5 ATR of each "
    "other with a dip of at least 1 ATR between them and the close at least 1 ATR below the "
    "lower of them, else 0",
    "double_bottom": "1 if the last 60 min hold two lows (one per half) within 0.5 ATR with "
    "a rally of at least 1 ATR between them and the close at least 1 ATR above the higher "
    "of them, else 0",
    "support_dist": "(close - support) / (ATR(14) * sqrt(bars in 60 min)), support = lowest "
    "low of the previous 60 min (current bar excluded), clipped to [-10, 10]",
    "resistance_dist": "(resistance - close) / (ATR(14) * sqrt(bars in 60 min)), resistance = "
    "highest high of the previous 60 min (current bar excluded), clipped to [-10, 10]",
    "breakout": "1 if the close is above the resistance (highest high of the previous "
    "60 min, current bar excluded), else 0",
    "breakdown": "1 if the close is below the support (lowest low of the previous 60 min, "
    "current bar excluded), else 0",
}
PATTERN_NAMES: list[str] = list(PATTERNS)

RISK_FEATURES: dict[str, str] = {
    "unrealized_pnl": "open profit [$] / the rules' trailing drawdown allowance [$], 0 when flat",
    "current_drawdown": "(peak equity - equity) / trailing drawdown allowance: 0 at the peak, "
    "1 = a full allowance below it",
    "consecutive_losses": "min(losing trades in a row, 10) / 5, in [0, 2]",
    "recent_win_rate": "winning share of the recent closed trades, in [0, 1]; 0.5 before any trade",
    "mae_mfe_ratio": "min(MAE / MFE, 10) / 10 of the open position, in [0, 1] (MAE, MFE: "
    "largest adverse and favourable excursion since entry); 0 when flat",
}
RISK_FEATURE_NAMES: list[str] = list(RISK_FEATURES)

MARKET_FEATURE_NAMES: list[str] = MARKET_CONTEXT_NAMES + MULTI_TIMEFRAME_NAMES + PATTERN_NAMES
"""The 28 columns of ``FeatureSet.llm_market``, in order."""

LLM_FEATURE_NAMES: list[str] = MARKET_FEATURE_NAMES + RISK_FEATURE_NAMES
FEATURE_NAMES: list[str] = BASE_FEATURE_NAMES + LLM_FEATURE_NAMES

# ---- raw indicators in natural units (``FeatureSet.raw``; not in the observation) --------------
RAW_FALLBACKS: dict[str, str] = {
    "mean_tr": "mean true range of the bars so far, floored at one tick",
    "mean_close": "mean close of the bars so far",
    "mean_volume": "mean volume of the bars so far",
    "close": "the bar's close",
    "change_since_first": "close - the first bar's close",
    "log_change_since_first": "log(close / the first bar's close)",
    "lowest_low": "lowest low of the bars so far",
    "highest_high": "highest high of the bars so far",
}
"""The causal fall-backs of ``RAW_INDICATORS`` while an indicator's look-back is not full (name: what it is)."""

RAW_INDICATORS: dict[str, tuple[str, float | str]] = {
    "tr": ("true range [points] (high - low on the first bar)", 0.0),
    "atr14": ("ATR(14) [points], floored at one tick: stops and targets are set from it", "mean_tr"),
    "rsi14": ("RSI(14), 50 while the price has not moved", 50.0),
    "adx14": ("ADX(14)", 0.0),
    "sma20": ("SMA(20) of the close [price]", "mean_close"),
    "sma50": ("SMA(50) of the close [price]", "mean_close"),
    "sma200": ("SMA(200) of the close [price]", "mean_close"),
    "macd": ("MACD(12, 26) [points]", 0.0),
    "macd_signal": ("MACD signal line (9) [points]", 0.0),
    "macd_hist": ("MACD histogram [points]", 0.0),
    "vwap": ("session VWAP of typical price since 18:00 ET [price]", "close"),
    "mom10": ("close - close 10 bars ago [points]", "change_since_first"),
    "volume_sma20": ("SMA(20) of volume [contracts]", "mean_volume"),
    "ret_20": ("log(close / close 20 bars ago)", "log_change_since_first"),
    "ret_60": ("log(close / close 60 bars ago)", "log_change_since_first"),
    "rsi_15m": ("RSI(14) of 15-minute closes ending at t", 50.0),
    "rsi_60m": ("RSI(14) of 60-minute closes ending at t", 50.0),
    "support_60m": ("lowest low of the previous 60 min [price]", "lowest_low"),
    "resistance_60m": ("highest high of the previous 60 min [price]", "highest_high"),
    "session_open": ("open of the session's first bar [price]", "close"),
}
"""The ``raw`` columns both feature paths give (batch ``FeatureSet.raw``, incremental ``FeatureRow.raw``), in
order: name -> (description, fall-back during warm-up: a constant or a ``RAW_FALLBACKS`` name)."""
RAW_NAMES: list[str] = list(RAW_INDICATORS)


def _build_table() -> list[dict]:
    rows: list[tuple[str, str, str, str]] = []
    for lag in range(WINDOW - 1, -1, -1):
        for name, desc in BAR_FEATURES.items():
            rows.append((f"{name}[t-{lag}]", "bar_window", f"bar t-{lag}: {desc}", "features"))
    groups = (
        ("position", POSITION_FEATURES, "env"),
        ("flags", FLAG_FEATURES, "env"),
        ("market_context", MARKET_CONTEXT, "features"),
        ("multi_timeframe", MULTI_TIMEFRAME, "features"),
        ("pattern", PATTERNS, "features"),
        ("risk", RISK_FEATURES, "env"),
    )
    for group, descs, filled_by in groups:
        rows.extend((name, group, desc, filled_by) for name, desc in descs.items())
    return [
        {"index": i, "name": n, "group": g, "description": d, "filled_by": f}
        for i, (n, g, d, f) in enumerate(rows)
    ]


FEATURE_TABLE: list[dict] = _build_table()
"""One dict per observation entry: ``index, name, group, description, filled_by``."""


def feature_table_markdown() -> str:
    """The Markdown table of all 261 observation entries (as in ``docs/FEATURES.md``)."""
    lines = [
        "| index | name | group | description | filled by |",
        "|---:|---|---|---|---|",
    ]
    for row in FEATURE_TABLE:
        desc = row["description"].replace("|", "\\|")
        lines.append(
            f"| {row['index']} | `{row['name']}` | {row['group']} | {desc} | {row['filled_by']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(feature_table_markdown(), end="")
