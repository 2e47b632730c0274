"""Fixed-seed random-legal-action episodes and their compact digest (the golden parity record).

``python -m tests.env.golden_episodes`` (from the repository root, ``PYTHONPATH=src``)
rewrites ``tests/env/golden/*.json``; do that only when behaviour changes on purpose.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.data import generate_bars, load_bars
from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.risk_veto import RiskConfig, RiskVeto
from hybrid_trader.features import compute_features
from tests.conftest import SHARED_DATA

GOLDEN_DIR = Path(__file__).parent / "golden"
NQ_SAMPLE = SHARED_DATA / "NQ_1min_2023-11_eastern.csv"  # $HYBRID_TRADER_SHARED_DATA or ../shared/data

# name -> (EnvConfig kwargs, risk veto kwargs or None, steps (None: one pass over the split))
CASES: dict[str, tuple[dict, dict | None, int | None]] = {
    "phase1_legacy_eval": (dict(phase=1, market="MNQ", contracts=5, episode_sessions=None,
                                terminate_on_breach=False), None, None),
    "phase2_eod_dll_eval": (dict(phase=2, rules="apex-2026-eod", account="25K", market="MNQ", contracts=10,
                                 rules_overrides={"daily_loss_limit": 250.0}, episode_sessions=None,
                                 terminate_on_breach=False), None, None),
    "phase2_intraday_train": (dict(phase=2, rules="apex-2026-intraday", account="50K",
                                   rules_overrides={"trailing_drawdown": 1500.0}, episode_sessions=2,
                                   target_atr=0.0), None, 4000),
    "phase3_veto_train": (dict(phase=3, episode_sessions=3, rules_overrides={"trailing_drawdown": 1200.0},
                               contracts=2), dict(), 4000),
    "phase3_veto_eval": (dict(phase=3, market="MNQ", episode_sessions=None, terminate_on_breach=False),
                         dict(max_consecutive_losses=2, min_win_rate=0.5, win_rate_window=4), None),
}


def _h(x: Any) -> str:
    return x.hexdigest()[:16]


def _trade_row(tr: Any) -> list:
    get = tr.get if isinstance(tr, dict) else (lambda k: getattr(tr, k))
    return [int(get("entry_index")), int(get("exit_index")), int(get("side")), float(get("entry_price")),
            float(get("exit_price")), float(get("net_pnl")), float(get("gross_pnl")), str(get("exit_reason"))]


def _num(v: float) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def run_case(bars: Any, features: Any, env_kwargs: dict, veto: dict | None, steps: int | None, seed: int = 7) -> dict:
    """Run random legal actions and return the digest (trades, ends, accounts, stream hashes)."""
    env = TradingEnv(
        bars, features, EnvConfig(**env_kwargs), risk_veto=None if veto is None else RiskVeto(RiskConfig(**veto))
    )
    rng = np.random.default_rng(seed)
    obs_h, rew_h, mask_h, acct_h = hashlib.sha256(), hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
    obs, info = env.reset(seed=seed)
    obs_h.update(obs.tobytes())
    episodes: list[dict] = []
    n = 0
    while True:
        mask = env.action_masks()
        mask_h.update(mask.tobytes())
        legal = np.flatnonzero(mask)
        obs, reward, term, trunc, info = env.step(int(legal[rng.integers(len(legal))]))
        n += 1
        obs_h.update(obs.tobytes())
        rew_h.update(np.float64(reward).tobytes())
        if "advisor_account" in info:
            acct_h.update(repr(info["advisor_account"]).encode())
        if term or trunc:
            acc = info["account"]
            episodes.append({
                "end_reason": info["end_reason"],
                "trades": [_trade_row(tr) for tr in info["trades"]],
                "balance": acc["balance"], "threshold": acc["threshold"], "peak": acc["peak"],
                "breach_index": acc["breach_index"], "target_index": acc["target_index"],
                "breached": acc["breach_index"] >= 0,
                "sessions": acc["sessions"], "episode_bars": info["episode_bars"],
                "invalid_actions": info["invalid_actions"], "veto_counts": info["veto_counts"],
                "veto_steps": info["veto_steps"], "decision_steps": info["decision_steps"],
            })
            if steps is None or n >= steps:
                break
            obs, info = env.reset()
            obs_h.update(obs.tobytes())
    return {"steps": n, "episodes": episodes, "obs_sha256": _h(obs_h), "reward_sha256": _h(rew_h),
            "mask_sha256": _h(mask_h), "advisor_account_sha256": _h(acct_h)}


def markets() -> dict[str, tuple[Any, Any]]:
    out = {}
    bars = generate_bars(days=12, seed=3, market="NQ")
    out["synthetic"] = (bars, compute_features(bars))
    if NQ_SAMPLE.exists():
        nq = load_bars(NQ_SAMPLE, tz="America/New_York")
        out["nq_sample"] = (nq, compute_features(nq))
    return out


def digest_all(market: str, bars: Any, features: Any) -> dict:
    return {name: run_case(bars, features, *case) for name, case in CASES.items()}


if __name__ == "__main__":  # pragma: no cover - regenerates the golden files
    GOLDEN_DIR.mkdir(exist_ok=True)
    for market, (bars, features) in markets().items():
        path = GOLDEN_DIR / f"{market}.json"
        data = digest_all(market, bars, features)
        path.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in data.items()) + "\n}\n")
        print(f"wrote {path}", file=sys.stderr)
