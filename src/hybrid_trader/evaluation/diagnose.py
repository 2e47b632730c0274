"""Read a run directory and name the failure modes it shows, with the numbers and a fix.

The failure modes are those of the seed run that never learned
(``002_e41f1f8c1f19f629.txt``): a policy that does not change (a freeze schedule longer
than the run), a weak value function, short episodes, an LLM that is rarely queried or
answers with near-zero confidence, agreement that only comes from the LLM abstaining,
advice that arrives too late, a train/validation gap, and a run that ended without its
final model; plus never trading and overtrading.

The run directory contract (written by training and evaluation)::

    RUN_DIR/config.yaml        resolved config
    RUN_DIR/status.json        {"state", "phase", "total_timesteps", "target_timesteps",
                                "final_model", "last_checkpoint"}
    RUN_DIR/progress.jsonl     one JSON object per PPO update (SB3 keys + trading/llm/fusion keys)
    RUN_DIR/validation.jsonl   periodic {"time/total_timesteps", "train/net_pnl_per_day",
                                "val/net_pnl_per_day", "train/sharpe", "val/sharpe"}
    RUN_DIR/eval/<split>/metrics.json   {strategy: metrics}

A key that is absent means "not measured": its check is skipped (and listed as such),
never failed. Thresholds are in :class:`Thresholds`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from hybrid_trader.errors import UserError

Severity = Literal["error", "warning"]

CODES: dict[str, str] = {
    "POLICY_NOT_CHANGING": "approx_kl near 0 or clip fraction 0 over the recent PPO updates",
    "WEAK_VALUE_FUNCTION": "explained variance of the value function low over the recent updates",
    "SHORT_EPISODES": "episodes end after few bars",
    "NEVER_TRADES": "(almost) no trades in training episodes or in evaluation",
    "OVERTRADING": "a trade every few bars",
    "TRAIN_VAL_GAP": "validation results far below training results",
    "NO_FINAL_CHECKPOINT": "training did not finish with a saved final model",
    "NO_TRAINING_LOG": "no PPO updates logged, so training cannot be checked",
    "LLM_QUERY_RATE_LOW": "the LLM is asked far less often than configured",
    "LLM_CONFIDENCE_NEAR_ZERO": "the LLM's confidence is near zero",
    "LLM_AGREEMENT_FROM_ABSTENTION": "high RL/LLM agreement that comes from the LLM abstaining",
    "LLM_ADVICE_STALE": "LLM advice arrives many steps after it was asked for",
}


@dataclass
class Thresholds:
    """When a number counts as a failure. Defaults follow the seed report's healthy ranges."""

    recent_updates: int = 10
    """PPO updates at the end of progress.jsonl that the training checks average over."""
    min_updates: int = 3
    """Fewer logged updates than this: the training-dynamics checks are skipped (too early to judge)."""
    approx_kl_max_frozen: float = 1e-4
    """POLICY_NOT_CHANGING when approx_kl stays below this in every recent update (healthy: 0.01-0.05)."""
    clip_fraction_max_frozen: float = 1e-4
    """POLICY_NOT_CHANGING when clip_fraction stays at or below this in every recent update (healthy: 0.05-0.15)."""
    explained_variance_min: float = 0.2
    """WEAK_VALUE_FUNCTION when the mean recent explained variance is below this (healthy: > 0.5)."""
    min_episode_bars: float = 50.0
    """SHORT_EPISODES when the mean recent episode length is below this many bars (seed run: 19.9)."""
    min_trades_per_episode: float = 0.1
    """NEVER_TRADES when recent episodes average fewer trades than this (one trade per 10 episodes)."""
    max_trades_per_100_bars: float = 10.0
    """OVERTRADING when training episodes hold more than this many trades per 100 bars."""
    max_eval_trades_per_day: float = 40.0
    """OVERTRADING when the evaluated agent averages more trades per trading day than this."""
    recent_validations: int = 3
    """Validation records at the end of validation.jsonl averaged for the train/validation gap."""
    max_sharpe_gap: float = 2.0
    """TRAIN_VAL_GAP when train Sharpe - validation Sharpe (annualised) exceeds this."""
    min_val_to_train_pnl: float = 0.5
    """TRAIN_VAL_GAP when validation PnL/day is below this fraction of a positive training PnL/day."""
    min_query_rate_ratio: float = 0.5
    """LLM_QUERY_RATE_LOW when the measured query rate is below this fraction of the configured rate."""
    min_query_rate_pct: float = 5.0
    """LLM_QUERY_RATE_LOW when no configured rate is logged and the query rate [%] is below this (seed: 0.45 %)."""
    min_llm_confidence: float = 0.05
    """LLM_CONFIDENCE_NEAR_ZERO when the mean LLM confidence (0-1) is below this (seed: 0.00023; healthy > 0.3)."""
    high_agreement_pct: float = 95.0
    """Agreement [%] at or above which LLM_AGREEMENT_FROM_ABSTENTION looks at abstention."""
    high_abstain_pct: float = 50.0
    """LLM_AGREEMENT_FROM_ABSTENTION when agreement is high and the LLM abstains at least this often [%]."""
    max_advice_age_ratio: float = 0.5
    """LLM_ADVICE_STALE when the mean advice age exceeds this fraction of the configured maximum age."""
    max_advice_age_steps: float = 10.0
    """LLM_ADVICE_STALE when no maximum age is logged and the mean advice age exceeds this many steps."""


@dataclass
class Finding:
    """One failure mode found in a run."""

    code: str
    """Greppable code, e.g. ``POLICY_NOT_CHANGING`` (see :data:`CODES`)."""
    severity: Severity
    """``error``: the run cannot be trusted; ``warning``: worth a look."""
    message: str
    """One sentence: what is wrong."""
    evidence: dict[str, Any]
    """The numbers behind it (means over the recent window, thresholds)."""
    fix: str
    """What to change (config keys, commands)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Diagnosis:
    """Everything :func:`diagnose` found: findings plus what was and was not checked."""

    run_dir: Path
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    """Checks that ran."""
    skipped: list[str] = field(default_factory=list)
    """Checks not run, with the reason (keys not logged, too few updates...)."""
    notes: list[str] = field(default_factory=list)
    """Anything else worth knowing (a truncated last log line...)."""
    status: dict[str, Any] | None = None

    @property
    def healthy(self) -> bool:
        return not self.findings

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def to_dict(self) -> dict[str, Any]:
        return {"run_dir": str(self.run_dir), "healthy": self.healthy, "findings": [f.to_dict() for f in self.findings],
                "checked": self.checked, "skipped": self.skipped, "notes": self.notes, "status": self.status}

    def render(self) -> str:
        """Human-readable text for the command line."""
        st = self.status or {}
        head = f"Diagnosis of {self.run_dir}"
        bits = []
        if "phase" in st:
            bits.append(f"phase {st['phase']}")
        if "state" in st:
            bits.append(str(st["state"]))
        if isinstance(st.get("total_timesteps"), (int, float)):
            target = st.get("target_timesteps")
            bits.append(f"{int(st['total_timesteps']):,}" + (f" of {int(target):,}" if isinstance(target, (int, float))
                                                                else "") + " steps")
        lines = [head + (f" ({', '.join(bits)})" if bits else "")]
        if self.checked:
            lines.append("  checked: " + ", ".join(self.checked))
        for s in self.skipped:
            lines.append(f"  skipped: {s}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        lines.append("")
        for f in self.findings:
            lines.append(f"[{f.severity}] {f.code}: {f.message}")
            lines.append("    evidence: " + "; ".join(f"{k} = {_fmt(v)}" for k, v in f.evidence.items()))
            lines.append(f"    fix: {f.fix}")
            lines.append("")
        if self.healthy:
            lines.append("Healthy: none of the known failure modes found.")
        else:
            n_err = sum(f.severity == "error" for f in self.findings)
            lines.append(f"{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''} "
                         f"({n_err} error{'s' if n_err != 1 else ''}, {len(self.findings) - n_err} warning"
                         f"{'s' if len(self.findings) - n_err != 1 else ''}).")
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.3g}"
        return f"{v:,.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


# ---------------------------------------------------------------------------------------
# Reading the run directory
# ---------------------------------------------------------------------------------------
def read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; a truncated last line (a killed writer) is skipped with a note."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the training log: {err}", file=str(path)) from None
    records = []
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    for k, (lineno, line) in enumerate(numbered):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as err:
            if k == len(numbered) - 1:
                notes.append(f"{path.name}: last line {lineno} is incomplete (a killed writer?) and was skipped")
                continue
            raise UserError(f"line is not valid JSON: {err.msg}", file=str(path), row=lineno,
                            fix="each line must be one JSON object; remove or repair the damaged line") from None
        if not isinstance(rec, dict):
            raise UserError("line is not a JSON object", file=str(path), row=lineno,
                            fix="each line must be one JSON object")
        records.append(rec)
    return records


def _read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read: {err}", file=str(path)) from None
    except json.JSONDecodeError as err:
        raise UserError(f"not valid JSON: {err.msg}", file=str(path), row=err.lineno,
                        fix="the training code rewrites it at the next update; or delete it") from None


def _values(records: Iterable[Mapping[str, Any]], key: str) -> list[float]:
    out = []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            out.append(float(v))
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = data
    return out


def freeze_settings(run_dir: Path) -> dict[str, float]:
    """Numeric config keys that look like freeze or warm-up schedules (``*freeze*``, ``*warmup*``, ``*frozen*``)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    try:
        from hybrid_trader.config import read_yaml

        data, _ = read_yaml(path)
    except UserError:
        return {}
    return {k: float(v) for k, v in _flatten(data).items()
            if re.search(r"freez|frozen|warmup|warm_up", k, re.I)
            and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}


# ---------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------
def diagnose(run_dir: str | Path, thresholds: Thresholds | None = None) -> Diagnosis:
    """Read ``run_dir`` and return a :class:`Diagnosis` (findings, checks run and skipped).

    Raises :class:`UserError` when ``run_dir`` is missing, is not a run directory, or
    holds a file that cannot be read.
    """
    th = thresholds or Thresholds()
    rd = Path(run_dir)
    if not rd.exists():
        raise UserError("run directory not found", file=str(rd), fix="give the --out folder of `hybrid-trader train`")
    if not rd.is_dir():
        raise UserError("not a directory", file=str(rd), fix="give the run directory, not a file in it")
    known = ("status.json", "progress.jsonl", "validation.jsonl", "config.yaml", "eval")
    if not any((rd / k).exists() for k in known):
        raise UserError("not a run directory: none of " + ", ".join(known) + " is in it", file=str(rd),
                        fix="give the --out folder of `hybrid-trader train`")

    dx = Diagnosis(rd)
    status = _read_json_file(rd / "status.json") if (rd / "status.json").is_file() else None
    if status is not None and not isinstance(status, dict):
        raise UserError("status.json is not a JSON object", file=str(rd / "status.json"))
    dx.status = status
    progress = read_jsonl(rd / "progress.jsonl", dx.notes) if (rd / "progress.jsonl").is_file() else []
    validation = read_jsonl(rd / "validation.jsonl", dx.notes) if (rd / "validation.jsonl").is_file() else []
    recent = progress[-th.recent_updates:]

    _check_checkpoint(rd, status, dx)
    if not progress:
        dx.findings.append(Finding(
            "NO_TRAINING_LOG", "warning", "no PPO updates are logged, so the training itself cannot be checked",
            {"progress.jsonl": "missing" if not (rd / "progress.jsonl").exists() else "empty"},
            "train with `hybrid-trader train` (it writes progress.jsonl at every PPO update); if the run died "
            "before its first update, look at its console output",
        ))
    elif len(progress) < th.min_updates:
        dx.skipped.append(f"training dynamics: only {len(progress)} PPO updates logged (need {th.min_updates})")
    else:
        _check_policy(rd, recent, status, th, dx)
        _check_value(recent, th, dx)
        _check_episodes(recent, th, dx)
        _check_llm(recent, status, th, dx)
    _check_trading(recent if len(progress) >= th.min_updates else [], rd, th, dx)
    _check_gap(validation, th, dx)
    order = {"error": 0, "warning": 1}
    dx.findings.sort(key=lambda f: order.get(f.severity, 2))
    return dx


def diagnose_run(run_dir: str | Path, thresholds: Thresholds | None = None) -> list[Finding]:
    """The findings of :func:`diagnose` (empty when the run looks healthy)."""
    return diagnose(run_dir, thresholds).findings


def _check_checkpoint(rd: Path, status: dict | None, dx: Diagnosis) -> None:
    dx.checked.append("final checkpoint")
    resume = f"continue it with `hybrid-trader train ... --out {rd} --resume`"
    if status is None:
        dx.findings.append(Finding(
            "NO_FINAL_CHECKPOINT", "error", "status.json is missing: the run never recorded how it ended",
            {"status.json": "missing", "model.zip": "present" if (rd / "model.zip").exists() else "missing"},
            f"if training was killed, {resume}; otherwise re-run it",
        ))
        return
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
        dx.findings.append(Finding("NO_FINAL_CHECKPOINT", "error", why + "; there is no final model", evidence, fix))
        return
    if not final:
        dx.findings.append(Finding("NO_FINAL_CHECKPOINT", "error", "the run finished but recorded no final model",
                                   evidence, f"re-run training, or {resume} from the last checkpoint"))
    elif not (rd / str(final)).is_file():
        evidence["final_model_exists"] = False
        dx.findings.append(Finding("NO_FINAL_CHECKPOINT", "error",
                                   f"the final model {final} named in status.json is not in the run directory",
                                   evidence, "restore the file, or re-run training"))


def _check_policy(rd: Path, recent: list[dict], status: dict | None, th: Thresholds, dx: Diagnosis) -> None:
    kl = _values(recent, "train/approx_kl")
    cf = _values(recent, "train/clip_fraction")
    if not kl and not cf:
        dx.skipped.append("policy change: train/approx_kl and train/clip_fraction not logged")
        return
    dx.checked.append("policy change")
    kl_frozen = bool(kl) and max(kl) < th.approx_kl_max_frozen
    cf_frozen = bool(cf) and max(cf) <= th.clip_fraction_max_frozen
    if not (kl_frozen or cf_frozen):
        return
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
    suspects = {k: v for k, v in freeze_settings(rd).items() if steps is not None and v >= steps}
    for k, v in suspects.items():
        evidence[f"config {k}"] = int(v) if float(v).is_integer() else v
    if steps is not None:
        evidence["steps trained"] = int(steps)
    if suspects:
        key = next(iter(suspects))
        fix = (f"config {key} = {int(suspects[key]):,} is not shorter than the {int(steps):,} steps trained, so the "
               f"policy stayed frozen: make it a small part of the run (e.g. {max(1, int(steps * 0.1)):,}) or 0")
    else:
        fix = ("check for a freeze/warm-up schedule that covers the run; otherwise raise ppo.learning_rate "
               "(e.g. x3), check the rewards vary (env.reward_scale), and that the entropy has not collapsed "
               "(ppo.ent_coef)")
    dx.findings.append(Finding("POLICY_NOT_CHANGING", "error",
                               f"the policy did not change over the last {len(recent)} PPO updates", evidence, fix))


def _check_value(recent: list[dict], th: Thresholds, dx: Diagnosis) -> None:
    ev = _values(recent, "train/explained_variance")
    if not ev:
        dx.skipped.append("value function: train/explained_variance not logged")
        return
    dx.checked.append("value function")
    if _mean(ev) < th.explained_variance_min:
        dx.findings.append(Finding(
            "WEAK_VALUE_FUNCTION", "warning",
            "the value function explains little of the returns, so advantages are noisy",
            {"explained_variance (mean)": _mean(ev), "explained_variance (last)": ev[-1],
             "threshold": th.explained_variance_min, "updates examined": len(ev)},
            "train longer or with larger rollouts (ppo.n_steps), more epochs (ppo.n_epochs) or a larger vf_coef; "
            "check the reward scale (env.reward_scale) so returns are of order 1",
        ))


def _check_episodes(recent: list[dict], th: Thresholds, dx: Diagnosis) -> None:
    ep = _values(recent, "rollout/ep_len_mean")
    if not ep:
        dx.skipped.append("episode length: rollout/ep_len_mean not logged")
        return
    dx.checked.append("episode length")
    if _mean(ep) < th.min_episode_bars:
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
        dx.findings.append(Finding("SHORT_EPISODES", "warning",
                                   f"episodes last {_mean(ep):.1f} bars on average: too short to learn whole trades",
                                   evidence, fix))


def _eval_agent_metrics(rd: Path) -> dict[str, dict[str, Any]]:
    """``{split: metrics of the agent}`` from RUN_DIR/eval/<split>/ (agent = role 'agent' or first entry)."""
    out: dict[str, dict[str, Any]] = {}
    root = rd / "eval"
    if not root.is_dir():
        return out
    for split_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        mpath = split_dir / "metrics.json"
        if not mpath.is_file():
            continue
        metrics = _read_json_file(mpath)
        if not isinstance(metrics, dict) or not metrics:
            continue
        name = next(iter(metrics))
        index = split_dir / "results.json"
        if index.is_file():
            try:
                entries = _read_json_file(index).get("strategies", [])
                agents = [e["name"] for e in entries if e.get("role") == "agent" and e.get("name") in metrics]
                name = agents[0] if agents else name
            except (UserError, AttributeError, KeyError, TypeError):
                pass
        if isinstance(metrics.get(name), dict):
            out[split_dir.name] = metrics[name]
    return out


def _check_trading(recent: list[dict], rd: Path, th: Thresholds, dx: Diagnosis) -> None:
    tpe = _values(recent, "trading/trades_per_episode")
    ep = _values(recent, "rollout/ep_len_mean")
    evals = _eval_agent_metrics(rd)
    if not tpe and not evals:
        dx.skipped.append("trading rate: trading/trades_per_episode not logged and no evaluation metrics")
        return
    dx.checked.append("trading rate")
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
    for split, m in evals.items():
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
    if never:
        never["threshold (trades per episode)"] = th.min_trades_per_episode
        dx.findings.append(Finding(
            "NEVER_TRADES", "error", "the agent (almost) never trades, so it learns nothing about trades",
            never,
            "raise the exploration (ppo.ent_coef, e.g. 0.01), check that entries are allowed by the masks "
            "(env.trade_start, env.last_entry, risk veto) and that costs are not larger than the typical move",
        ))
    if over:
        over["threshold (trades per 100 bars)"] = th.max_trades_per_100_bars
        dx.findings.append(Finding(
            "OVERTRADING", "warning", "the agent trades every few bars, paying costs on each round trip",
            over,
            "keep commissions and slippage on in training (env.commission_per_side, env.slippage_ticks), lower "
            "ppo.ent_coef, or widen the stop and target (env.stop_atr, env.target_atr)",
        ))


def _check_gap(validation: list[dict], th: Thresholds, dx: Diagnosis) -> None:
    recent = validation[-th.recent_validations:]
    tr_s, va_s = _values(recent, "train/sharpe"), _values(recent, "val/sharpe")
    tr_p, va_p = _values(recent, "train/net_pnl_per_day"), _values(recent, "val/net_pnl_per_day")
    if not ((tr_s and va_s) or (tr_p and va_p)):
        dx.skipped.append("train/validation gap: validation.jsonl missing or without train/val values")
        return
    dx.checked.append("train/validation gap")
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
    if hit:
        dx.findings.append(Finding(
            "TRAIN_VAL_GAP", "warning", "results on the validation days are far below those on the training days",
            evidence,
            "keep the checkpoint with the best validation result instead of the last, train fewer steps, use a "
            "smaller network or more data (walk-forward folds), and check whether the validation days are a "
            "different regime",
        ))


def _check_llm(recent: list[dict], status: dict | None, th: Thresholds, dx: Diagnosis) -> None:
    llm_keys = [k for r in recent for k in r if k.startswith(("llm/", "confidence/llm", "fusion/"))]
    phase = (status or {}).get("phase")
    if not llm_keys:
        if phase == 3:
            dx.skipped.append("LLM: phase 3 but no llm/, confidence/ or fusion/ keys logged")
        return
    q = _values(recent, "llm/query_rate_pct")
    qc = _values(recent, "llm/configured_query_rate_pct")
    conf = _values(recent, "confidence/llm_avg")
    agree = _values(recent, "fusion/agreement_pct")
    abstain = _values(recent, "llm/abstain_rate_pct")
    age = _values(recent, "llm/advice_age_mean_steps")
    max_age = _values(recent, "llm/max_advice_age_steps")

    query_low = False
    if q:
        dx.checked.append("LLM query rate")
        ev: dict[str, Any] = {"query rate [%]": _mean(q)}
        if qc:
            ev["configured query rate [%]"] = _mean(qc)
            ev["min ratio"] = th.min_query_rate_ratio
            query_low = _mean(q) < th.min_query_rate_ratio * _mean(qc)
        else:
            ev["threshold [%]"] = th.min_query_rate_pct
            query_low = _mean(q) < th.min_query_rate_pct
        if query_low:
            lag = _values(recent, "llm/answer_lag_steps")
            slow_model = bool(lag) and _mean(lag) > (_mean(max_age) if max_age else th.max_advice_age_steps)
            if slow_model:
                ev["model answer lag (mean) [steps]"] = _mean(lag)
            dx.findings.append(Finding(
                "LLM_QUERY_RATE_LOW", "error", "the LLM is asked far less often than intended, so it cannot help",
                ev,
                "the model is the bottleneck: it answers a batch while training takes hundreds of steps; use a GPU "
                "(llm.transformers.device: cuda), a served model (--llm openai), or fewer environments"
                if slow_model else
                "lower the query interval and cooldown, lower the RL-confidence threshold that triggers a query, and "
                "check that queries are not dropped (timeouts, a full queue)",
            ))
    else:
        dx.skipped.append("LLM query rate: llm/query_rate_pct not logged")

    conf_low = False
    if conf:
        dx.checked.append("LLM confidence")
        conf_low = _mean(conf) < th.min_llm_confidence
        if conf_low:
            dx.findings.append(Finding(
                "LLM_CONFIDENCE_NEAR_ZERO", "error", "the LLM's confidence is near zero: it is effectively abstaining",
                {"LLM confidence (mean)": _mean(conf), "threshold": th.min_llm_confidence,
                 **({"abstain rate [%]": _mean(abstain)} if abstain else {})},
                "use scoring mode (log-probabilities of the action names) rather than parsed generations, shorten the "
                "prompt, check the answers in the LLM log (e.g. 'HOLD | 0.0'), or try another model",
            ))
    else:
        dx.skipped.append("LLM confidence: confidence/llm_avg not logged")

    if agree:
        dx.checked.append("LLM agreement")
        abstaining = (abstain and _mean(abstain) >= th.high_abstain_pct) or conf_low or query_low
        if _mean(agree) >= th.high_agreement_pct and abstaining:
            ev = {"agreement [%]": _mean(agree), "high agreement threshold [%]": th.high_agreement_pct}
            if abstain:
                ev["abstain rate [%]"] = _mean(abstain)
            if conf:
                ev["LLM confidence (mean)"] = _mean(conf)
            if q:
                ev["query rate [%]"] = _mean(q)
            dx.findings.append(Finding(
                "LLM_AGREEMENT_FROM_ABSTENTION", "warning",
                "RL and LLM agree almost always, but only because the LLM abstains or is rarely asked",
                ev,
                "do not read the agreement as the LLM endorsing the policy: fix the abstentions (timeouts, parse "
                "failures, confidence) and compare against the RL-only ablation",
            ))
    else:
        dx.skipped.append("LLM agreement: fusion/agreement_pct not logged")

    lag = _values(recent, "llm/answer_lag_steps")
    if age or lag:
        dx.checked.append("LLM advice age")
        ev = {"advice age (mean) [steps]": _mean(age)} if age else {}
        if max_age and _mean(max_age) > 0:
            limit = th.max_advice_age_ratio * _mean(max_age)
            ev["configured max age [steps]"] = _mean(max_age)
            ev["threshold [steps]"] = limit
        else:
            limit = th.max_advice_age_steps
            ev["threshold [steps]"] = limit
        # a model slower than the maximum age: its answers expire before they are read
        too_slow = bool(lag) and _mean(lag) > (_mean(max_age) if max_age and _mean(max_age) > 0 else limit)
        if lag:
            ev["model answer lag (mean) [steps]"] = _mean(lag)
        if (age and _mean(age) > limit) or too_slow:
            dx.findings.append(Finding(
                "LLM_ADVICE_STALE", "warning",
                "LLM advice arrives many steps after it was asked for" + (
                    ": the model answers more slowly than the maximum age, so most answers expire unread"
                    if too_slow else ""),
                ev,
                "make answers faster: batch more queries, use scoring mode or fewer max_new_tokens, a smaller model, "
                "a GPU or a faster server; or fewer environments; or allow older advice (llm.batching.max_age_steps)",
            ))
    else:
        dx.skipped.append("LLM advice age: llm/advice_age_mean_steps not logged")
