"""Child process of the kill -9 test: ``hybrid-trader run`` whose replay waits, bar by bar, for the test.

Before each bar it writes the bar's index to the fd ``NT_SYNC_W`` and reads ``ok`` from ``NT_SYNC_R``:
the test's fake NinjaTrader (which outlives this process, as NinjaTrader outlives a killed
executor) processes that bar first, as NinjaTrader would have while the bar formed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from hybrid_trader.cli.main import main
from hybrid_trader.live import feeds


class LockstepFeed(feeds.ReplayFeed):
    def __iter__(self) -> Iterator[feeds.Bar]:
        w = os.fdopen(int(os.environ["NT_SYNC_W"]), "w", buffering=1)
        r = os.fdopen(int(os.environ["NT_SYNC_R"]))
        for i, bar in enumerate(super().__iter__()):
            w.write(f"{i}\n")
            if r.readline().strip() != "ok":
                raise SystemExit("the test stopped answering")
            yield bar


def open_feed(spec: Any, **kw: Any) -> LockstepFeed:
    fs = feeds.parse_feed_spec(spec) if isinstance(spec, str) else spec
    return LockstepFeed(fs.path, fs.speed, **kw)


if __name__ == "__main__":
    feeds.open_feed = open_feed  # type: ignore[assignment]  # the CLI imports it when it runs
    sys.exit(main(sys.argv[1:]))
