"""The executor's policy: the run's deterministic policy as evaluation decides it, and what the status line says.

Phases 1-2: ``evaluation.policies.AgentPolicy`` through the numpy forward (``live.fast_policy``) where the network
allows. Phase 3: the one advised decision (``agent.advised.AdvisedPolicy``) with the run's advisor
(``run.advisor.run_advisor``): its distilled student (always on: every bar advised, synchronously), any other back
end asked asynchronously, a decision waiting at most ``--llm-budget-ms`` for its own bar's answer, or none
(``--advisor off``: RL-only).

An asynchronous advisor's context is built by ``llm.context.context_from_market`` from the executor's bars so far
(``data.bars_so_far.BarsSoFar``) and their raw indicators (``features.features_so_far.FeaturesSoFar``, which keeps
:data:`CONTEXT_RAW_KEYS` when an LLM advises), as evaluation builds it from ``Bars`` and ``FeatureSet`` (equal
values: the incremental features are the batch ones). A failing back end opens the advisor's circuit: decisions go
on RL-only, and the status line and the summary say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from hybrid_trader.live.executor_parts import ExecutorOptions
from hybrid_trader.live.fast_policy import numpy_policy
from hybrid_trader.llm.context import AdvisorContext, context_from_market
from hybrid_trader.run.advice_identity import RAW
from hybrid_trader.run.advisor import run_llm_config

CONTEXT_RAW_KEYS = ("atr14", "rsi14", "adx14", "sma20", "sma50", "macd_hist", "vwap", "mom10", "ret_20", "ret_60")
"""The raw indicators ``context_from_market`` reads (the executor keeps these per bar when an LLM advises)."""


def executor_context(executor: Any, mask: np.ndarray) -> AdvisorContext:
    """The advisor's context of the executor's current bar (its bars and features so far, its account)."""
    return context_from_market(executor.bars, executor.feature_rows, executor.current_index,
                               executor.account_snapshot(), mask)


@dataclass
class LivePolicy:
    """The executor's policy and what the status line and the summary say of its advice."""

    policy: Any
    label: str
    """'none (phase 2)', 'student', '<backend> async', or 'off (...)'."""
    raw_keys: tuple[str, ...] = ()
    """The raw indicators the asynchronous advisor's contexts read, kept per bar (none: no LLM asked)."""
    notes: list[str] = field(default_factory=list)
    calibration: str = ""
    """What divides the asynchronous LLM's answers, journaled with each decision's advice: ``batch``, ``raw``
    (a leaning model's undivided answers, ``--no-calibrate``) or '' (no LLM, or one without a lean)."""


def live_policy(config: Any, model: Any, vec: Any, run_dir: Any, options: ExecutorOptions | None = None,
                say: Any = None) -> LivePolicy:
    """Evaluation's deterministic policy of a run for the executor.

    Phases 1-2: ``AgentPolicy``, through its numpy forward (``live.fast_policy``) where the
    network allows. Phase 3: ``agent.advised.AdvisedPolicy`` with the run's advisor: its distilled
    student (every bar advised, synchronously: it is a small network); any other back end
    asked asynchronously (``options.llm_budget_ms``, with the run's batch calibration)
    unless ``options.llm='off'``, which decides RL-only. ``options.llm_overrides``: ``llm.*`` keys over the run's
    (e.g. ``{"mock": {"latency_ms": 50}}``), as ``evaluate`` takes them. A leaning model's calibration is
    the run's, fitted first on its training days when it has none, or, ``options.calibrate=False``, none: raw
    advice, said in the notes and journaled with every decision (``advise.calibrate.advice_calibration``).
    """
    options = options or ExecutorOptions()
    llm, budget_ms, llm_overrides = options.llm, options.llm_budget_ms, options.llm_overrides
    # loads torch and SB3 (a run's model is loaded already)
    from hybrid_trader.evaluation.policies import AgentPolicy

    phase = config.env.phase
    if phase != 3:
        agent = AgentPolicy(model, vec)
        fast, why = numpy_policy(agent)  # the same decisions, ~20x faster than torch per call
        notes = [] if fast is not None else [f"the policy runs in torch ({why}: no numpy forward for it)"]
        return LivePolicy(fast or agent, f"none (phase {phase})", notes=notes)
    # phase 3 only: the advised decision runs the network in torch, the advisor's back ends load models of their own
    from hybrid_trader.advise.calibrate import advice_calibration
    from hybrid_trader.agent.advised import AdvisedPolicy
    from hybrid_trader.run.advisor import run_advisor

    backend = run_llm_config(config, llm_overrides).backend
    if llm == "off" and backend != "student":
        return LivePolicy(AdvisedPolicy.of_model(model, vec, None, config.fusion, use_llm=False),
                          f"off (RL-only; llm.backend {backend})",
                          notes=[f"--advisor off: decisions were RL-only (the run's llm.backend {backend} "
                                 "was not asked)"])
    made = run_advisor(config, llm_overrides, homes=[run_dir],
                       calibrate=partial(advice_calibration, calibrate=options.calibrate), say=say or (lambda *a: None))
    policy = AdvisedPolicy.of_model(model, vec, made.advisor, config.fusion, budget_ms=budget_ms,
                                    context=executor_context)
    if not policy.asynchronous:
        return LivePolicy(policy, "student")
    choice = made.calibration
    notes = [f"the {backend} advice was {choice.label}"] if choice.raw else []
    label = f"{backend} async" + (f", {RAW} advice" if choice.raw else "")
    return LivePolicy(policy, label, CONTEXT_RAW_KEYS,
                      notes, calibration=RAW if choice.raw else "batch" if choice.calibration is not None else "")
