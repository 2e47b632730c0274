"""``hybrid-trader data check FILE``: load, validate and summarise a bars file."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="inspect and validate bars files")
    dsub = p.add_subparsers(dest="data", metavar="WHAT")
    dsub.required = True

    c = dsub.add_parser(
        "check",
        help="load a CSV/Parquet bars file, validate it and print a summary",
        description=(
            "Load OHLCV bars (CSV or Parquet), validate every row and print rows, period, bar size, "
            "sessions, RTH open, gaps and anything dropped or repaired. Exit 0 when the file loads, "
            "2 with one message naming file, line, column, value and the fix when it does not. "
            "See docs/DATA.md."
        ),
        epilog=(
            "examples (../shared/data):\n"
            "  hybrid-trader data check NQ_1min_2023-11_eastern.csv\n"
            "  hybrid-trader data check ES_1min_2025-09_11_eastern_plus5h.csv --time-shift -5\n"
            "  hybrid-trader data check NQ_5min_2024Q1_chicago_adjusted.csv --tz America/Chicago"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("file", metavar="FILE", help="bars file: .csv (also .csv.gz) or .parquet")
    c.add_argument(
        "--tz",
        default="America/New_York",
        metavar="ZONE",
        help="IANA time zone of naive timestamps, e.g. America/Chicago or UTC (default America/New_York); "
        "timestamps with a UTC offset ignore it",
    )
    c.add_argument(
        "--time-shift",
        type=float,
        default=0.0,
        metavar="HOURS",
        help="hours ADDED to every timestamp as written in the file, before --tz applies "
        "(a file stamped ET+5h needs --time-shift -5; default 0)",
    )
    c.add_argument(
        "--market",
        default=None,
        metavar="ROOT",
        help="contract root: NQ, MNQ, ES, MES, YM, MYM, RTY, M2K (default: guessed from the file name, else NQ)",
    )
    c.add_argument(
        "--repair",
        action="store_true",
        help="fix what can be fixed (drop duplicates keeping the first, sort, swap high/low, widen high/low, "
        "x100 divided prices, drop unreadable rows) and report each fix, instead of stopping at the first problem",
    )
    c.add_argument(
        "--stamps",
        choices=("start", "end"),
        default=None,
        help="which end of the bar a timestamp marks: start (default for a CSV with a header) or end (default for "
        "NinjaTrader's header-less export 'yyyyMMdd HHmmss;open;high;low;close;volume', read as UTC); end stamps "
        "are moved back one bar to the bar's start",
    )
    c.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    c.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    # Loading the data layer (pandas, numpy) costs 0.3 s (measured); `hybrid-trader --help` (0.1 s) must not pay it.
    from hybrid_trader.data.loader import load_bars
    from hybrid_trader.data.summary import format_summary, summarize  # same reason

    bars = load_bars(args.file, tz=args.tz, time_shift=args.time_shift, market=args.market, repair=args.repair,
                     stamps=args.stamps)
    summary = summarize(bars)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(format_summary(summary))
    return 0
