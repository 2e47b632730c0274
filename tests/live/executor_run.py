"""A tiny trained run and its bars as a CSV, for the executor's tests (built once per session)."""

from __future__ import annotations

from pathlib import Path

from hybrid_trader.run.market import load_market
from tests.training.conftest import student_cfg, train_phase2


def tiny_run(root: Path, market=None) -> tuple[Path, Path, object]:
    """``(phase 2 run dir, its bars as an ET CSV, its market)`` (``market``: the tiny config's, loaded when None).
    The session's one is the ``tiny_trained`` fixture (tests/conftest.py)."""
    cfg = student_cfg(1)
    if market is None:
        market = load_market(cfg.data, cfg.split)
    run = train_phase2(root, student_cfg, market)
    csv = root / "bars.csv"
    frame = market.bars.frame
    frame.tz_convert("America/New_York").tz_localize(None).to_csv(csv, index_label="timestamp")
    return run, csv, market
