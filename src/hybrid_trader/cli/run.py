"""``hybrid-trader run RUN_DIR --feed ... --broker paper --journal FILE``: trade a run's agent on a bar feed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hybrid_trader.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="trade a trained run on a replayed or followed bar feed, every step journaled",
        description="Trade the agent of RUN_DIR bar by bar on a feed, with the same decisions as 'evaluate' "
        "(the same environment core, policy and rules), journaling every bar, decision (probabilities, reason "
        "codes, latency), order, fill, account snapshot and error in an SQLite file. Restarted with the same "
        "--journal after a crash or kill -9, it replays the feed's history, checks the journal's position and "
        "balance, and continues without sending or booking anything twice. Ctrl-C stops with exit code 130 "
        "(--on-exit). docs/LIVE.md.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by 'hybrid-trader train'")
    p.add_argument("--feed", required=True, metavar="SPEC",
                   help="replay:FILE[:SPEED] (a bar file, as fast as possible or SPEED x real time) or follow:FILE "
                        "(a CSV a platform appends to); the file's history before the traded days warms the "
                        "features up")
    p.add_argument("--split", choices=("train", "val", "test", "all"), default="all",
                   help="trade only the run's days of this split (replays: 'test' makes evaluate's trades); "
                        "default all")
    p.add_argument("--broker", choices=("paper",), default="paper",
                   help="paper: the environment's own fills, costs and stops (default)")
    p.add_argument("--bar-minutes", type=int, default=None, metavar="N",
                   help="the bar size of a follow: feed in minutes (default: the run's training data's; a replay "
                        "reads it from its file)")
    p.add_argument("--idle-exit", type=float, default=None, metavar="S",
                   help="a follow: feed ends after S seconds without a new line (default: it runs until Ctrl-C)")
    p.add_argument("--advisor", choices=("async", "off"), default="async",
                   help="a phase 3 run whose advisor is an LLM (not a distilled student): ask it asynchronously, "
                        "each decision using the latest answer (async, default), or decide RL-only (off)")
    p.add_argument("--llm-budget-ms", type=float, default=0.0, metavar="MS",
                   help="with --advisor async, how long a decision may wait for its own bar's answer before it uses "
                        "the advice in force (default 0: never waits)")
    p.add_argument("--journal", required=True, metavar="FILE", help="the SQLite journal (created, or continued)")
    p.add_argument("--on-exit", choices=("flatten", "protect"), default="flatten",
                   help="Ctrl-C with an open position: close it at the last close (flatten, default) or leave it "
                        "to its stop and target (protect)")
    p.add_argument("--no-status", action="store_true",
                   help="no live status on stderr (by default: one line redrawn in place on a terminal, a line per "
                        "change of position, trades, account status or day otherwise; docs/LIVE.md)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary as the last line (net P&L, trades, account status)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the executor loads torch, SB3 and the environment: `hybrid-trader --help` must not pay it
    from hybrid_trader.live.executor import Executor, run_bar_minutes, split_dates
    from hybrid_trader.live.feeds import ReplayFeed, open_feed, parse_feed_spec  # same reason
    from hybrid_trader.live.status import StatusPrinter

    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError("not a run directory (no config.yaml)", file=str(run_dir),
                        fix="give the folder 'hybrid-trader train' wrote")
    journal = Path(args.journal).expanduser()
    if not journal.parent.is_dir():
        raise UserError("the journal's folder does not exist", file=str(journal),
                        fix=f"create it first (mkdir -p {journal.parent}) or choose another path")
    spec = parse_feed_spec(args.feed)
    if args.idle_exit is not None and (spec.scheme != "follow" or not args.idle_exit > 0):
        raise UserError(f"--idle-exit {args.idle_exit}: a positive number of seconds, for a follow: feed",
                        fix="e.g. --feed follow:export.csv --idle-exit 600, or drop it")
    feed = open_feed(spec, **({"timeout_s": args.idle_exit} if args.idle_exit else {}))
    market = feed.bars.market if isinstance(feed, ReplayFeed) else None
    if isinstance(feed, ReplayFeed):
        bar_minutes = feed.bars.bar_minutes
        if args.bar_minutes is not None and args.bar_minutes != bar_minutes:
            raise UserError(f"--bar-minutes {args.bar_minutes} but the replayed file holds {bar_minutes}-minute bars",
                            file=str(spec.path), fix="drop --bar-minutes for a replay")
    else:
        bar_minutes = args.bar_minutes or run_bar_minutes(run_dir)
    if not 0.0 <= args.llm_budget_ms <= 60_000.0:
        raise UserError(f"--llm-budget-ms {args.llm_budget_ms} must be between 0 and 60000",
                        fix="e.g. --llm-budget-ms 200, or 0 to never wait")
    if bar_minutes < 1:
        raise UserError(f"--bar-minutes {bar_minutes} must be at least 1", fix="e.g. --bar-minutes 5")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    executor = Executor(run_dir, journal, trade_dates=split_dates(run_dir, args.split), market=market,
                        bar_minutes=bar_minutes, say=say, llm=args.advisor, llm_budget_ms=args.llm_budget_ms)
    status = None if args.no_status else StatusPrinter(sys.stderr)
    code = 0
    try:
        summary = executor.run_feed(feed, on_bar=None if status is None else status.update)
    except KeyboardInterrupt:
        executor.stop(args.on_exit)
        summary = executor.summary
        code = 130
    finally:
        if status is not None:
            status.finish(executor)
        executor.close()
    for note in summary.notes:
        say(f"note: {note}")
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        print(f"{summary.bars} bars ({summary.rejected} rejected, {summary.recovered_bars} recovered from the "
              f"journal), {summary.decisions} decisions, {summary.trades} trades, net P&L {summary.net_pnl:,.2f}, "
              f"account {summary.account_status}; journal: {journal}")
    return code
