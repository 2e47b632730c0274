"""Checks on training: final checkpoint, policy change, value function, episodes, trading rate, train/val gap."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from hybrid_trader.evaluation.diagnose.findings import (
    Finding,
    RunView,
    Skip,
    Thresholds,
    _mean,
    _number,
    _values,
)
from hybrid_trader.run.rundir import MODEL, PROGRESS, STATUS


# ---------------------------------------------------------------------------------------
# Checks: run lifecycle and training dynamics
# ---------------------------------------------------------------------------------------
def check_final_checkpoint(run: RunView, th: Thresholds) -> list[Finding]:
    rd, status = run.run_dir, run.status
    resume = f"continue it with `hybrid-trader train ... --out {rd} --resume`"
    if status is None:
        return [Finding(
            "NO_FINAL_CHECKPOINT", "error", "status.json is missing: the run never recorded how it ended",
            {STATUS: "missing", MODEL: "present" if (rd / MODEL).exists() else "missing"},
            f"if training was killed, {resume}; otherwise re-run it",
        )]
    state = status.get("state")
    done, target = status.get("total_timesteps"), status.get("target_timesteps")
    final = status.get("final_model")
    evidence = {"state": state, "total_timesteps": done, "target_timesteps": target,
                "final_model": final, "last_checkpoint": status.get("last_checkpoint")}
    if state != "finished":
        why = {"running": "status says running: still training, or killed before it could record its end",
               "interrupted": "training was interrupted before the end",
               "failed": "training failed"}.get(str(state), f"training ended in state {state!r}")
        ckpt = status.get("last_checkpoint")
        fix = (f"{resume} (last checkpoint {ckpt})" if ckpt else
               "no checkpoint was saved: re-run training (lower the checkpoint interval to keep partial progress)")
        if state == "failed":
            fix = "read the error in the training output, fix it, then " + fix
        return [Finding("NO_FINAL_CHECKPOINT", "error", why + "; there is no final model", evidence, fix)]
    if not final:
        return [Finding("NO_FINAL_CHECKPOINT", "error", "the run finished but recorded no final model",
                        evidence, f"re-run training, or {resume} from the last checkpoint")]
    if not (rd / str(final)).is_file():
        evidence["final_model_exists"] = False
        return [Finding("NO_FINAL_CHECKPOINT", "error",
                        f"the final model {final} named in status.json is not in the run directory",
                        evidence, "restore the file, or re-run training")]
    return []


def check_training_log(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if run.progress:
        return Skip(None)
    return [Finding(
        "NO_TRAINING_LOG", "warning", "no PPO updates are logged, so the training itself cannot be checked",
        {PROGRESS: "missing" if not (run.run_dir / PROGRESS).exists() else "empty"},
        "train with `hybrid-trader train` (it writes progress.jsonl at every PPO update); if the run died "
        "before its first update, look at its console output",
    )]


FREEZE_FIELDS = ("train.freeze_body_steps",)
"""Typed config fields that hold a freeze or warm-up schedule [steps]."""
LEGACY_FREEZE_KEY = re.compile(r"freez|frozen|warmup|warm_up", re.I)
"""Key names of freeze/warm-up schedules in configs of other versions (the seed's ``phase3.adapter_warmup_steps``)."""


def _dotted(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def _legacy_keys(data: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from _legacy_keys(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, data


def freeze_settings(run: RunView) -> dict[str, float]:
    """Freeze or warm-up schedules of the run's config (> 0): typed fields, else schedule-like keys (other versions)."""
    if run.config is not None:
        values = {name: _number(_dotted(run.config, name)) for name in FREEZE_FIELDS}
    else:
        values = {k: _number(v) for k, v in _legacy_keys(run.raw_config or {}) if LEGACY_FREEZE_KEY.search(k)}
    return {k: v for k, v in values.items() if v is not None and v > 0}


def check_policy_change(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    recent, status = run.recent, run.status
    kl = _values(recent, "train/approx_kl")
    cf = _values(recent, "train/clip_fraction")
    if not kl and not cf:
        return Skip("train/approx_kl and train/clip_fraction not logged")
    kl_frozen = bool(kl) and max(kl) < th.approx_kl_max_frozen
    cf_frozen = bool(cf) and max(cf) <= th.clip_fraction_max_frozen
    if not (kl_frozen or cf_frozen):
        return []
    evidence: dict[str, Any] = {"updates examined": len(recent)}
    if kl:
        evidence["approx_kl (max)"] = max(kl)
        evidence["approx_kl threshold"] = th.approx_kl_max_frozen
    if cf:
        evidence["clip_fraction (max)"] = max(cf)
    pg = _values(recent, "train/policy_gradient_loss")
    if pg:
        evidence["|policy_gradient_loss| (mean)"] = _mean([abs(x) for x in pg])
    steps = None
    if status and isinstance(status.get("total_timesteps"), (int, float)):
        steps = float(status["total_timesteps"])
    elif recent:
        last = _values(recent[-1:], "time/total_timesteps")
        steps = last[0] if last else None
    suspects = {k: v for k, v in freeze_settings(run).items() if steps is not None and v >= steps}
    for k, v in suspects.items():
        evidence[f"config {k}"] = int(v) if float(v).is_integer() else v
    if steps is not None:
        evidence["steps trained"] = int(steps)
    if suspects and steps is not None:
        key = next(iter(suspects))
        fix = (f"config {key} = {int(suspects[key]):,} is not shorter than the {int(steps):,} steps trained, so the "
               f"policy stayed frozen: make it a small part of the run (e.g. {max(1, int(steps * 0.1)):,}) or 0")
    else:
        fix = ("check for a freeze/warm-up schedule that covers the run; otherwise raise ppo.learning_rate "
               "(e.g. x3), check the rewards vary (env.reward_scale), and that the entropy has not collapsed "
               "(ppo.ent_coef)")
    return [Finding("POLICY_NOT_CHANGING", "error",
                    f"the policy did not change over the last {len(recent)} PPO updates", evidence, fix)]


def check_value_function(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    ev = _values(run.recent, "train/explained_variance")
    if not ev:
        return Skip("train/explained_variance not logged")
    if _mean(ev) >= th.explained_variance_min:
        return []
    return [Finding(
        "WEAK_VALUE_FUNCTION", "warning",
        "the value function explains little of the returns, so advantages are noisy",
        {"explained_variance (mean)": _mean(ev), "explained_variance (last)": ev[-1],
         "threshold": th.explained_variance_min, "updates examined": len(ev)},
        "train longer or with larger rollouts (ppo.n_steps), more epochs (ppo.n_epochs) or a larger vf_coef; "
        "check the reward scale (env.reward_scale) so returns are of order 1",
    )]


def check_episode_length(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    recent = run.recent
    ep = _values(recent, "rollout/ep_len_mean")
    if not ep:
        return Skip("rollout/ep_len_mean not logged")
    if _mean(ep) >= th.min_episode_bars:
        return []
    evidence: dict[str, Any] = {"episode length [bars] (mean)": _mean(ep), "threshold [bars]": th.min_episode_bars}
    breach = _values(recent, "trading/breach_rate_pct")
    if breach:
        evidence["breach rate [%]"] = _mean(breach)
    if breach and _mean(breach) >= 50:
        fix = ("most episodes end on a prop-firm breach: widen env.stop_atr, trade fewer contracts "
               "(env.contracts) or check the rules preset (env.rules, env.account)")
    else:
        fix = ("check what ends episodes: env.episode_sessions, the trading window (env.trade_start, "
               "env.trade_end), breaches (env.terminate_on_breach) and tight stops (env.stop_atr)")
    return [Finding("SHORT_EPISODES", "warning",
                    f"episodes last {_mean(ep):.1f} bars on average: too short to learn whole trades", evidence, fix)]


def check_trading_rate(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    recent = run.recent if run.enough_updates else []
    tpe = _values(recent, "trading/trades_per_episode")
    ep = _values(recent, "rollout/ep_len_mean")
    if not tpe and not run.evals:
        return Skip("trading/trades_per_episode not logged and no evaluation metrics")
    never: dict[str, Any] = {}
    over: dict[str, Any] = {}
    if tpe:
        if _mean(tpe) < th.min_trades_per_episode:
            never["trades per episode (training, mean)"] = _mean(tpe)
        if ep and _mean(ep) > 0:
            per100 = 100.0 * _mean(tpe) / _mean(ep)
            if per100 > th.max_trades_per_100_bars:
                over["trades per 100 bars (training)"] = per100
                over["trades per episode (training, mean)"] = _mean(tpe)
                over["episode length [bars]"] = _mean(ep)
    for split, m in run.evals.items():
        trades, days = m.get("Trades"), m.get("Days")
        if isinstance(trades, dict):  # aggregated over seeds
            trades = trades.get("mean")
        if isinstance(days, dict):
            days = days.get("mean")
        if not isinstance(trades, (int, float)):
            continue
        if trades == 0:
            never[f"trades in evaluation ({split})"] = int(trades)
        if isinstance(days, (int, float)) and days > 0 and trades / days > th.max_eval_trades_per_day:
            over[f"trades per day ({split})"] = trades / days
            costs, gross = m.get("Costs [$]"), m.get("Gross PnL [$]")
            if isinstance(costs, (int, float)) and isinstance(gross, (int, float)):
                over[f"costs [$] ({split})"] = float(costs)
                over[f"gross PnL [$] ({split})"] = float(gross)
    out = []
    if never:
        never["threshold (trades per episode)"] = th.min_trades_per_episode
        out.append(Finding(
            "NEVER_TRADES", "error", "the agent (almost) never trades, so it learns nothing about trades",
            never,
            "raise the exploration (ppo.ent_coef, e.g. 0.01), check that entries are allowed by the masks "
            "(env.trade_start, env.last_entry, risk veto) and that costs are not larger than the typical move",
        ))
    if over:
        over["threshold (trades per 100 bars)"] = th.max_trades_per_100_bars
        out.append(Finding(
            "OVERTRADING", "warning", "the agent trades every few bars, paying costs on each round trip",
            over,
            "keep commissions and slippage on in training (env.commission_per_side, env.slippage_ticks), lower "
            "ppo.ent_coef, or widen the stop and target (env.stop_atr, env.target_atr)",
        ))
    return out


def check_train_val_gap(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    recent = run.validation[-th.recent_validations:]
    tr_s, va_s = _values(recent, "train/sharpe"), _values(recent, "val/sharpe")
    tr_p, va_p = _values(recent, "train/net_pnl_per_day"), _values(recent, "val/net_pnl_per_day")
    if not ((tr_s and va_s) or (tr_p and va_p)):
        return Skip("validation.jsonl missing or without train/val values")
    evidence: dict[str, Any] = {"validation records examined": len(recent)}
    hit = False
    if tr_s and va_s:
        gap = _mean(tr_s) - _mean(va_s)
        evidence.update({"train Sharpe": _mean(tr_s), "val Sharpe": _mean(va_s), "Sharpe gap": gap,
                         "max Sharpe gap": th.max_sharpe_gap})
        hit |= gap > th.max_sharpe_gap
    if tr_p and va_p:
        evidence.update({"train net PnL/day [$]": _mean(tr_p), "val net PnL/day [$]": _mean(va_p)})
        if _mean(tr_p) > 0 and _mean(va_p) < th.min_val_to_train_pnl * _mean(tr_p):
            evidence["val/train PnL ratio"] = _mean(va_p) / _mean(tr_p)
            evidence["min val/train PnL ratio"] = th.min_val_to_train_pnl
            hit = True
    if not hit:
        return []
    return [Finding(
        "TRAIN_VAL_GAP", "warning", "results on the validation days are far below those on the training days",
        evidence,
        "keep the model with the best validation result instead of the last (--set train.select=best_val), "
        "stop when validation stops improving (--set train.early_stop_patience=3), use a smaller network or "
        "more data (walk-forward folds), and check whether the validation days are a different regime",
    )]


