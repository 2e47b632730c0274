"""What diagnose finds and reads: codes, thresholds, findings, and the run as the checks see it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from hybrid_trader.config import load_yaml_config, read_yaml
from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.rundir import ABLATION, CONFIG, EVAL, PROGRESS, RESULTS, STATUS, VALIDATION

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
    "STUDENT_CONSTANT": "the distilled student's top action is the same in nearly every flat state",
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
    max_student_flat_top_pct: float = 90.0
    """STUDENT_CONSTANT when the student's most frequent top action is its top action in more than this share of
    the flat states of held-out days [%]."""


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
def read_run_log(path: Path, notes: list[str]) -> list[dict[str, Any]]:
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
class RunCheck:
    """One check of a run: an entry of the diagnose registry (``registry.CHECKS``)."""

    name: str
    """Listed in ``Diagnosis.checked`` (and before the reason in ``skipped``)."""
    codes: tuple[str, ...]
    """The finding codes it can report."""
    run: CheckFn
    training_log: bool = False
    """Needs at least ``Thresholds.min_updates`` logged PPO updates (otherwise not run)."""


def _read_config(rd: Path, notes: list[str]) -> tuple[RunConfig | None, Mapping[str, Any] | None]:
    path = rd / CONFIG
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
    root = rd / EVAL
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
        index = split_dir / RESULTS
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
    known = (STATUS, PROGRESS, VALIDATION, CONFIG, EVAL)
    if not any((rd / k).exists() for k in known):
        raise UserError("not a run directory: none of " + ", ".join(known) + " is in it", file=str(rd),
                        fix="give the --out folder of `hybrid-trader train`")
    status = _read_json_file(rd / STATUS) if (rd / STATUS).is_file() else None
    if status is not None and not isinstance(status, dict):
        raise UserError("status.json is not a JSON object", file=str(rd / STATUS))
    progress = read_run_log(rd / PROGRESS, notes) if (rd / PROGRESS).is_file() else []
    validation = read_run_log(rd / VALIDATION, notes) if (rd / VALIDATION).is_file() else []
    config, raw = _read_config(rd, notes)
    evals, eval_llm = _eval_agent(rd)
    ablation_path = rd / EVAL / ABLATION
    ablation = _read_json_file(ablation_path) if ablation_path.is_file() else None
    return RunView(rd, status, progress, validation, progress[-th.recent_updates:], len(progress) >= th.min_updates,
                   config, raw, evals, eval_llm, ablation if isinstance(ablation, dict) else None)


