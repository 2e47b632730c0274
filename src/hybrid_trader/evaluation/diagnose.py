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

The checks are a registry (:data:`CHECKS`): each :class:`Check` has a name, the codes it
can report and a function ``(RunView, Thresholds) -> list[Finding] | Skip``. The run is
read once into a :class:`RunView` (logs, status, evaluation results, ablation and the
run's config as a typed :class:`~hybrid_trader.training.config.RunConfig`). Adding a
check: write its function, add its codes to :data:`CODES` and its thresholds to
:class:`Thresholds`, append it to :data:`CHECKS`, and add a run built to show it to
``tests/evaluation/test_diagnose.py::SINGLE_FAILURES``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hybrid_trader.config import load_yaml_config, read_yaml
from hybrid_trader.errors import UserError
from hybrid_trader.llm.backends.base import ERROR_KINDS, ERROR_PARSE
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.training.config import RunConfig

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
    "LLM_ERROR_RATE_HIGH": "many LLM queries failed (timeouts, server errors, garbage answers)",
    "LLM_AUTH_FAILED": "the LLM server refused the API key (HTTP 401/403)",
    "LLM_UNREACHABLE": "the LLM server could not be reached for the whole run",
    "HYBRID_EQUALS_RL_ONLY": "the hybrid agent's evaluation figures equal the RL-only ablation's: advice had no effect",
    "STUDENT_FIDELITY_LOW": "the distilled student agrees too rarely with the LLM it imitates on held-out days",
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
    max_llm_error_rate_pct: float = 10.0
    """LLM_ERROR_RATE_HIGH when more than this share of the model queries failed [%]."""
    min_llm_queries_for_rate: int = 5
    """LLM_ERROR_RATE_HIGH is judged only once at least this many model queries were sent."""
    min_auth_errors: int = 1
    """LLM_AUTH_FAILED when at least this many queries were refused for their credentials."""
    unreachable_min_share_pct: float = 90.0
    """LLM_UNREACHABLE when connection errors are at least this share of the model queries sent [%]."""
    hybrid_equal_rel_tol: float = 1e-9
    """HYBRID_EQUALS_RL_ONLY when every figure of the two ablation columns differs by at most this (relative)."""
    min_student_agreement_pct: float = 80.0
    """STUDENT_FIDELITY_LOW when the student's top-1 agreement with its LLM on held-out days is below this [%]."""


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


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) else None


# ---------------------------------------------------------------------------------------
# The run, read once
# ---------------------------------------------------------------------------------------
@dataclass
class RunView:
    """Everything the checks read from one run directory."""

    run_dir: Path
    status: dict[str, Any] | None
    progress: list[dict[str, Any]]
    validation: list[dict[str, Any]]
    recent: list[dict[str, Any]]
    """The last ``Thresholds.recent_updates`` PPO updates."""
    enough_updates: bool
    """At least ``Thresholds.min_updates`` updates: the training-dynamics checks can judge."""
    config: RunConfig | None
    """The run's config.yaml as a typed config (None: missing, or not this version's config)."""
    raw_config: Mapping[str, Any] | None
    """config.yaml as plain YAML (for configs of other versions that do not load as :class:`RunConfig`)."""
    evals: dict[str, dict[str, Any]]
    """``{split: the agent's metrics}`` from eval/<split>/."""
    eval_llm: dict[str, dict[str, Any]]
    """``{split: the agent's LLM figures}`` (results.json ``extra.llm``)."""
    ablation: dict[str, Any] | None
    """eval/ablation.json: ``{column: metrics}``, e.g. hybrid (RL + LLM) and RL only (llm_weight 0)."""

    @property
    def llm(self) -> LLMConfig | None:
        """The run's LLM advisor config (None when the config did not load or has no valid llm section)."""
        if self.config is None:
            return None
        try:
            return self.config.llm.in_run()
        except UserError:
            return None


@dataclass(frozen=True)
class Skip:
    """A check that could not run; ``reason`` is listed in ``Diagnosis.skipped`` (None: not applicable, not listed)."""

    reason: str | None


CheckFn = Callable[[RunView, "Thresholds"], "list[Finding] | Skip"]


@dataclass(frozen=True)
class Check:
    """One entry of the registry."""

    name: str
    """Listed in ``Diagnosis.checked`` (and before the reason in ``skipped``)."""
    codes: tuple[str, ...]
    """The finding codes it can report."""
    run: CheckFn
    training_log: bool = False
    """Needs at least ``Thresholds.min_updates`` logged PPO updates (otherwise not run)."""


def _read_config(rd: Path, notes: list[str]) -> tuple[RunConfig | None, Mapping[str, Any] | None]:
    path = rd / "config.yaml"
    if not path.is_file():
        return None, None
    try:
        raw, _ = read_yaml(path)
    except UserError as err:
        notes.append(f"config.yaml cannot be read, config checks use defaults: {err.message}")
        return None, None
    raw = raw if isinstance(raw, Mapping) else None
    try:
        return load_yaml_config(path, RunConfig), raw
    except UserError as err:
        notes.append(f"config.yaml is not this version's run config ({err.message}); read as plain YAML")
        return None, raw


def _eval_agent(rd: Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """``({split: metrics of the agent}, {split: its extra.llm})`` from RUN_DIR/eval/<split>/."""
    metrics_out: dict[str, dict[str, Any]] = {}
    llm_out: dict[str, dict[str, Any]] = {}
    root = rd / "eval"
    if not root.is_dir():
        return metrics_out, llm_out
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
                agents = [e for e in entries if e.get("role") == "agent" and e.get("name") in metrics]
                if agents:
                    name = agents[0]["name"]
                    llm = (agents[0].get("extra") or {}).get("llm")
                    if isinstance(llm, dict):
                        llm_out[split_dir.name] = llm
            except (UserError, AttributeError, KeyError, TypeError):
                pass
        if isinstance(metrics.get(name), dict):
            metrics_out[split_dir.name] = metrics[name]
    return metrics_out, llm_out


def read_run(run_dir: str | Path, th: Thresholds, notes: list[str]) -> RunView:
    """Read ``run_dir`` once (UserError when it is missing, not a run directory, or a file is unreadable)."""
    rd = Path(run_dir)
    if not rd.exists():
        raise UserError("run directory not found", file=str(rd), fix="give the --out folder of `hybrid-trader train`")
    if not rd.is_dir():
        raise UserError("not a directory", file=str(rd), fix="give the run directory, not a file in it")
    known = ("status.json", "progress.jsonl", "validation.jsonl", "config.yaml", "eval")
    if not any((rd / k).exists() for k in known):
        raise UserError("not a run directory: none of " + ", ".join(known) + " is in it", file=str(rd),
                        fix="give the --out folder of `hybrid-trader train`")
    status = _read_json_file(rd / "status.json") if (rd / "status.json").is_file() else None
    if status is not None and not isinstance(status, dict):
        raise UserError("status.json is not a JSON object", file=str(rd / "status.json"))
    progress = read_jsonl(rd / "progress.jsonl", notes) if (rd / "progress.jsonl").is_file() else []
    validation = read_jsonl(rd / "validation.jsonl", notes) if (rd / "validation.jsonl").is_file() else []
    config, raw = _read_config(rd, notes)
    evals, eval_llm = _eval_agent(rd)
    ablation_path = rd / "eval" / "ablation.json"
    ablation = _read_json_file(ablation_path) if ablation_path.is_file() else None
    return RunView(rd, status, progress, validation, progress[-th.recent_updates:], len(progress) >= th.min_updates,
                   config, raw, evals, eval_llm, ablation if isinstance(ablation, dict) else None)


# ---------------------------------------------------------------------------------------
# Diagnosis
# ---------------------------------------------------------------------------------------
def diagnose(run_dir: str | Path, thresholds: Thresholds | None = None) -> Diagnosis:
    """Read ``run_dir`` and return a :class:`Diagnosis` (findings, checks run and skipped).

    Raises :class:`UserError` when ``run_dir`` is missing, is not a run directory, or
    holds a file that cannot be read.
    """
    th = thresholds or Thresholds()
    notes: list[str] = []
    run = read_run(run_dir, th, notes)
    dx = Diagnosis(run.run_dir, notes=notes, status=run.status)
    if run.progress and not run.enough_updates:
        dx.skipped.append(f"training dynamics: only {len(run.progress)} PPO updates logged (need {th.min_updates})")
    for check in CHECKS:
        if check.training_log and not run.enough_updates:
            continue
        result = check.run(run, th)
        if isinstance(result, Skip):
            if result.reason:
                dx.skipped.append(f"{check.name}: {result.reason}")
            continue
        dx.checked.append(check.name)
        dx.findings.extend(result)
    order = {"error": 0, "warning": 1}
    dx.findings.sort(key=lambda f: order.get(f.severity, 2))
    return dx


def diagnose_run(run_dir: str | Path, thresholds: Thresholds | None = None) -> list[Finding]:
    """The findings of :func:`diagnose` (empty when the run looks healthy)."""
    return diagnose(run_dir, thresholds).findings


# ---------------------------------------------------------------------------------------
# Checks: run lifecycle and training dynamics
# ---------------------------------------------------------------------------------------
def check_final_checkpoint(run: RunView, th: Thresholds) -> list[Finding]:
    rd, status = run.run_dir, run.status
    resume = f"continue it with `hybrid-trader train ... --out {rd} --resume`"
    if status is None:
        return [Finding(
            "NO_FINAL_CHECKPOINT", "error", "status.json is missing: the run never recorded how it ended",
            {"status.json": "missing", "model.zip": "present" if (rd / "model.zip").exists() else "missing"},
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
        {"progress.jsonl": "missing" if not (run.run_dir / "progress.jsonl").exists() else "empty"},
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
        "keep the checkpoint with the best validation result instead of the last, train fewer steps, use a "
        "smaller network or more data (walk-forward folds), and check whether the validation days are a "
        "different regime",
    )]


# ---------------------------------------------------------------------------------------
# Checks: the LLM advisor
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LLMHealth:
    """Failure counts of the advisor in one part of the run (training, or an evaluation split)."""

    source: str
    """Where they were logged: 'training' or 'evaluation (<split>)'."""
    queries: float
    """Model queries sent (the denominator of the error rate)."""
    errors: dict[str, float]
    """Failed queries by kind (``llm/errors_<kind>``)."""
    error_rate_pct: float
    circuit_opened: float

    @property
    def failed(self) -> float:
        return sum(v for k, v in self.errors.items() if k != ERROR_PARSE)

    @property
    def dominant(self) -> str | None:
        kinds = {k: v for k, v in self.errors.items() if v > 0}
        return max(kinds, key=kinds.__getitem__) if kinds else None


def _health_from(stats: Mapping[str, Any], source: str) -> LLMHealth | None:
    errors = {k: _number(stats.get(f"llm/errors_{k}")) for k in ERROR_KINDS}
    if all(v is None for v in errors.values()):
        return None
    errs = {k: v or 0.0 for k, v in errors.items()}
    queries = _number(stats.get("llm/total_queries"))
    rate = _number(stats.get("llm/error_rate_pct"))
    if queries is None or queries < sum(errs.values()):
        queries = sum(errs.values()) if rate in (None, 0.0) else 100.0 * sum(errs.values()) / rate
    if rate is None:
        rate = 100.0 * sum(errs.values()) / queries if queries else 0.0
    return LLMHealth(source, queries, errs, rate, _number(stats.get("llm/circuit_opened")) or 0.0)


def llm_health(run: RunView) -> list[LLMHealth]:
    """The advisor's failure counts: training (last logged update: the counts are run totals) and evaluations."""
    out = []
    logged = [r for r in run.progress if any(k.startswith("llm/errors_") for k in r)]
    if logged:
        h = _health_from(logged[-1], "training")
        if h is not None:
            out.append(h)
    for split, llm in run.eval_llm.items():
        h = _health_from(llm, f"evaluation ({split})")
        if h is not None:
            out.append(h)
    return out


def _server(run: RunView) -> tuple[str, str | None]:
    """The back end in use and, for a server, its URL."""
    llm = run.llm
    if llm is None:
        return "unknown", None
    return llm.backend, (llm.openai.base_url if llm.backend == "openai" else None)


def _unreachable(run: RunView, th: Thresholds) -> list[LLMHealth]:
    return [h for h in llm_health(run) if h.queries and h.errors.get("connection", 0.0) > 0
            and 100.0 * h.errors["connection"] / h.queries >= th.unreachable_min_share_pct]


def _auth_failed(run: RunView, th: Thresholds) -> list[LLMHealth]:
    return [h for h in llm_health(run) if h.errors.get("auth", 0.0) >= th.min_auth_errors]


def check_llm_server(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    """LLM_AUTH_FAILED, LLM_UNREACHABLE and LLM_ERROR_RATE_HIGH from the advisor's error counts."""
    health = llm_health(run)
    if not health:
        phase = (run.status or {}).get("phase")
        return Skip("llm/errors_<kind> not logged" if phase == 3 or run.eval_llm else None)
    backend, url = _server(run)
    where = f"the LLM server at {url}" if url else f"the {backend} back end"
    out: list[Finding] = []
    auth = _auth_failed(run, th)
    if auth:
        llm = run.llm
        var = (llm.openai.api_key_env if llm is not None else "") or "OPENAI_API_KEY"
        ev: dict[str, Any] = {}
        for h in auth:
            ev[f"queries refused for credentials ({h.source})"] = int(h.errors["auth"])
            ev[f"model queries ({h.source})"] = int(h.queries)
        ev["key variable (llm.openai.api_key_env)"] = var
        out.append(Finding(
            "LLM_AUTH_FAILED", "error", f"{where} refused the API key (HTTP 401/403): no advice was given", ev,
            f"export {var}=<a valid key> in the shell that trains and evaluates (the key is read from the "
            f"environment variable named in llm.openai.api_key_env, never from a file), then re-run",
        ))
    down = [h for h in _unreachable(run, th) if h not in auth]
    if down:
        ev = {}
        for h in down:
            ev[f"connection errors ({h.source})"] = int(h.errors["connection"])
            ev[f"model queries ({h.source})"] = int(h.queries)
            if h.circuit_opened:
                ev[f"circuit opened ({h.source})"] = int(h.circuit_opened)
        ev["threshold [% of queries]"] = th.unreachable_min_share_pct
        if url:
            ev["server"] = url
        out.append(Finding(
            "LLM_UNREACHABLE", "error",
            f"{where} could not be reached for the whole run: it was down, so every decision was RL-only", ev,
            (f"start the server at {url} (e.g. python -m llama_cpp.server --model M.gguf --port PORT) or correct "
             "llm.openai.base_url, check it with `hybrid-trader llm ask`, then re-run" if url else
             f"check that the {backend} back end can start (`hybrid-trader llm ask`), then re-run"),
        ))
    if auth or down:
        return out
    high = [h for h in health
            if h.queries >= th.min_llm_queries_for_rate and h.error_rate_pct > th.max_llm_error_rate_pct]
    if high:
        worst = max(high, key=lambda h: h.error_rate_pct)
        kind = worst.dominant or "other"
        ev = {}
        for h in high:
            ev[f"error rate [%] ({h.source})"] = h.error_rate_pct
            ev[f"model queries ({h.source})"] = int(h.queries)
        ev["threshold [%]"] = th.max_llm_error_rate_pct
        ev["dominant error kind"] = kind
        ev.update({f"errors: {k}": int(v) for k, v in worst.errors.items() if v})
        out.append(Finding(
            "LLM_ERROR_RATE_HIGH", "error" if worst.error_rate_pct >= 50 else "warning",
            f"{worst.error_rate_pct:.0f} % of the LLM queries failed ({worst.source}), mostly {kind}: those "
            "decisions had no advice", ev, ERROR_KIND_FIXES.get(kind, ERROR_KIND_FIXES["other"]).format(where=where),
        ))
    return out


ERROR_KIND_FIXES: dict[str, str] = {
    "timeout": "{where} answers too slowly: raise llm.openai.request_timeout_s / llm.batching.timeout_s, use a "
               "smaller or faster model (a GPU), or fewer environments",
    "http_5xx": "{where} fails internally (HTTP 5xx): read the server's log (out of memory, context too long), "
                "restart it, or lower llm.openai.parallel_requests",
    "http_4xx": "{where} rejects the requests (HTTP 4xx): check llm.openai.model against its /v1/models list and "
                "llm.openai.scoring_endpoint (completions needs logprobs support)",
    "garbage": "{where} does not answer OpenAI JSON: llm.openai.base_url must end with /v1 and point at the "
               "server itself, not a proxy's error page",
    "parse": "the model's written answers name no action: use scoring mode (llm.mode: score), or a larger model",
    "connection": "{where} dropped connections during the run: check that it stays up (memory, restarts) and "
                  "its address llm.openai.base_url",
    "auth": "{where} refused the API key: export the variable named in llm.openai.api_key_env",
    "other": "{where} raised errors: run `hybrid-trader llm ask` to see the message, and read the training log",
}
"""The fix of LLM_ERROR_RATE_HIGH for each dominant error kind."""


def _llm_logged(run: RunView) -> bool:
    return any(k.startswith(("llm/", "confidence/llm", "fusion/")) for r in run.recent for k in r)


def _query_rate(run: RunView, th: Thresholds) -> tuple[bool, dict[str, Any]]:
    """Whether the query rate is low, and its evidence."""
    q = _values(run.recent, "llm/query_rate_pct")
    qc = _values(run.recent, "llm/configured_query_rate_pct")
    ev: dict[str, Any] = {"query rate [%]": _mean(q)}
    if qc:
        ev["configured query rate [%]"] = _mean(qc)
        ev["min ratio"] = th.min_query_rate_ratio
        return _mean(q) < th.min_query_rate_ratio * _mean(qc), ev
    ev["threshold [%]"] = th.min_query_rate_pct
    return _mean(q) < th.min_query_rate_pct, ev


def _confidence_low(run: RunView, th: Thresholds) -> bool:
    conf = _values(run.recent, "confidence/llm_avg")
    return bool(conf) and _mean(conf) < th.min_llm_confidence


def check_llm_query_rate(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        phase = (run.status or {}).get("phase")
        return Skip("phase 3 but no llm/, confidence/ or fusion/ keys logged" if phase == 3 else None)
    recent = run.recent
    if not _values(recent, "llm/query_rate_pct"):
        return Skip("llm/query_rate_pct not logged")
    low, ev = _query_rate(run, th)
    if not low or _unreachable(run, th) or _auth_failed(run, th):
        return []  # a dead server or a refused key explains the rate: LLM_UNREACHABLE / LLM_AUTH_FAILED say so
    lag = _values(recent, "llm/answer_lag_steps")
    max_age = _values(recent, "llm/max_advice_age_steps")
    slow_model = bool(lag) and _mean(lag) > (_mean(max_age) if max_age else th.max_advice_age_steps)
    if slow_model:
        ev["model answer lag (mean) [steps]"] = _mean(lag)
    backend, _ = _server(run)
    if not slow_model:
        fix = ("lower the query interval and cooldown, lower the RL-confidence threshold that triggers a query, and "
               "check that queries are not dropped (timeouts, a full queue)")
    elif backend == "openai":  # never suggest the back end already in use
        fix = ("the model is the bottleneck: the server answers a batch while training takes hundreds of steps; "
               "serve a smaller model or use a GPU server, raise llm.openai.parallel_requests, or use fewer "
               "environments")
    else:
        fix = ("the model is the bottleneck: it answers a batch while training takes hundreds of steps; use a GPU "
               "(llm.transformers.device: cuda), a served model (--llm openai), or fewer environments")
    return [Finding("LLM_QUERY_RATE_LOW", "error", "the LLM is asked far less often than intended, so it cannot help",
                    ev, fix)]


def check_llm_confidence(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    conf = _values(run.recent, "confidence/llm_avg")
    if not conf:
        return Skip("confidence/llm_avg not logged")
    if not _confidence_low(run, th):
        return []
    abstain = _values(run.recent, "llm/abstain_rate_pct")
    return [Finding(
        "LLM_CONFIDENCE_NEAR_ZERO", "error", "the LLM's confidence is near zero: it is effectively abstaining",
        {"LLM confidence (mean)": _mean(conf), "threshold": th.min_llm_confidence,
         **({"abstain rate [%]": _mean(abstain)} if abstain else {})},
        "use scoring mode (log-probabilities of the action names) rather than parsed generations, shorten the "
        "prompt, check the answers in the LLM log (e.g. 'HOLD | 0.0'), or try another model",
    )]


def check_llm_agreement(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    recent = run.recent
    agree = _values(recent, "fusion/agreement_pct")
    if not agree:
        return Skip("fusion/agreement_pct not logged")
    abstain = _values(recent, "llm/abstain_rate_pct")
    conf = _values(recent, "confidence/llm_avg")
    q = _values(recent, "llm/query_rate_pct")
    query_low = bool(q) and _query_rate(run, th)[0]
    abstaining = (abstain and _mean(abstain) >= th.high_abstain_pct) or _confidence_low(run, th) or query_low
    if not (_mean(agree) >= th.high_agreement_pct and abstaining):
        return []
    ev: dict[str, Any] = {"agreement [%]": _mean(agree), "high agreement threshold [%]": th.high_agreement_pct}
    if abstain:
        ev["abstain rate [%]"] = _mean(abstain)
    if conf:
        ev["LLM confidence (mean)"] = _mean(conf)
    if q:
        ev["query rate [%]"] = _mean(q)
    return [Finding(
        "LLM_AGREEMENT_FROM_ABSTENTION", "warning",
        "RL and LLM agree almost always, but only because the LLM abstains or is rarely asked",
        ev,
        "do not read the agreement as the LLM endorsing the policy: fix the abstentions (timeouts, parse "
        "failures, confidence) and compare against the RL-only ablation",
    )]


def check_llm_advice_age(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if not _llm_logged(run):
        return Skip(None)
    recent = run.recent
    age = _values(recent, "llm/advice_age_mean_steps")
    lag = _values(recent, "llm/answer_lag_steps")
    max_age = _values(recent, "llm/max_advice_age_steps")
    if not (age or lag):
        return Skip("llm/advice_age_mean_steps not logged")
    ev: dict[str, Any] = {"advice age (mean) [steps]": _mean(age)} if age else {}
    if max_age and _mean(max_age) > 0:
        limit = th.max_advice_age_ratio * _mean(max_age)
        ev["configured max age [steps]"] = _mean(max_age)
    else:
        limit = th.max_advice_age_steps
    ev["threshold [steps]"] = limit
    # a model slower than the maximum age: its answers expire before they are read
    too_slow = bool(lag) and _mean(lag) > (_mean(max_age) if max_age and _mean(max_age) > 0 else limit)
    if lag:
        ev["model answer lag (mean) [steps]"] = _mean(lag)
    if not ((age and _mean(age) > limit) or too_slow):
        return []
    return [Finding(
        "LLM_ADVICE_STALE", "warning",
        "LLM advice arrives many steps after it was asked for" + (
            ": the model answers more slowly than the maximum age, so most answers expire unread"
            if too_slow else ""),
        ev,
        "make answers faster: batch more queries, use scoring mode or fewer max_new_tokens, a smaller model, "
        "a GPU or a faster server; or fewer environments; or allow older advice (llm.batching.max_age_steps)",
    )]


# ---------------------------------------------------------------------------------------
# Checks: evaluation
# ---------------------------------------------------------------------------------------
HYBRID_COLUMN = "hybrid"
"""eval/ablation.json column of the hybrid agent: the first whose name starts with this (case-insensitive)."""
RL_ONLY_COLUMN = "rl only"
"""eval/ablation.json column of the RL-only ablation: the first whose name starts with this."""


def _column(table: Mapping[str, Any], prefix: str) -> tuple[str, Mapping[str, Any]] | None:
    for name, metrics in table.items():
        if str(name).lower().startswith(prefix) and isinstance(metrics, Mapping):
            return str(name), metrics
    return None


def _same(a: Any, b: Any, rel_tol: float) -> bool | None:
    """Equal figures (None: not comparable)."""
    if isinstance(a, dict) and isinstance(b, dict):  # aggregated over seeds
        a, b = a.get("mean"), b.get("mean")
    x, y = _number(a), _number(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=rel_tol, abs_tol=rel_tol)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return None


def _no_effect_reason(run: RunView) -> tuple[str, str, dict[str, Any]]:
    """Why the advice changed nothing: (reason, fix, evidence), from the evaluation's LLM figures and the logs."""
    ev: dict[str, Any] = {}
    weights = [_number(llm.get("LLM weight")) for llm in run.eval_llm.values()]
    weights = [w for w in weights if w is not None]
    if not weights and run.config is not None and run.config.fusion.strategy == "prior":
        weights = [float(run.config.fusion.llm_weight)]
    opened = [h for h in llm_health(run) if h.circuit_opened or (h.queries and h.failed >= h.queries)]
    advised = [_number(llm.get("Advised decisions [%]")) for llm in run.eval_llm.values()]
    advised = [a for a in advised if a is not None]
    if opened:
        h = opened[0]
        ev.update({f"failed queries ({h.source})": int(h.failed), f"model queries ({h.source})": int(h.queries),
                   f"circuit opened ({h.source})": int(h.circuit_opened), "dominant error kind": h.dominant})
        return ("the LLM server failed and the circuit opened, so the hybrid agent decided RL-only",
                "fix the LLM server (see LLM_UNREACHABLE / LLM_AUTH_FAILED / LLM_ERROR_RATE_HIGH), then evaluate "
                "again: these figures are RL-only", ev)
    if weights and all(w == 0 for w in weights):
        ev["LLM weight"] = weights[0]
        return ("the LLM weight is 0, so the advice cannot change a decision",
                "set fusion.llm_weight above 0 (or use fusion.strategy: rules) and evaluate again", ev)
    if advised and all(a == 0 for a in advised):
        ev["advised decisions [%]"] = advised[0]
        return ("no advice arrived: every decision was taken without an answer from the LLM",
                "check the LLM server and its log (`hybrid-trader llm ask`), the query policy (llm.query) and "
                "timeouts (llm.batching.timeout_s); then evaluate again", ev)
    return ("the advice arrived but never changed a decision",
            "the prior is too weak against the RL logits: raise fusion.llm_weight, try fusion.strategy: rules, or "
            "accept that the LLM adds nothing for this policy", ev)


def check_hybrid_vs_rl_only(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    if run.ablation is None:
        return Skip(None)
    hybrid, rl_only = _column(run.ablation, HYBRID_COLUMN), _column(run.ablation, RL_ONLY_COLUMN)
    if hybrid is None or rl_only is None:
        return Skip("eval/ablation.json has no hybrid and RL-only columns")
    (h_name, h), (r_name, r) = hybrid, rl_only
    compared = [(k, _same(h[k], r[k], th.hybrid_equal_rel_tol)) for k in h if k in r]
    compared = [(k, same) for k, same in compared if same is not None]
    if not compared or not all(same for _, same in compared):
        return []
    reason, fix, ev = _no_effect_reason(run)
    evidence: dict[str, Any] = {"figures compared": len(compared), "columns": f"{h_name} vs {r_name}"}
    for key in ("Net PnL [$]", "Trades", "Sharpe (ann.)"):
        if key in h:
            evidence[f"{key} (both)"] = h[key]
    evidence.update(ev)
    return [Finding("HYBRID_EQUALS_RL_ONLY", "error",
                    f"the hybrid agent's evaluation equals the RL-only ablation in every figure: {reason}",
                    evidence, fix)]


STUDENT_AGREEMENT = "Top-1 agreement [%]"
"""The fidelity figure of ``student_metrics.json`` (written by ``hybrid-trader advise distill``) that is checked."""


def check_student_fidelity(run: RunView, th: Thresholds) -> list[Finding] | Skip:
    """A run advised by the distilled student: its top-1 agreement with the LLM on held-out days."""
    llm = run.llm
    if llm is None or llm.backend != "student":
        return Skip(None)
    if not llm.student.path:
        return Skip("llm.student.path is empty")
    path = Path(llm.student.path).with_name("student_metrics.json")
    if not path.is_file():
        return Skip(f"{path} not found (written by hybrid-trader advise distill)")
    try:
        metrics = json.loads(path.read_text()).get("metrics", {})
    except (OSError, ValueError, AttributeError) as err:
        return Skip(f"{path} is not readable JSON ({type(err).__name__})")
    # test days when collected (never used while distilling), else the validation days
    split = next((s for s in ("test", "val") if isinstance(metrics.get(s), dict) and STUDENT_AGREEMENT in metrics[s]),
                 None)
    if split is None:
        return Skip(f"{path} has no held-out {STUDENT_AGREEMENT!r}")
    agree = float(metrics[split][STUDENT_AGREEMENT])
    if agree >= th.min_student_agreement_pct:
        return []
    ev: dict[str, Any] = {f"top-1 agreement on {split} days [%]": agree, "threshold [%]": th.min_student_agreement_pct,
                          "student": str(llm.student.path)}
    for key in ("Majority baseline [%]", "Mean KL [nats]", "Rows"):
        if key in metrics[split]:
            ev[key] = metrics[split][key]
    run_dir = Path(llm.student.path).parent.parent
    return [Finding(
        "STUDENT_FIDELITY_LOW", "error",
        "the distilled student often advises otherwise than the LLM it stands for, so its advice is not the LLM's",
        ev, f"collect more advice (hybrid-trader advise collect {run_dir} --sampled 2, and the val split) and "
            f"distil longer or wider (hybrid-trader advise distill {run_dir} --epochs N); check with "
            f"hybrid-trader advise compare {run_dir}",
    )]


# ---------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------
CHECKS: tuple[Check, ...] = (
    Check("final checkpoint", ("NO_FINAL_CHECKPOINT",), check_final_checkpoint),
    Check("training log", ("NO_TRAINING_LOG",), check_training_log),
    Check("policy change", ("POLICY_NOT_CHANGING",), check_policy_change, training_log=True),
    Check("value function", ("WEAK_VALUE_FUNCTION",), check_value_function, training_log=True),
    Check("episode length", ("SHORT_EPISODES",), check_episode_length, training_log=True),
    Check("LLM server", ("LLM_AUTH_FAILED", "LLM_UNREACHABLE", "LLM_ERROR_RATE_HIGH"), check_llm_server),
    Check("LLM query rate", ("LLM_QUERY_RATE_LOW",), check_llm_query_rate, training_log=True),
    Check("LLM confidence", ("LLM_CONFIDENCE_NEAR_ZERO",), check_llm_confidence, training_log=True),
    Check("LLM agreement", ("LLM_AGREEMENT_FROM_ABSTENTION",), check_llm_agreement, training_log=True),
    Check("LLM advice age", ("LLM_ADVICE_STALE",), check_llm_advice_age, training_log=True),
    Check("trading rate", ("NEVER_TRADES", "OVERTRADING"), check_trading_rate),
    Check("train/validation gap", ("TRAIN_VAL_GAP",), check_train_val_gap),
    Check("hybrid vs RL-only", ("HYBRID_EQUALS_RL_ONLY",), check_hybrid_vs_rl_only),
    Check("student fidelity", ("STUDENT_FIDELITY_LOW",), check_student_fidelity),
)
"""Every check, in the order they run; each code of :data:`CODES` belongs to exactly one."""
