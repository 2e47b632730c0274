"""``hybrid-trader run RUN_DIR --feed ... --broker paper|ninjatrader --journal FILE``: trade a run's agent on a feed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid_trader.errors import UserError

if TYPE_CHECKING:
    from hybrid_trader.live.ninjatrader import NinjaTraderBridge

NT_DIR_DEFAULT = "~/Documents/NinjaTrader 8"


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
    p.add_argument("--broker", choices=("paper", "ninjatrader"), default="paper",
                   help="paper: the environment's own fills, costs and stops (default); ninjatrader: the same "
                        "paper decisions, every order also sent to NinjaTrader 8 through its ATI files, its fills "
                        "journaled and its position watched (docs/NINJATRADER.md)")
    p.add_argument("--nt-dir", metavar="DIR", default=None,
                   help=f"ninjatrader: NinjaTrader's user folder holding incoming/ and outgoing/ (default "
                        f"'{NT_DIR_DEFAULT}')")
    p.add_argument("--nt-account", metavar="NAME", help="ninjatrader: the account as NinjaTrader names it (Sim101)")
    p.add_argument("--nt-instrument", metavar="NAME",
                   help="ninjatrader: the contract as NinjaTrader names it, e.g. 'NQ 12-26'")
    p.add_argument("--nt-mismatch-bars", metavar="N", type=int, default=2,
                   help="ninjatrader: bars NinjaTrader's position may differ from the paper one (a fill may lag) "
                        "before new entries halt (default 2)")
    p.add_argument("--tz", metavar="TZ",
                   help="time zone of the feed's naive timestamps (default: the run's data.tz, as it was trained)")
    p.add_argument("--time-shift", type=float, metavar="HOURS",
                   help="hours added to every timestamp of the feed (default: the run's data.time_shift)")
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
    p.add_argument("--journal", required=True, metavar="FILE",
                   help="the SQLite journal (created, or continued: one run's, another run's is refused; one process "
                        "at a time, a second refused naming the first's PID)")
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
    from hybrid_trader.run import RunDir
    from hybrid_trader.training.config import RunConfig

    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError("not a run directory (no config.yaml)", file=str(run_dir),
                        fix="give the folder 'hybrid-trader train' wrote")
    journal = Path(args.journal).expanduser()
    if not journal.parent.is_dir():
        raise UserError("the journal's folder does not exist", file=str(journal),
                        fix=f"create it first (mkdir -p {journal.parent}) or choose another path")
    bridge = ninjatrader_bridge(args)
    spec = parse_feed_spec(args.feed)
    if args.idle_exit is not None and (spec.scheme != "follow" or not args.idle_exit > 0):
        raise UserError(f"--idle-exit {args.idle_exit}: a positive number of seconds, for a follow: feed",
                        fix="e.g. --feed follow:export.csv --idle-exit 600, or drop it")
    data = RunDir(run_dir).load_config(RunConfig).data  # the feed's clock defaults to the training data's
    extra: dict[str, Any] = {"tz": args.tz or data.tz,
                             "time_shift": data.time_shift if args.time_shift is None else args.time_shift}
    if args.idle_exit:
        extra["timeout_s"] = args.idle_exit
    feed = open_feed(spec, **extra)
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
                        bar_minutes=bar_minutes, say=say, llm=args.advisor, llm_budget_ms=args.llm_budget_ms,
                        bridge=bridge, mismatch_bars=args.nt_mismatch_bars)
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
    halted = f", new entries halted ({summary.halted})" if summary.halted else ""
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        print(f"{summary.bars} bars ({summary.rejected} rejected, {summary.recovered_bars} recovered from the "
              f"journal), {summary.decisions} decisions, {summary.trades} trades, net P&L {summary.net_pnl:,.2f}, "
              f"account {summary.account_status}{halted}; journal: {journal}")
    return code


def ninjatrader_bridge(args: argparse.Namespace) -> NinjaTraderBridge | None:
    """The ATI bridge ``--broker ninjatrader`` names (None for paper); each bad option is a UserError naming it."""
    nt_options = {"--nt-dir": args.nt_dir, "--nt-account": args.nt_account, "--nt-instrument": args.nt_instrument}
    if args.broker != "ninjatrader":
        given = [name for name, value in nt_options.items() if value is not None]
        if given:
            raise UserError(f"{', '.join(given)} only applies to --broker ninjatrader", value=args.broker,
                            fix="add --broker ninjatrader, or leave out the --nt-* options")
        return None
    for name, example in (("--nt-account", "Sim101"), ("--nt-instrument", "'NQ 12-26'")):
        if not (nt_options[name] or "").strip():
            raise UserError(f"--broker ninjatrader needs {name}", fix=f"add {name} {example} (as NinjaTrader "
                            "names it in its Control Center)")
    if args.nt_mismatch_bars < 0:
        raise UserError("--nt-mismatch-bars must be 0 or more", value=args.nt_mismatch_bars,
                        fix="e.g. --nt-mismatch-bars 2 (a fill may lag a bar)")
    nt_dir = Path(args.nt_dir or NT_DIR_DEFAULT).expanduser()
    if not nt_dir.is_dir():
        raise UserError("--nt-dir: NinjaTrader's user folder not found", file=str(nt_dir),
                        fix="pass --nt-dir with the folder holding incoming/ and outgoing/ (Windows: Documents\\"
                            "NinjaTrader 8; under WSL: /mnt/c/Users/<you>/Documents/NinjaTrader 8)")
    # --broker ninjatrader only (the bridge checks incoming/, outgoing/ and writing when it is made)
    from hybrid_trader.live.ninjatrader import NinjaTraderBridge

    try:
        return NinjaTraderBridge(nt_dir, args.nt_account.strip(), args.nt_instrument.strip())
    except UserError as err:
        raise UserError(f"--nt-dir: {err.message}", file=err.file, value=err.value, fix=err.fix) from None
