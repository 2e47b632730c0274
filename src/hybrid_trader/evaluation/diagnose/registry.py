"""The registry of checks and the entry points: :func:`diagnose`, :func:`diagnose_run`."""

from __future__ import annotations

from pathlib import Path

from hybrid_trader.evaluation.diagnose.findings import (
    Diagnosis,
    Finding,
    RunCheck,
    Skip,
    Thresholds,
    read_run,
)
from hybrid_trader.evaluation.diagnose.llm_checks import (
    check_hybrid_vs_rl_only,
    check_llm_advice_age,
    check_llm_agreement,
    check_llm_confidence,
    check_llm_query_rate,
    check_llm_server,
    check_student_constant,
    check_student_fidelity,
)
from hybrid_trader.evaluation.diagnose.training_checks import (
    check_episode_length,
    check_final_checkpoint,
    check_policy_change,
    check_trading_rate,
    check_train_val_gap,
    check_training_log,
    check_value_function,
)

# ---------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------
CHECKS: tuple[RunCheck, ...] = (
    RunCheck("final checkpoint", ("NO_FINAL_CHECKPOINT",), check_final_checkpoint),
    RunCheck("training log", ("NO_TRAINING_LOG",), check_training_log),
    RunCheck("policy change", ("POLICY_NOT_CHANGING",), check_policy_change, training_log=True),
    RunCheck("value function", ("WEAK_VALUE_FUNCTION",), check_value_function, training_log=True),
    RunCheck("episode length", ("SHORT_EPISODES",), check_episode_length, training_log=True),
    RunCheck("LLM server", ("LLM_AUTH_FAILED", "LLM_UNREACHABLE", "LLM_ERROR_RATE_HIGH"), check_llm_server),
    RunCheck("LLM query rate", ("LLM_QUERY_RATE_LOW",), check_llm_query_rate, training_log=True),
    RunCheck("LLM confidence", ("LLM_CONFIDENCE_NEAR_ZERO",), check_llm_confidence, training_log=True),
    RunCheck("LLM agreement", ("LLM_AGREEMENT_FROM_ABSTENTION",), check_llm_agreement, training_log=True),
    RunCheck("LLM advice age", ("LLM_ADVICE_STALE",), check_llm_advice_age, training_log=True),
    RunCheck("trading rate", ("NEVER_TRADES", "OVERTRADING"), check_trading_rate),
    RunCheck("train/validation gap", ("TRAIN_VAL_GAP",), check_train_val_gap),
    RunCheck("hybrid vs RL-only", ("HYBRID_EQUALS_RL_ONLY",), check_hybrid_vs_rl_only),
    RunCheck("student fidelity", ("STUDENT_FIDELITY_LOW",), check_student_fidelity),
    RunCheck("constant student", ("STUDENT_CONSTANT",), check_student_constant),
)
"""Every check, in the order they run; each code of :data:`CODES` belongs to exactly one."""


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


