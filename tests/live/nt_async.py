"""The executor against the simulated NinjaTrader (``live.nt_sim``) running on its own thread.

The replay's bars are the simulator's market: before a bar reaches the executor the
simulator has read what the executor wrote at the previous bar (NinjaTrader reads a file
"the instant it is written"), then the bar's prices are pushed and taken, as the market
moves while the bar forms. Everything else (reading and deleting the OIFs, the states one
latency step apart, fills at its own price with slippage) happens on the simulator's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import Bar
from hybrid_trader.live.ninjatrader import NinjaTraderBridge
from hybrid_trader.live.nt_sim import NinjaTraderSim
from hybrid_trader.live.nt_sim_market import SimMarket
from hybrid_trader.live.nt_sim_settings import SimSettings

ACCOUNT, INSTRUMENT = "Sim101", "NQ 12-26"
CLOSE_LINE = f"CLOSEPOSITION;{ACCOUNT};{INSTRUMENT};;;;;;;;;;"


def start_sim(folder: Path, **kw) -> NinjaTraderSim:
    """A running simulator: 0.5 ms between states, up to one tick of slippage (seeded); it polls every 50 ms and
    whenever :meth:`~NinjaTraderSim.settle` asks (a thread waking every few ms slows the executor's thread on a
    loaded machine)."""
    opts = {"poll_s": 0.05, "latency_s": 0.0005, "slippage_ticks": 1, "seed": 0, **kw}
    return NinjaTraderSim(folder, [ACCOUNT], INSTRUMENT, SimMarket(), SimSettings(**opts)).start()


def sim_executor(run: Path, journal: Path, sim: NinjaTraderSim, bridge_kw: dict | None = None, **kw) -> Executor:
    bridge = NinjaTraderBridge(sim.folder, ACCOUNT, INSTRUMENT, sleep=lambda s: None, **(bridge_kw or {}))
    return Executor(run, journal, ExecutorOptions(trade_dates=split_dates(run, "test"), market="NQ", bar_minutes=1,
                                                  **kw), bridge=bridge)


def move_market(sim: NinjaTraderSim, bar: Bar) -> None:
    """The simulator reads what was written, then the bar's prices move its market."""
    sim.settle()
    sim.market.push(bar.open, bar.high, bar.low, bar.close)
    sim.settle()


class SimFeed:
    """``bars`` with the simulator's market moving with them (``after(bar)`` once it has, before the executor)."""

    def __init__(self, bars: Iterable[Bar], sim: NinjaTraderSim, after: Callable[[Bar], None] | None = None,
                 interrupt: Callable[[], bool] | None = None) -> None:
        self.bars, self.sim, self.after, self.interrupt = bars, sim, after, interrupt

    def __iter__(self) -> Iterator[Bar]:
        for bar in self.bars:
            move_market(self.sim, bar)
            if self.after is not None:
                self.after(bar)
            yield bar
            if self.interrupt is not None and self.interrupt():
                raise KeyboardInterrupt


def placed(sim: NinjaTraderSim, order_type: str | None = None) -> list[str]:
    """The order ids of the PLACE lines the simulator read, in order."""
    rows = [line.split(";") for line in sim.received if line.startswith("PLACE")]
    return [r[10] for r in rows if order_type is None or r[5] == order_type]
