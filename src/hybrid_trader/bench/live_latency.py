"""``bench live-latency``: bar appended to the followed file -> order file visible in NinjaTrader's incoming/.

The pipeline of ``run --feed follow:FILE --broker ninjatrader`` at its default polling, in one
process: a writer thread appends the bars of ``--bars`` to a followed CSV one every
``interval_s`` (first ``warmup`` bars at once: history, which warms the features and is
never traded), the follow feed reads them, the executor decides, journals and writes the
OIF through the NinjaTrader bridge, and the simulated NinjaTrader (``live.nt_sim``) reads
and fills it at the bars' prices. The executor's wall clock is the appended bar's end (the
bars keep their own dates, so sessions and the flat-by time are theirs); every latency is
measured with the real clock (``time.perf_counter``).

Reported (ms, p50/p90/p99/max): ``bar_to_oif`` for each OIF (the bar's append -> the
file renamed into incoming/, i.e. visible), the target; ``bar_to_decision`` for every live
bar (append -> the executor done with the bar: decision journaled, orders written), split
into ``feed_wait`` (append -> the feed yields the bar: the follow feed's polling) and
``decision`` (the executor's own time); ``oif_write`` (writing one OIF: fsync and rename).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.bench.args import LiveLatencyArgs
from hybrid_trader.errors import UserError
from hybrid_trader.live.executor import Executor, ExecutorOptions, run_bar_minutes
from hybrid_trader.live.feeds import FOLLOW_POLL_S, Bar, FollowFeed, ReplayFeed
from hybrid_trader.live.ninjatrader import NinjaTraderBridge
from hybrid_trader.live.nt_sim import NinjaTraderSim
from hybrid_trader.live.nt_sim_market import SimMarket
from hybrid_trader.live.nt_sim_settings import SimSettings

TARGET_P99_MS = 250.0
"""The target: an order file visible within 250 ms of its bar's line (99th percentile)."""


def _line(bar: Bar) -> str:
    assert bar.time is not None
    stamp = bar.time.tz_convert("America/New_York").strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp},{bar.open!r},{bar.high!r},{bar.low!r},{bar.close!r},{bar.volume!r}\n"


def percentiles(values: list[float]) -> dict[str, float | int]:
    """``{n, p50, p90, p99, max}`` in ms of ``values`` in seconds (empty: n 0)."""
    if not values:
        return {"n": 0}
    ms = np.asarray(values) * 1000.0
    return {"n": len(values), **{f"p{q}": round(float(np.percentile(ms, q)), 1) for q in (50, 90, 99)},
            "max": round(float(ms.max()), 1)}


def _session_open(bars: list[Bar], day: int) -> int:
    """The index of the first 09:30 ET bar with at least ``day`` bars before it (0 if none)."""
    for i in range(day, len(bars)):
        t = bars[i].time
        if t is not None and (t.hour, t.minute) == (9, 30):
            return i
    return 0


class _Timed:
    """The follow feed, noting when each bar comes out and when the executor is done with it."""

    def __init__(self, feed: FollowFeed, live_ns: int, n_live: int) -> None:
        self.feed, self.live_ns, self.n_live = feed, live_ns, n_live
        self.yielded: dict[int, float] = {}
        self.done: dict[int, float] = {}
        self.current: int | None = None

    def __iter__(self) -> Iterator[Bar]:
        live = 0
        for bar in self.feed:
            tns = bar.time_ns
            self.current = tns
            if tns is not None:
                self.yielded[tns] = time.perf_counter()
            yield bar
            if tns is not None:
                self.done[tns] = time.perf_counter()
                live += tns >= self.live_ns
            if live >= self.n_live:
                self.feed.stop.set()
                return


def run(args: LiveLatencyArgs) -> int:
    assert args.run_dir and args.bars  # LiveLatencyArgs checks both
    run_dir = Path(args.run_dir).expanduser()
    bars = list(ReplayFeed(Path(args.bars).expanduser()))
    bar_minutes = run_bar_minutes(run_dir)
    warmup = args.warmup if args.warmup is not None else _session_open(bars, 1380 // bar_minutes)
    need = warmup + args.n_bars
    if len(bars) < need:
        raise UserError(f"--bars holds {len(bars)} bars, fewer than {warmup} bars of warm-up + --n-bars "
                        f"{args.n_bars}", file=args.bars, fix="pass a longer file, fewer bars or --warmup")
    bars = bars[:need]
    history, live = bars[:warmup], bars[warmup:]
    folder = Path(args.out).expanduser() if args.out else Path(tempfile.mkdtemp(prefix="live-latency-"))
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / "follow.csv"
    csv.write_text("timestamp,open,high,low,close,volume\n" + "".join(_line(b) for b in history))
    bar_s = 60.0 * bar_minutes
    now = [int(history[-1].time_ns or 0) / 1e9 + bar_s + 1.0]  # the executor's wall clock: the last appended bar's end

    market = SimMarket(history[-1].close)
    sim = NinjaTraderSim(folder / "NinjaTrader 8", [args.account], args.instrument, market,
                         SimSettings(poll_s=args.nt_poll_s, latency_s=0.0)).start()
    bridge = NinjaTraderBridge(sim.folder, args.account, args.instrument)
    sends: list[tuple[int | None, float, float]] = []
    send = bridge._send

    feed = FollowFeed(csv, FOLLOW_POLL_S if args.follow_poll_s is None else args.follow_poll_s,
                      tz="America/New_York", bar_minutes=bar_minutes)
    timed = _Timed(feed, int(live[0].time_ns or 0), len(live))

    def timed_send(tag: str, lines: list[str]) -> Path:
        start = time.perf_counter()
        path = send(tag, lines)
        sends.append((timed.current, start, time.perf_counter()))
        return path
    bridge._send = timed_send  # type: ignore[method-assign]
    options = ExecutorOptions(market=args.market, bar_minutes=bar_minutes, live_from=live[0].time,
                              max_bar_age_s=90.0 * bar_minutes)
    ex = Executor(run_dir, folder / "journal.sqlite", options, bridge=bridge, clock=lambda: now[0])
    appended: dict[int, float] = {}
    stop = threading.Event()

    def writer() -> None:
        """Once the executor is done with the history, append a live bar every ``interval_s``."""
        while history[-1].time_ns not in timed.done and not stop.wait(0.01):
            pass
        with csv.open("a") as fh:
            for bar in live:
                if stop.wait(args.interval_s):
                    return
                tns = int(bar.time_ns or 0)
                now[0] = tns / 1e9 + bar_s + 0.5
                market.push(bar.open, bar.high, bar.low, bar.close)
                appended[tns] = time.perf_counter()
                fh.write(_line(bar))
                fh.flush()
    thread = threading.Thread(target=writer, name="bar-writer", daemon=True)
    thread.start()
    wall = time.perf_counter()
    try:
        ex.run_feed(timed)
    finally:
        stop.set()
        feed.stop.set()
        thread.join()
        ex.close()
        sim.stop()
    wall = time.perf_counter() - wall
    live_ns = [int(b.time_ns or 0) for b in live if b.time_ns in appended and b.time_ns in timed.done]
    to_oif = [end - appended[tns] for tns, _, end in sends if tns in appended]
    result: dict[str, Any] = {
        "bar_to_oif_ms": percentiles(to_oif),
        "target_p99_ms": TARGET_P99_MS,
        "meets_target": bool(to_oif) and percentiles(to_oif)["p99"] <= TARGET_P99_MS,
        "bar_to_decision_ms": percentiles([timed.done[t] - appended[t] for t in live_ns]),
        "feed_wait_ms": percentiles([timed.yielded[t] - appended[t] for t in live_ns]),
        "decision_ms": percentiles([timed.done[t] - timed.yielded[t] for t in live_ns]),
        "oif_write_ms": percentiles([end - start for tns, start, end in sends if tns in appended]),
        "live_bars": len(live_ns), "history_bars": len(history), "oifs": len(to_oif),
        "oif_lines_read_by_nt": len(sim.received), "follow_poll_s": feed.poll_s, "nt_poll_s": args.nt_poll_s,
        "interval_s": args.interval_s, "wall_s": round(wall, 1), "folder": str(folder),
    }
    p = result["bar_to_oif_ms"]
    print(f"bar -> OIF visible: p50 {p.get('p50')} ms, p90 {p.get('p90')} ms, p99 {p.get('p99')} ms over {p['n']} "
          f"order files ({len(live_ns)} live bars; target p99 <= {TARGET_P99_MS:g} ms: "
          f"{'met' if result['meets_target'] else 'NOT met'}); decision alone p99 "
          f"{result['decision_ms'].get('p99')} ms, follow polling every {feed.poll_s:g} s")
    print(json.dumps(result))
    return 0
