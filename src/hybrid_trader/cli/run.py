"""``hybrid-trader run RUN_DIR --feed ... --broker paper|ninjatrader --journal FILE``: trade a run's agent on a feed."""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid_trader.cli.options import add_no_calibrate
from hybrid_trader.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from hybrid_trader.live.ninjatrader import NinjaTraderBridge

NT_DIR_DEFAULT = "~/Documents/NinjaTrader 8"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="trade a trained run on a replayed or followed bar feed, every step journaled",
        description="Trade the agent of RUN_DIR bar by bar on a feed, with the same decisions as 'evaluate' "
        "(the same environment core, policy and rules), journaling every bar, decision (probabilities, reason "
        "codes, latency), order, fill, account snapshot and error in an SQLite file. History is never traded: bars "
        "ending before the live point (--live-from; a follow: feed's default: now) only warm the features. "
        "Restarted with the same --journal after a crash or kill -9, it replays the feed's history, checks the "
        "journal's position and balance, and continues without sending or booking anything twice. Ctrl-C stops "
        "with exit code 130 (--on-exit). docs/LIVE.md.",
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
    p.add_argument("--nt-roll-warn-days", metavar="N", type=int, default=12,
                   help="ninjatrader: warn when --nt-instrument expires within N days (CME equity index futures "
                        "expire on the third Friday of March, June, September, December; volume rolls 8 days "
                        "earlier); an expired contract is refused (default 12; a replay checks its last bar's date)")
    p.add_argument("--nt-mismatch-bars", metavar="N", type=int, default=2,
                   help="ninjatrader: bars in a row NinjaTrader's position may differ from the paper one in the "
                        "same way (a fill may lag) before new entries halt (default 2); a position NinjaTrader holds "
                        "while the paper one is flat halts at once and is closed, except for N bars after the paper "
                        "one left it by a stop or target NinjaTrader takes itself (no entry on those bars)")
    p.add_argument("--nt-ack-timeout", metavar="S", type=float, default=60.0,
                   help="ninjatrader: seconds NinjaTrader has to answer an order with a state file; an order file "
                        "still unread in incoming/ after that is withdrawn (deleted, journaled 'withdrawn') and new "
                        "entries halt (default 60)")
    p.add_argument("--nt-connection", metavar="NAME",
                   help="ninjatrader: the connection's name in NinjaTrader's Connection Manager; its state file "
                        "outgoing/NAME.txt is read each bar and anything but CONNECTED halts new entries "
                        "(default: not read)")
    p.add_argument("--tz", metavar="TZ",
                   help="time zone of the feed's naive timestamps (default: the run's data.tz, as it was trained)")
    p.add_argument("--time-shift", type=float, metavar="HOURS",
                   help="hours added to every timestamp of the feed (default: the run's data.time_shift)")
    p.add_argument("--stamps", choices=("start", "end"), default=None,
                   help="which end of the bar the feed's timestamps mark: start (default for a CSV with a header) or "
                        "end (default for NinjaTrader's header-less 'yyyyMMdd HHmmss;open;high;low;close;volume' "
                        "lines, read as UTC); end stamps are moved back one bar, so no bar is traded one bar late")
    p.add_argument("--market", metavar="SYMBOL", default=None,
                   help="the contract the feed's bars are traded and priced as (e.g. MNQ for an NQ-trained run on a "
                        "micro account); default: the run's market. A feed whose file name says another market than "
                        "the run trained on is refused unless --market says which")
    p.add_argument("--bar-minutes", type=int, default=None, metavar="N",
                   help="the bar size of a follow: feed in minutes (default: the run's training data's; a replay "
                        "reads it from its file)")
    p.add_argument("--live-from", metavar="TIME", default=None,
                   help="the live point: bars ending at or before it only warm the features (journaled as history, "
                        "never traded; a trading window that opened before it is not traded). A time in US/Eastern "
                        "('2024-01-16 09:00', or with its UTC offset) or 'now'. Default: a follow: feed, the moment "
                        "the run starts; a replay: its first bar (all traded, as evaluate); required for a replay "
                        "with --broker ninjatrader")
    p.add_argument("--max-bar-age", type=float, default=None, metavar="S",
                   help="a follow: feed: a bar whose end is more than S seconds older than this computer's clock "
                        "when it arrives is not traded (journaled 'late': it warms the features, no decision, no "
                        "order); default 90 s per bar minute. A bar ending more than 5 s after the clock is refused "
                        "('future': the clock is not in sync)")
    p.add_argument("--idle-exit", type=float, default=None, metavar="S",
                   help="a follow: feed ends after S seconds without a new line (default: it runs until Ctrl-C)")
    p.add_argument("--advisor", choices=("async", "off"), default="async",
                   help="a phase 3 run whose advisor is an LLM (not a distilled student): ask it asynchronously, "
                        "each decision using the latest answer (async, default), or decide RL-only (off)")
    p.add_argument("--llm-budget-ms", type=float, default=0.0, metavar="MS",
                   help="with --advisor async, how long a decision may wait for its own bar's answer before it uses "
                        "the advice in force (default 0: never waits)")
    add_no_calibrate(p)
    p.add_argument("--account-balance", type=float, metavar="USD",
                   help="start the account at the real account's balance instead of the preset's starting balance "
                        "(the threshold is where the rules put it for that balance; docs/LIVE.md)")
    p.add_argument("--account-state", metavar="FILE",
                   help="start the account from the real account's standing, a JSON file: balance (required), "
                        "threshold, peak, days_traded, best_day (docs/LIVE.md); give the same one on a restart")
    p.add_argument("--journal", required=True, metavar="FILE",
                   help="the SQLite journal (created, or continued: one run's, another run's is refused; one process "
                        "at a time, a second refused naming the first's PID)")
    p.add_argument("--on-exit", choices=("flatten", "protect"), default="flatten",
                   help="Ctrl-C with an open position: close it at the last close (flatten, default) or leave it "
                        "to its stop and target (protect); SIGTERM always flattens (exit code 143)")
    p.add_argument("--stall-after", type=float, default=None, metavar="S",
                   help="a follow: feed: flatten an open position when no bar came for S seconds (default: off; "
                        "the flat-by time, the feed's end, SIGTERM and errors flatten regardless; docs/LIVE.md "
                        "'Flat by the deadline')")
    p.add_argument("--flat-retries", type=int, default=5, metavar="N",
                   help="ninjatrader: CLOSEPOSITION sent again up to N times until NinjaTrader's position file "
                        "reads FLAT, then new entries halt (broker:flat_failed) with a message on stderr (default 5)")
    p.add_argument("--flat-retry-s", type=float, default=2.0, metavar="S",
                   help="ninjatrader: seconds between those CLOSEPOSITION retries (default 2)")
    p.add_argument("--no-status", action="store_true",
                   help="no live status on stderr (by default: one line redrawn in place on a terminal, a line per "
                        "change of position, trades, account status or day otherwise; docs/LIVE.md)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON summary as the last line (net P&L, trades, account status)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # the executor loads torch, SB3 and the environment: `hybrid-trader --help` must not pay it
    from hybrid_trader.live.executor import Executor, ExecutorOptions, run_bar_minutes, split_dates
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
    bridge = ninjatrader_bridge(args)
    spec = parse_feed_spec(args.feed)
    if args.idle_exit is not None and (spec.scheme != "follow" or not args.idle_exit > 0):
        raise UserError(f"--idle-exit {args.idle_exit}: a positive number of seconds, for a follow: feed",
                        fix="e.g. --feed follow:export.csv --idle-exit 600, or drop it")
    _check_flat_options(args, spec.scheme)
    live_from, max_bar_age = live_point(args, spec.scheme, bridge is not None)
    feed = open_feed(spec, **_feed_options(args, spec.scheme, run_dir))
    standing, roll_note = _live_account(args, run_dir, feed, bridge is not None)
    market, contract_note = _feed_market(args, run_dir, spec.path)
    if isinstance(feed, ReplayFeed):
        bar_minutes = feed.bars.bar_minutes
        if args.bar_minutes is not None and args.bar_minutes != bar_minutes:
            raise UserError(f"--bar-minutes {args.bar_minutes} but the replayed file holds {bar_minutes}-minute bars",
                            file=str(spec.path), fix="drop --bar-minutes for a replay")
    else:
        bar_minutes = args.bar_minutes or run_bar_minutes(run_dir)
        max_bar_age = max_bar_age or 90.0 * bar_minutes
    if not 0.0 <= args.llm_budget_ms <= 60_000.0:
        raise UserError(f"--llm-budget-ms {args.llm_budget_ms} must be between 0 and 60000",
                        fix="e.g. --llm-budget-ms 200, or 0 to never wait")
    if bar_minutes < 1:
        raise UserError(f"--bar-minutes {bar_minutes} must be at least 1", fix="e.g. --bar-minutes 5")
    say = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    options = ExecutorOptions(trade_dates=split_dates(run_dir, args.split), market=market, bar_minutes=bar_minutes,
                              llm=args.advisor, llm_budget_ms=args.llm_budget_ms, calibrate=args.calibrate,
                              mismatch_bars=args.nt_mismatch_bars, live_from=live_from, max_bar_age_s=max_bar_age)
    executor = Executor(run_dir, journal, options, bridge=bridge, standing=standing, say=say)
    if roll_note:
        executor.notes.append(roll_note)
    if contract_note:
        executor.notes.append(contract_note)
    if not isinstance(feed, ReplayFeed):
        _say_if_waiting(Path(spec.path).expanduser(), args.idle_exit)
    status = None if args.no_status else StatusPrinter(sys.stderr)
    summary, code = _trade(args, executor, feed, status, following=not isinstance(feed, ReplayFeed))
    for note in summary.notes:
        say(f"note: {note}")
    if not isinstance(feed, ReplayFeed) and not Path(spec.path).expanduser().exists():
        say(f"note: {spec.path} never appeared: no bar was read")
    halted = f", new entries halted ({summary.halted})" if summary.halted else ""
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        print(f"{summary.bars} bars ({summary.rejected} rejected, {summary.history_bars} history, {summary.late_bars} "
              f"late, {summary.recovered_bars} recovered from the journal), {summary.decisions} decisions, "
              f"{summary.trades} trades, net P&L {summary.net_pnl:,.2f}, account {summary.account_status}{halted}; "
              f"journal: {journal}")
    return code


def _trade(args: argparse.Namespace, executor: Any, feed: Any, status: Any, following: bool) -> tuple[Any, int]:
    """The feed traded under the flat guard: ``(summary, exit code)``; Ctrl-C (130) and SIGTERM (143) stop it."""
    code, guard = 0, None
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        guard = flat_guard(args, executor, following)
        summary = guard.run(feed, on_bar=None if status is None else status.update)
    except Terminated:
        executor.stop("flatten")
        summary = executor.summary
        code = 143
    except KeyboardInterrupt:
        executor.stop(args.on_exit)
        summary = executor.summary
        code = 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if guard is not None:
            guard.close()
        if status is not None:
            status.finish(executor)
        executor.close()
    return summary, code


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager's stop, ``kill``): stopped as Ctrl-C is, always flattening."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated


def _check_flat_options(args: argparse.Namespace, scheme: str) -> None:
    """``--stall-after`` (a follow: feed's), ``--flat-retries``, ``--flat-retry-s``: each bad value a UserError."""
    if args.stall_after is not None and (scheme != "follow" or not (math.isfinite(args.stall_after)
                                                                     and args.stall_after > 0)):
        raise UserError(f"--stall-after {args.stall_after}: a positive number of seconds, for a follow: feed (a "
                        "replay never waits for a bar)", fix="e.g. --feed follow:FILE --stall-after 180, or drop it")
    if args.flat_retries < 0 or not (math.isfinite(args.flat_retry_s) and args.flat_retry_s > 0):
        raise UserError(f"--flat-retries {args.flat_retries} / --flat-retry-s {args.flat_retry_s}: 0 or more "
                        "retries, a positive number of seconds apart", fix="e.g. --flat-retries 5 --flat-retry-s 2")


def flat_guard(args: argparse.Namespace, executor: Any, following: bool) -> Any:
    """The flat guard (``live.deadline``) of this run, its thread started: the flat-by time by the wall clock on a
    followed feed, ``--stall-after``, and with NinjaTrader ``--flat-retries``/``--flat-retry-s``."""
    from hybrid_trader.live.deadline import FlatGuard  # pandas and the calendar: only when a run starts

    if executor.link is not None:
        executor.link.flat_retries, executor.link.flat_retry_s = args.flat_retries, args.flat_retry_s
    guard = FlatGuard(executor, deadline=following, stall_after_s=args.stall_after)
    return guard.start() if following else guard


def _feed_options(args: argparse.Namespace, scheme: str, run_dir: Path) -> dict[str, Any]:
    """The feed's keywords: its clock (by default the training data's), stamps, idle exit, bar size."""
    # the executor loads torch and the config pandas: `hybrid-trader --help` must not pay it
    from hybrid_trader.live.executor import run_bar_minutes
    from hybrid_trader.run import RunDir
    from hybrid_trader.run.config import RunConfig

    data = RunDir(run_dir).load_config(RunConfig).data
    extra: dict[str, Any] = {"tz": args.tz or data.tz, "stamps": args.stamps,
                             "time_shift": data.time_shift if args.time_shift is None else args.time_shift}
    if args.idle_exit:
        extra["timeout_s"] = args.idle_exit
    if scheme == "follow":  # end-of-bar stamps move back by the bar size
        extra["bar_minutes"] = args.bar_minutes or run_bar_minutes(run_dir)
    return extra


def _feed_market(args: argparse.Namespace, run_dir: Path, path: Path) -> tuple[str | None, str | None]:
    """The contract the feed is traded as, by evaluate's rule (``run.market.priced_market``), and its note."""
    # run.market loads the environment, torch and pandas: `hybrid-trader --help` must not pay it
    from hybrid_trader.run import RunDir
    from hybrid_trader.run.config import RunConfig
    from hybrid_trader.run.market import priced_market

    config = RunDir(run_dir).load_config(RunConfig)
    return priced_market(run_dir, config, path, args.market, flag="--feed")


def _live_account(args: argparse.Namespace, run_dir: Path, feed: Any, ninjatrader: bool) -> tuple[Any, str | None]:
    """The real account's standing (``--account-balance``/``--account-state``) and the contract's roll warning
    (said on stderr now, and kept for the summary); UserError for a bad standing or an expired contract."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    # the live layer loads pandas and the run's config: `hybrid-trader --help` must not pay it
    from hybrid_trader.env.rules import get_rules
    from hybrid_trader.live.account_sync import read_standing
    from hybrid_trader.live.contract_roll import roll_check
    from hybrid_trader.live.feeds import ReplayFeed
    from hybrid_trader.run import RunDir
    from hybrid_trader.run.config import RunConfig

    env = RunDir(run_dir).load_config(RunConfig).env
    standing = read_standing(args.account_balance, args.account_state, get_rules(env.rules, env.account,
                                                                                  **env.rules_overrides))
    if not ninjatrader:
        return standing, None
    if args.nt_roll_warn_days < 0:
        raise UserError("--nt-roll-warn-days must be 0 or more", value=args.nt_roll_warn_days, fix="e.g. 12")
    # a replay trades its own days: the contract is checked at its last bar; a live feed at today's date (ET)
    today = (feed.bars.frame.index[-1].date() if isinstance(feed, ReplayFeed)
             else dt.datetime.now(ZoneInfo("America/New_York")).date())
    note = roll_check(args.nt_instrument, today, args.nt_roll_warn_days)
    if note:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    return standing, note


def _say_if_waiting(path: Path, idle_exit: float | None) -> None:
    """A follow: feed on a file that does not exist yet (its folder does: parse_feed_spec checks it): say once,
    on stderr, that it waits for it."""
    if path.exists():
        return
    until = f"for up to {idle_exit:g} s (--idle-exit)" if idle_exit else "until it does (Ctrl-C stops)"
    print(f"waiting for {path} to appear {until}: nothing is traded before its first bars", file=sys.stderr,
          flush=True)


def live_point(args: argparse.Namespace, scheme: str, ninjatrader: bool) -> tuple[pd.Timestamp | None, float | None]:
    """``(--live-from, --max-bar-age)`` for this feed: a follow: feed goes live now by default (its clock rules on;
    the age's default, None here, is set from the bar size); a replay at its first bar (None), but with NinjaTrader
    only where --live-from says (an order for every replayed bar is not a default); each bad value a UserError."""
    # pandas (through the calendar) loads only when a run starts: `hybrid-trader --help` must not pay it
    import pandas as pd

    from hybrid_trader.calendar import EASTERN  # loads pandas: only when a run starts

    if args.max_bar_age is not None and (scheme != "follow" or not (math.isfinite(args.max_bar_age)
                                                                     and args.max_bar_age > 0)):
        raise UserError(f"--max-bar-age {args.max_bar_age}: a positive number of seconds, for a follow: feed",
                        fix="e.g. --feed follow:export.csv --max-bar-age 90, or drop it (a replay's bars are not "
                            "judged by the clock)")
    text = args.live_from
    if text is None:
        if scheme == "replay" and ninjatrader:
            raise UserError("--broker ninjatrader with a replay: feed needs --live-from: the replayed bars before it "
                            "only warm the features, an order goes to NinjaTrader for each later one",
                            fix="add --live-from now (the file is history: nothing sent until the feed passes now), "
                                "or --live-from '2024-01-16 09:00' (US/Eastern) to trade from that bar on, e.g. "
                                "against NinjaTrader's Playback connection")
        now = pd.Timestamp.now(tz="UTC") if scheme == "follow" else None
        return now, args.max_bar_age
    if text.strip().lower() == "now":
        return pd.Timestamp.now(tz="UTC"), args.max_bar_age
    fix = "e.g. --live-from '2024-01-16 09:00' (US/Eastern), '2024-01-16T14:00:00+00:00', or now"
    try:
        stamp = pd.Timestamp(text.strip())
    except (ValueError, TypeError, OverflowError):
        raise UserError(f"--live-from {text!r} is not a time", value=text, fix=fix) from None
    if stamp is pd.NaT:
        raise UserError(f"--live-from {text!r} is not a time", value=text, fix=fix)
    if stamp.tzinfo is None:
        try:
            stamp = stamp.tz_localize(EASTERN, ambiguous="raise", nonexistent="raise")
        except ValueError as err:
            raise UserError(f"--live-from {text!r} does not name one US/Eastern time ({err})", value=text,
                            fix="give the UTC offset, e.g. '2024-11-03 01:30-04:00'") from None
    return stamp.tz_convert("UTC"), args.max_bar_age


def ninjatrader_bridge(args: argparse.Namespace) -> NinjaTraderBridge | None:
    """The ATI bridge ``--broker ninjatrader`` names (None for paper); each bad option is a UserError naming it."""
    nt_options = {"--nt-dir": args.nt_dir, "--nt-account": args.nt_account, "--nt-instrument": args.nt_instrument,
                  "--nt-connection": args.nt_connection}
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
    if not (math.isfinite(args.nt_ack_timeout) and args.nt_ack_timeout > 0):
        raise UserError("--nt-ack-timeout must be a positive number of seconds", value=args.nt_ack_timeout,
                        fix="e.g. --nt-ack-timeout 60")
    if args.nt_connection is not None and not re.fullmatch(r"[^\\/:*?\"<>|]+", args.nt_connection.strip()):
        raise UserError("--nt-connection: not a connection name (it names a file in outgoing/)",
                        value=args.nt_connection, fix="pass the name NinjaTrader's Connection Manager shows, "
                        "e.g. --nt-connection 'My Rithmic'")
    nt_dir = Path(args.nt_dir or NT_DIR_DEFAULT).expanduser()
    if not nt_dir.is_dir():
        raise UserError("--nt-dir: NinjaTrader's user folder not found", file=str(nt_dir),
                        fix="pass --nt-dir with the folder holding incoming/ and outgoing/ (Windows: Documents\\"
                            "NinjaTrader 8; under WSL: /mnt/c/Users/<you>/Documents/NinjaTrader 8)")
    # --broker ninjatrader only (the bridge checks incoming/, outgoing/ and writing when it is made)
    from hybrid_trader.live.ninjatrader import NinjaTraderBridge

    try:
        return NinjaTraderBridge(nt_dir, args.nt_account.strip(), args.nt_instrument.strip(),
                                 ack_timeout_s=args.nt_ack_timeout,
                                 connection=args.nt_connection.strip() if args.nt_connection else None)
    except UserError as err:
        raise UserError(f"--nt-dir: {err.message}", file=err.file, value=err.value, fix=err.fix) from None
