"""Run policies over a split of later, unseen days and collect what they did.

``run_policy`` walks one environment through every trading day of the split in
order, carrying the account from day to day (as a prop-firm evaluation would), with
``terminate_on_breach`` off so that the whole period is covered: after a breach the
account is flat for good, and the breach day is reported.

``run_fresh_days`` trades each day of the split from a fresh account instead (as
training's one-day episodes do): the policy's skill day by day, free of the path. On
one account, a bad first day can breach it, or bring it near enough to its threshold
that the risk veto refuses every later entry, and the later days then say nothing.
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
from hybrid_trader.evaluation.results import LEVEL_COLUMNS, StrategyResult
from hybrid_trader.run.market import make_veto

ALL_DECISIONS = 1 << 62
"""``run_policy(record_decisions=ALL_DECISIONS)``: keep every decision that is not HOLD."""


def evaluation_env(market: Any, env_config: EnvConfig, sessions: Sequence[int], **kwargs: Any) -> TradingEnv:
    """One environment over ``sessions`` that keeps each bar's stop, target, threshold and action."""
    cfg = dataclasses.replace(env_config, episode_sessions=None, terminate_on_breach=False)
    env = TradingEnv(market.bars, market.features, cfg, sessions=list(sessions), **kwargs)
    env.keep_levels()
    return env


def run_policy(policy: Policy, env: TradingEnv, *, record_decisions: int = 0) -> StrategyResult:
    """Trade ``policy`` through ``env`` from its first to its last day.

    The first ``record_decisions`` decisions other than HOLD go to ``extra["decisions"]``:
    bar index and time, action, and what the policy says of it (``policy.decision_record()``
    when it has one: its probabilities, the advice and the fusion rule).
    """
    obs, _ = env.reset(seed=0, options={"start": 0})
    decisions: list[dict] = []
    actions = np.zeros(env.n_actions, dtype=np.int64)
    explain = getattr(policy, "decision_record", None)
    times = env.bars.frame.index
    while True:
        mask = env.action_masks()
        action = policy(obs, mask, env)
        actions[action] += 1
        if record_decisions and len(decisions) < record_decisions and action != 0:
            t = env.current_index
            decisions.append({"index": t, "time": str(times[t]), "action": int(action),
                              **(explain() if explain is not None else {})})
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
    account = env.account
    breach = time_index[account.breach_index] if account.breach_index >= 0 else None
    target = time_index[account.target_index] if account.target_index >= 0 else None
    levels = None
    if env.level_history is not None and env.action_history is not None:
        levels = pd.DataFrame(env.level_history[visited], index=idx, columns=list(LEVEL_COLUMNS[:3]))
        levels["action"] = env.action_history[visited].astype(np.int64)
    final_account = {
        "status": account.status.value,
        "verdict": account.verdict.value,
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
        levels=levels,
        extra={**(extra or {}), "account": final_account},
    )


@dataclasses.dataclass(frozen=True)
class FreshDays:
    """Each day of a split traded from a fresh account: the days' dates and net P&L, the breaches and trades."""

    dates: tuple[str, ...]
    """The trading days' session dates (``YYYY-MM-DD``), in order."""
    pnl: tuple[float, ...]
    """Each day's net P&L [$], costs included: the equity at the day's end less the account size."""
    breached: int
    """Days on which the fresh account breached the trailing threshold."""
    trades: int
    """Trades over the days."""

    def figures(self) -> dict[str, float]:
        """The figures of :data:`~hybrid_trader.evaluation.metrics.FRESH_DAY_FIGURES`."""
        days = np.asarray(self.pnl, dtype=float)
        std = float(days.std(ddof=1)) if len(days) > 1 else 0.0
        return {
            "Net PnL, fresh days [$]": float(days.sum()),
            "Mean day, fresh [$]": float(days.mean()) if len(days) else float("nan"),
            "Sharpe, fresh days (ann.)": float(days.mean() / std * np.sqrt(252)) if std > 0 else float("nan"),
            "Breached days, fresh": float(self.breached),
            "Days, fresh": float(len(days)),
            "Trades, fresh": float(self.trades),
        }


def trade_fresh_days(make_policy: Callable[[], Policy], market: Any, env_config: EnvConfig, sessions: Sequence[int],
                     **env_kwargs: Any) -> FreshDays:
    """Trade each day of ``sessions`` from a fresh account with a new policy from ``make_policy``.

    The day's P&L is the equity at its end (positions are closed at the trading window's
    end, or at the breach) less the account size, costs included.
    """
    cfg = dataclasses.replace(env_config, episode_sessions=1, terminate_on_breach=True)
    env = TradingEnv(market.bars, market.features, cfg, sessions=list(sessions), **env_kwargs)
    pnl: list[float] = []
    dates: list[str] = []
    breached = trades = 0
    for day, window in enumerate(env.episode_windows):  # the usable days: a session too short to trade has none
        policy = make_policy()
        obs, _ = env.reset(seed=0, options={"start": day})
        while True:
            obs, _, terminated, truncated, _ = env.step(policy(obs, env.action_masks(), env))
            if terminated or truncated:
                break
        pnl.append(env.equity() - float(env.rules.account_size))
        dates.append(str(market.bars.session_dates[window.session]))
        breached += int(terminated)
        trades += len(env.broker.trades)
    return FreshDays(tuple(dates), tuple(pnl), breached, trades)


def run_fresh_days(make_policy: Callable[[], Policy], market: Any, env_config: EnvConfig, sessions: Sequence[int],
                   **env_kwargs: Any) -> dict[str, float]:
    """The figures of :func:`trade_fresh_days` (:data:`~hybrid_trader.evaluation.metrics.FRESH_DAY_FIGURES`)."""
    return trade_fresh_days(make_policy, market, env_config, sessions, **env_kwargs).figures()


def entry_rate(result: StrategyResult, env: TradingEnv) -> float:
    """Trades per bar where entry was possible, to set a random baseline's activity."""
    bars = max(int(np.count_nonzero(result.position.to_numpy() == 0)), 1)
    return min(len(result.trades) / bars, 1.0)


def validation_fn(market: Any, config: Any) -> Callable[[Any], dict]:
    """Training's periodic validation (``train_run(hooks=TrainHooks(validation=validation_fn))``).

    Deterministic policy over the last ``train.validation_sessions`` days of train and
    the first of validation -> ``{"train/net_pnl_per_day", "val/sharpe", ...}``: on one account
    carried from day to day, or each day from a fresh account (``train.validation_account``,
    :func:`run_fresh_days`: the mean day, the days' Sharpe, the trades). In phase 3 the policy
    runs without advice (the RL-only ablation's view: what the agent does when the LLM is
    silent), so validation never waits for a model and costs what phase 2's does.
    """
    k = config.train.validation_sessions
    parts = {"train": list(market.sessions("train"))[-k:], "val": list(market.sessions("val"))[:k]}
    fresh = config.train.validation_account == "fresh"

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
            if fresh:
                each = run_fresh_days(lambda: policy_of(model), market, config.env, sessions, **veto)
                out[f"{name}/net_pnl_per_day"] = each["Mean day, fresh [$]"]
                out[f"{name}/sharpe"] = _finite(each["Sharpe, fresh days (ann.)"])
                out[f"{name}/trades"] = int(each["Trades, fresh"])
                continue
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
