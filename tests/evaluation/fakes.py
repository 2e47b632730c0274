"""Hand-built results and run directories shared by the evaluation tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.evaluation.results import StrategyResult, empty_trades, save_results

ET = "America/New_York"


def t(text: str) -> pd.Timestamp:
    return pd.Timestamp(text, tz=ET)


# ---- the golden example ------------------------------------------------------------------
# 4 Globex trading days, 14 bars, 4 trades, initial balance 50,000 $.
# The bar at 2024-01-03 18:00 ET belongs to trading day 2024-01-04 (ET + 6 h).
GOLDEN_BARS = [
    # time,               equity,  position
    ("2024-01-02 09:30", 50_000.0, 0),   # day 1 (2024-01-02)
    ("2024-01-02 09:31", 50_100.0, 1),
    ("2024-01-02 09:32", 50_300.0, 1),
    ("2024-01-02 09:33", 50_500.0, 0),   # day 1 closes at 50,500: +500
    ("2024-01-03 09:30", 50_500.0, 0),   # day 2 (2024-01-03)
    ("2024-01-03 09:31", 50_400.0, -1),
    ("2024-01-03 09:32", 50_150.0, -1),  # drawdown 50,500 - 50,150 = 350
    ("2024-01-03 09:33", 50_250.0, 0),   # day 2 closes at 50,250: -250
    ("2024-01-03 18:00", 50_250.0, 0),   # day 3 (2024-01-04): evening bar rolls forward
    ("2024-01-04 09:30", 50_750.0, 1),
    ("2024-01-04 09:31", 51_250.0, 0),   # day 3 closes at 51,250: +1,000
    ("2024-01-05 09:30", 51_250.0, 0),   # day 4 (2024-01-05)
    ("2024-01-05 09:31", 50_800.0, -1),  # drawdown 51,250 - 50,800 = 450 (the max)
    ("2024-01-05 09:32", 51_000.0, 0),   # day 4 closes at 51,000: -250
]
GOLDEN_TRADES = [
    # entry, exit, side, contracts, entry px, exit px, gross, costs, net, bars, reason   (NQ: 20 $/point)
    ("2024-01-02 09:31", "2024-01-02 09:33", 1, 1, 17000.00, 17025.25, 505.0, 5.0, 500.0, 2, "target"),
    ("2024-01-03 09:31", "2024-01-03 09:33", -1, 1, 17100.00, 17112.25, -245.0, 5.0, -250.0, 2, "stop"),
    ("2024-01-04 09:30", "2024-01-04 09:31", 1, 1, 17200.00, 17250.25, 1005.0, 5.0, 1000.0, 1, "target"),
    ("2024-01-05 09:31", "2024-01-05 09:32", -1, 1, 17300.00, 17312.25, -245.0, 5.0, -250.0, 1, "stop"),
]


def trades_frame(rows: Iterable[tuple]) -> pd.DataFrame:
    rows = list(rows)
    if not rows:
        return empty_trades()
    df = pd.DataFrame(rows, columns=["entry_time", "exit_time", "side", "contracts", "entry_price", "exit_price",
                                     "gross_pnl", "costs", "net_pnl", "bars_held", "exit_reason"])
    for c in ("entry_time", "exit_time"):
        times = pd.to_datetime(df[c])
        df[c] = times.dt.tz_localize(ET) if times.dt.tz is None else times.dt.tz_convert(ET)
    return df


def golden_result(**kw: Any) -> StrategyResult:
    idx = pd.DatetimeIndex([t(b[0]) for b in GOLDEN_BARS])
    return StrategyResult(
        name=kw.pop("name", "agent"),
        trades=trades_frame(GOLDEN_TRADES),
        equity=pd.Series([b[1] for b in GOLDEN_BARS], index=idx),
        position=pd.Series([b[2] for b in GOLDEN_BARS], index=idx),
        initial_balance=50_000.0,
        **kw,
    )


# ---- a fake evaluation: agent, flat, momentum, random over seeds -------------------------
def synthetic_prices(n_days: int = 5, bars_per_day: int = 120, seed: int = 0) -> pd.Series:
    rng = np.random.default_rng(seed)
    stamps = []
    for d in pd.bdate_range("2024-03-04", periods=n_days):
        start = pd.Timestamp(d.date()).tz_localize(ET) + pd.Timedelta(hours=9, minutes=30)
        stamps.extend(start + pd.Timedelta(minutes=m) for m in range(bars_per_day))
    idx = pd.DatetimeIndex(stamps)
    price = 17_000 + np.cumsum(rng.normal(0, 2.0, len(idx)))
    return pd.Series(np.round(price * 4) / 4, index=idx, name="price")


def simulate(name: str, prices: pd.Series, signal: np.ndarray, *, point_value: float = 20.0,
             cost: float = 4.2, balance: float = 50_000.0, extra: dict | None = None,
             breach_time=None, target_hit_time=None) -> StrategyResult:
    """A tiny bar-close simulator: hold ``signal[i]`` contracts from bar i's close to bar i+1's close."""
    px = prices.to_numpy()
    pos = np.asarray(signal, dtype=int)
    pos[-1] = 0
    eq = np.empty(len(px))
    cash = balance
    trades = []
    entry = None
    for i in range(len(px)):
        prev = pos[i - 1] if i else 0
        if i:
            cash += prev * (px[i] - px[i - 1]) * point_value
        if pos[i] != prev:
            if prev != 0:
                e_i = entry
                gross = prev * (px[i] - px[e_i]) * point_value
                trades.append((prices.index[e_i], prices.index[i], int(np.sign(prev)), abs(int(prev)), px[e_i], px[i],
                               gross, 2 * cost, gross - 2 * cost, i - e_i, "agent"))
                cash -= cost
            if pos[i] != 0:
                entry = i
                cash -= cost
        eq[i] = cash
    df = trades_frame([]) if not trades else pd.DataFrame(trades, columns=list(empty_trades().columns))
    return StrategyResult(name, df, pd.Series(eq, index=prices.index), pd.Series(pos, index=prices.index), balance,
                          breach_time, target_hit_time, dict(extra or {}))


def fake_results(prices: pd.Series, *, n_random: int = 3, with_llm: bool = True) -> list[StrategyResult]:
    px = prices.to_numpy()
    n = len(px)
    mom = np.zeros(n, dtype=int)
    mom[20:] = np.sign(px[20:] - px[:-20]).astype(int)
    agent_sig = np.zeros(n, dtype=int)
    agent_sig[5:] = -np.sign(px[5:] - px[:-5]).astype(int)
    agent_sig[::7] = 0
    extra: dict[str, Any] = {"role": "agent"}
    if with_llm:
        extra["llm"] = {"LLM query rate [%]": 21.5, "LLM confidence (avg)": 0.41, "Agreement [%]": 63.0,
                        "Override [%]": 4.2, "Risk veto [%]": 1.1, "Abstain rate [%]": 3.0}
        extra["sample_decisions"] = [
            {"time": str(prices.index[10]), "rl": "BUY", "llm": "HOLD", "fused": "BUY", "confidence": 0.62,
             "reason": "trend up <strong>&amp; volume</strong>"},
            {"time": str(prices.index[min(40, n - 1)]), "rl": "SELL", "llm": "SELL", "fused": "SELL",
             "confidence": 0.71, "reason": "breakdown below VWAP"},
        ]
    out = [simulate("agent", prices, agent_sig, extra=extra),
           simulate("flat", prices, np.zeros(n, dtype=int), extra={"role": "baseline"}),
           simulate("momentum", prices, mom, extra={"role": "baseline"})]
    for s in range(n_random):
        rng = np.random.default_rng(100 + s)
        sig = np.repeat(rng.choice([-1, 0, 0, 1], size=n // 10 + 1), 10)[:n]
        extra_s = {"role": "baseline", "group": "random", "seed": s}
        out.append(simulate(f"random (seed {s})", prices, sig, extra=extra_s))
    return out


def make_run_with_eval(run_dir: Path, split: str = "test", *, ablation: bool = True, config: bool = True,
                       with_llm: bool = True) -> Path:
    prices = synthetic_prices()
    results = fake_results(prices, with_llm=with_llm)
    save_results(results, prices, run_dir / "eval" / split,
                 info={"split": split, "market": "NQ", "data": "synthetic", "sessions": [17, 21]})
    if config:
        (run_dir / "config.yaml").write_text("# resolved\nenv:\n  market: NQ\nppo:\n  learning_rate: 0.0003\n")
    if ablation:
        (run_dir / "eval" / "ablation.json").write_text(json.dumps({
            "hybrid": {"Net PnL [$]": 1200.0, "Sharpe (ann.)": 1.3},
            "RL only": {"Net PnL [$]": 800.0, "Sharpe (ann.)": 0.9},
            "no risk veto": {"Net PnL [$]": -300.0, "Sharpe (ann.)": None},
        }))
    return run_dir


# ---- training logs for diagnose -----------------------------------------------------------
def healthy_update(step: int, phase: int = 2) -> dict[str, Any]:
    rec = {
        "time/total_timesteps": step, "time/fps": 900.0,
        "train/approx_kl": 0.015, "train/clip_fraction": 0.11, "train/explained_variance": 0.62,
        "train/entropy_loss": -0.9, "train/value_loss": 0.4, "train/policy_gradient_loss": -0.01,
        "rollout/ep_len_mean": 380.0, "rollout/ep_rew_mean": 1.2,
        "trading/trades_per_episode": 6.0, "trading/win_rate_pct": 48.0,
        "trading/net_pnl_per_episode": 120.0, "trading/breach_rate_pct": 2.0,
    }
    if phase == 3:
        rec.update({
            "llm/query_rate_pct": 19.0, "llm/configured_query_rate_pct": 20.0,
            "confidence/llm_avg": 0.45, "confidence/rl_avg": 0.5,
            "fusion/agreement_pct": 70.0, "fusion/override_pct": 4.0, "fusion/risk_veto_pct": 1.0,
            "llm/abstain_rate_pct": 5.0, "llm/advice_age_mean_steps": 1.5, "llm/max_advice_age_steps": 10,
        })
    return rec


def write_run(run_dir: Path, *, phase: int = 2, updates: int = 20, n_steps: int = 4096,
              override: dict[str, Any] | None = None, status: dict[str, Any] | None = None,
              validation: list[dict[str, Any]] | None = None, model: bool = True,
              config: str | None = None, ablation: dict[str, Any] | None = None) -> Path:
    """A complete, healthy run directory; ``override`` changes keys of every PPO update.

    ``ablation``: written as eval/ablation.json (``{column: metrics}``).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    total = updates * n_steps
    st = {"state": "finished", "phase": phase, "total_timesteps": total, "target_timesteps": total,
          "final_model": "model.zip" if model else None, "last_checkpoint": "checkpoints/step_000040960.zip"}
    st.update(status or {})
    (run_dir / "status.json").write_text(json.dumps(st))
    if model and st.get("final_model"):
        (run_dir / st["final_model"]).write_bytes(b"PK fake model")
    with (run_dir / "progress.jsonl").open("w") as fh:
        for k in range(1, updates + 1):
            rec = healthy_update(k * n_steps, phase)
            for key, value in (override or {}).items():
                if value is None:
                    rec.pop(key, None)
                else:
                    rec[key] = value
            fh.write(json.dumps(rec) + "\n")
    if validation is None:
        validation = [{"time/total_timesteps": k * 4 * n_steps, "train/net_pnl_per_day": 150.0,
                       "val/net_pnl_per_day": 120.0, "train/sharpe": 1.4, "val/sharpe": 1.1} for k in range(1, 6)]
    with (run_dir / "validation.jsonl").open("w") as fh:
        for rec in validation:
            fh.write(json.dumps(rec) + "\n")
    (run_dir / "config.yaml").write_text(config or f"env:\n  phase: {phase:d}\n")
    if ablation is not None:
        (run_dir / "eval").mkdir(exist_ok=True)
        (run_dir / "eval" / "ablation.json").write_text(json.dumps(ablation))
    return run_dir
