"""How the simulated NinjaTrader 8 (:class:`~hybrid_trader.live.nt_sim.NinjaTraderSim`) behaves: its
connection, timing, fills and state-file names (``hybrid-trader nt-sim``'s options)."""

from __future__ import annotations

from dataclasses import dataclass

from hybrid_trader.errors import UserError

STATE_FILE_STYLES = ("documented", "account_prefixed")


@dataclass(frozen=True)
class SimSettings:
    """The simulator's behaviour; checked when made (a UserError naming the bad values and the fix)."""

    exchange: str = "Globex"
    """The exchange in the position files' names (``<instrument> <exchange>_<account>_Position.txt``)."""
    connection: str | None = "Simulated"
    """The connection whose state file (``<connection>.txt``) it writes; None: no connection file."""
    poll_s: float = 0.05
    """Seconds between two looks at ``incoming/``."""
    latency_s: float = 0.0
    """Seconds between two states of an order (0: all at once)."""
    tick_size: float = 0.25
    """The instrument's tick, in index points."""
    slippage_ticks: int = 0
    """At most this many ticks against a MARKET or stop fill (seeded)."""
    seed: int = 0
    """The slippage's random seed: a run repeats."""
    state_file_style: str = "documented"
    """``documented`` (``<id>.txt``) or ``account_prefixed`` (``<account>_<id>.txt``, as field tests saw)."""

    def __post_init__(self) -> None:
        if not (self.poll_s > 0 and self.latency_s >= 0 and self.tick_size > 0 and self.slippage_ticks >= 0):
            raise UserError("the simulator needs poll_s > 0, latency_s >= 0, tick_size > 0, slippage_ticks >= 0",
                            value={"poll_s": self.poll_s, "latency_s": self.latency_s, "tick_size": self.tick_size,
                                   "slippage_ticks": self.slippage_ticks}, fix="e.g. --poll-s 0.05 --latency-s 0.01")
        if self.state_file_style not in STATE_FILE_STYLES:
            raise UserError("unknown state file style", value=self.state_file_style,
                            fix="documented (<id>.txt) or account_prefixed (<account>_<id>.txt)")
