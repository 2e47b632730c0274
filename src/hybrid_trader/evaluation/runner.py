"""Run policies over a split of later, unseen days and collect what they did.

``run_policy`` walks one environment through every trading day of the split in
order, carrying the account from day to day (as a prop-firm evaluation would), with
``terminate_on_breach`` off so that the whole period is covered: after a breach the
account is flat for good, and the breach day is reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.evaluation.metrics import compute_metrics
from hybrid_trader.evaluation.policies import AgentPolicy, HybridAgentPolicy, Policy
from hybrid_trader.evaluation.results import StrategyResult
from hybrid_trader.training.market import make_veto


def evaluation_env(market: Any, env_config: EnvConfig, sessions: Sequence[int], **kwargs: Any) -> TradingEnv:
    cfg = dataclasses.replace(env_config, episode_sessions=None, terminate_on_breach=False)
    return TradingEnv(market.bars, market.features, cfg, sessions=list(sessions), **kwargs)


def run_policy(policy: Policy, env: TradingEnv, *, record_decisions: int = 0) -> StrategyResult:
    """Trade ``policy`` through ``env`` from its first to its last day."""
    obs, _ = env.reset(seed=0, options={"start": 0})
    decisions: list[dict] = []
    actions = np.zeros(env.n_actions, dtype=np.int64)
    while True:
        mask = env.action_masks()
        action = policy(obs, mask, env)
        actions[action] += 1
        if record_decisions and len(decisions) < record_decisions and action != 0:
            decisions.append({"index": env.current_index, "action": int(action)})
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    extra = {"actions": actions.tolist(), "decisions": decisions, "end_reason": info.get("end_reason"),
             "invalid_actions": env.invalid_actions, **getattr(policy, "result_extra", {})}
    return collect_result(env, policy.name, extra=extra)


def collect_result(env: TradingEnv, name: str, extra: dict | None = None) -> StrategyResult:
    """A ``StrategyResult`` from the environment's history (visited bars only).

    ``extra["account"]`` carries the account's final ``status``, its ``verdict`` (which the
    metrics report as is) and its ``events`` (time, reason code, state entered).
    """
    visited = ~np.isnan(env.equity_history)
    idx = env.bars.frame.index[visited]
    equity = pd.Series(env.equity_history[visited], index=idx, name=name)
    position = pd.Series(env.position_history[visited].astype(np.int64), index=idx, name=name)
    trades = env.trade_log()
    time_index = env.bars.frame.index
    breach = time_index[env.breach_index] if env.breach_index >= 0 else None
    target = time_index[env.target_index] if env.target_index >= 0 else None
    account = env.account
    final_account = {
        "status": account.status.value,
        "verdict": account.verdict(),
        "events": [{"time": time_index[e.index], "code": e.code, "status": e.status.value} for e in account.events],
    }
    return StrategyResult(
        name=name,
        trades=trades,
        equity=equity,
        position=position,
        initial_balance=float(env.rules.account_size),
        breach_time=breach,
        target_hit_time=target,
        extra={**(extra or {}), "account": final_account},
    )


def entry_rate(result: StrategyResult, env: TradingEnv) -> float:
    """Trades per bar where entry was possible, to set a random baseline's activity."""
    bars = max(int(np.count_nonzero(result.position.to_numpy() == 0)), 1)
    return min(len(result.trades) / bars, 1.0)


def validation_fn(market: Any, config: Any) -> Callable[[Any], dict]:
    """Training's periodic validation (``train_run(validation=validation_fn)``).

    Deterministic policy over the last ``train.validation_sessions`` days of train and
    the first of validation -> ``{"train/net_pnl_per_day", "val/sharpe", ...}``. In phase 3
    the policy runs without advice (the RL-only ablation's view: what the agent does when
    the LLM is silent), so validation never waits for a model and costs what phase 2's does.
    """
    k = config.train.validation_sessions
    parts = {"train": list(market.sessions("train"))[-k:], "val": list(market.sessions("val"))[:k]}

    def policy_of(model: Any) -> Policy:
        if config.env.phase == 3:
            return HybridAgentPolicy(model, model.get_vec_normalize_env(), None, market, config.fusion,
                                     use_llm=False)
        return AgentPolicy(model, model.get_vec_normalize_env())

    def evaluate(model: Any) -> dict:
        out: dict[str, Any] = {}
        for name, sessions in parts.items():
            if not sessions:
                continue
            veto = {"risk_veto": make_veto(config.risk)} if config.env.phase == 3 else {}
            env = evaluation_env(market, config.env, sessions, **veto)
            result = run_policy(policy_of(model), env)
            m = compute_metrics(result)
            days = max(m.get("Days", len(sessions)) or 1, 1)
            out[f"{name}/net_pnl_per_day"] = float(m["Net PnL [$]"]) / days
            out[f"{name}/sharpe"] = _finite(m.get("Sharpe (ann.)"))
            out[f"{name}/trades"] = int(m["Trades"])
        return out

    return evaluate


def _finite(x: Any) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None
