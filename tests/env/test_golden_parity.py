"""Golden parity: the environment reproduces, bit for bit, the episodes recorded before its split.

The digests in ``golden/`` were written by ``tests/env/golden_episodes.py`` with the
single-file environment (before broker / account / observation were separate modules).
"""

from __future__ import annotations

import json

import pytest

from .golden_episodes import CASES, GOLDEN_DIR, NQ_SAMPLE, run_case

_MARKETS: dict = {}


def _market(name: str):
    if name not in _MARKETS:
        from hybrid_trader.data import generate_bars, load_bars
        from hybrid_trader.features import compute_features

        if name == "synthetic":
            bars = generate_bars(days=12, seed=3, market="NQ")
        else:
            if not NQ_SAMPLE.exists():
                pytest.skip(f"{NQ_SAMPLE} is absent (shared data folder)")
            bars = load_bars(NQ_SAMPLE, tz="America/New_York")
        _MARKETS[name] = (bars, compute_features(bars))
    return _MARKETS[name]


@pytest.mark.parametrize("market", ["synthetic", "nq_sample"])
@pytest.mark.parametrize("case", list(CASES))
def test_episodes_match_golden_digest_when_replayed_with_same_seed(market: str, case: str) -> None:
    golden = json.loads((GOLDEN_DIR / f"{market}.json").read_text())[case]
    bars, features = _market(market)
    got = json.loads(json.dumps(run_case(bars, features, *CASES[case])))
    assert got["steps"] == golden["steps"]
    assert len(got["episodes"]) == len(golden["episodes"])
    for i, (g, w) in enumerate(zip(got["episodes"], golden["episodes"])):
        assert g == w, f"episode {i} differs"
    assert got == golden
