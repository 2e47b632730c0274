"""``hybrid-trader nt-sim``: a simulated NinjaTrader 8 on a folder, to try ``run --broker ninjatrader`` without Windows.

It runs until Ctrl-C (or ``--duration``), printing each instruction line it reads and each
refusal NinjaTrader would write to its Log tab. The simulator: ``hybrid_trader.live.nt_sim``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hybrid_trader.errors import UserError

if TYPE_CHECKING:
    from hybrid_trader.live.nt_sim import NinjaTraderSim


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nt-sim", help="simulate NinjaTrader 8's ATI files in a folder (try --broker ninjatrader without Windows)",
        description="A simulated NinjaTrader 8: reads and deletes the order instruction files (oif*.txt) in "
        "FOLDER/incoming every --poll-s seconds, writes order states (SUBMITTED, ACCEPTED, WORKING, PARTFILLED, "
        "FILLED, CANCELPENDING, CANCELLED, REJECTED) --latency-s apart, the position file and the connection "
        "file in FOLDER/outgoing, and fills at its own prices: a fixed --price or the bars appended to --prices "
        "FILE (e.g. the file 'run --feed follow:' reads). Point 'run --broker ninjatrader --nt-dir FOLDER "
        "--nt-connection Simulated' at the same folder.")
    p.add_argument("folder", metavar="FOLDER", help="the simulated user folder (incoming/ and outgoing/ are created)")
    p.add_argument("--account", action="append", metavar="NAME",
                   help="an account it holds (repeat for more; default Sim101); an order for another is rejected")
    p.add_argument("--instrument", required=True, metavar="NAME", help="the instrument it trades, e.g. 'NQ 12-26'")
    prices = p.add_mutually_exclusive_group(required=True)
    prices.add_argument("--prices", metavar="FILE", help="a bars file it follows: each new bar moves its market")
    prices.add_argument("--price", type=float, metavar="X", help="one fixed price")
    p.add_argument("--poll-s", type=float, default=0.05, metavar="S", help="how often incoming/ is read (0.05)")
    p.add_argument("--latency-s", type=float, default=0.05, metavar="S",
                   help="time between two states of an order (0.05; 0: at once)")
    p.add_argument("--slippage-ticks", type=int, default=1, metavar="N",
                   help="market and stop fills are up to N ticks worse than the price (1)")
    p.add_argument("--tick-size", type=float, default=0.25, metavar="X", help="the instrument's tick (0.25)")
    p.add_argument("--seed", type=int, default=0, help="seed of the slippage (0)")
    p.add_argument("--connection", default="Simulated", metavar="NAME",
                   help="the connection's name: outgoing/NAME.txt reads CONNECTED (Simulated)")
    p.add_argument("--exchange", default="Globex", help="the exchange in the position file's name (Globex)")
    p.add_argument("--state-files", choices=("documented", "account_prefixed"), default="documented",
                   help="order state files named <id>.txt (the help guide) or <account>_<id>.txt (field tests)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # imported only when it runs: `hybrid-trader --help` does not load the live package
    from hybrid_trader.live.nt_sim import NinjaTraderSim
    from hybrid_trader.live.nt_sim_market import FileMarket, SimMarket
    from hybrid_trader.live.nt_sim_settings import SimSettings

    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        raise UserError(f"--duration {args.duration}: a positive number of seconds", fix="e.g. --duration 3600")
    if args.price is not None and not (math.isfinite(args.price) and args.price > 0):
        raise UserError(f"--price {args.price}: a positive price", fix="e.g. --price 21000.25")
    if args.prices is not None and not Path(args.prices).expanduser().parent.is_dir():
        raise UserError("the folder of --prices does not exist", file=args.prices, fix="pass the bars file's path")
    market = SimMarket(args.price) if args.price is not None else FileMarket(Path(args.prices).expanduser())
    settings = SimSettings(exchange=args.exchange, connection=args.connection or None, poll_s=args.poll_s,
                           latency_s=args.latency_s, tick_size=args.tick_size, slippage_ticks=args.slippage_ticks,
                           seed=args.seed, state_file_style=args.state_files)
    sim = NinjaTraderSim(Path(args.folder).expanduser(), args.account or ["Sim101"], args.instrument.strip(),
                         market, settings)
    print(f"simulated NinjaTrader 8 on {sim.folder} (accounts {', '.join(sim.accounts)}, {sim.instrument}); "
          "Ctrl-C stops it", flush=True)
    shown = [0, 0]
    end = None if args.duration is None else time.monotonic() + args.duration
    sim.start()
    try:
        while end is None or time.monotonic() < end:
            time.sleep(min(0.2, args.poll_s * 4))
            shown = _show(sim, shown)
            if sim.error is not None:
                raise UserError(f"the simulator stopped: {sim.error}", file=str(sim.folder),
                                fix="check that the folder is still there and writable")
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
        _show(sim, shown)
    print(f"stopped: {len(sim.received)} instruction lines read, position {sim.position()}", flush=True)
    return 0


def _show(sim: NinjaTraderSim, shown: list[int]) -> list[int]:
    """Print the lines read and the Log lines written since ``shown`` (their counts); the new counts."""
    received, log = list(sim.received), list(sim.log)
    for line in received[shown[0]:]:
        print(f"read: {line}", flush=True)
    for line in log[shown[1]:]:
        print(f"log: {line}", flush=True)
    return [len(received), len(log)]
