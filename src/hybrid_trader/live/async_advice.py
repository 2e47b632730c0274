"""A phase 3 run's LLM advising the executor asynchronously: a decision never waits past its budget.

Per decision bar, :class:`AsyncAdvisedPolicy`:

1. takes the advice in force (the latest answer, aged by the bars since its question;
   none once it is older than ``llm.batching.max_age_steps``) and decides with it through
   the same ``agent.HybridAgent`` evaluation uses;
2. offers the bar's context to the advisor (``llm.async_advisor.Advisor.submit``: the
   run's query policy decides whether to ask, the cache may answer at once; never blocks);
3. with a budget above 0 ms, waits at most that long for the answer to this bar's
   question and, when it came, decides again with it (age 0).

So with ``budget_ms=0`` the advice a decision uses was asked one or more bars earlier,
and the decision's latency is the policy's alone; the model runs on its own thread.
The context is built by ``llm.context.context_from_market`` from the executor's bars so far
(``data.bars_so_far.BarsSoFar``) and their raw indicators (``features.features_so_far.FeaturesSoFar``,
which keeps :data:`CONTEXT_RAW_KEYS` when an LLM advises), as evaluation builds it from ``Bars`` and
``FeatureSet`` (equal values: the incremental features are the batch ones). A failing back end opens
the advisor's circuit: decisions go on RL-only, and the status line and the summary say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_trader.live.fast_policy import numpy_policy
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.run.advice_identity import RAW

if TYPE_CHECKING:
    from hybrid_trader.agent.hybrid_agent import Decision

CONTEXT_RAW_KEYS = ("atr14", "rsi14", "adx14", "sma20", "sma50", "macd_hist", "vwap", "mom10", "ret_20", "ret_60")
"""The raw indicators ``context_from_market`` reads (the executor keeps these per bar when an LLM advises)."""
WAIT_POLL_S = 0.0005


class AsyncAdvisedPolicy:
    """The hybrid agent with an asynchronous advisor (see the module's docstring); ``policy(obs, mask, executor)``."""

    def __init__(self, model: Any, vec_normalize: Any, advisor: Any, fusion: Any, *, budget_ms: float = 0.0) -> None:
        self.advisor = advisor
        self.budget_s = max(float(budget_ms), 0.0) / 1000.0
        # pulls in torch: only a phase 3 run with an asynchronous LLM gets here
        from hybrid_trader.agent.hybrid_agent import HybridAgent

        max_age = advisor.config.batching.max_age_steps
        self.agent = HybridAgent.from_model(model, vec_normalize, fusion, max_age=max_age, use_llm=True)
        self.step = 0
        self.last_decision: Decision | None = None
        """The latest decision (fused probabilities, rule, advice): the executor journals it."""
        self.asked = 0
        """Questions the advisor took (queued or answered from its cache)."""
        self.fresh = 0
        """Decisions made again with their own bar's answer, inside the budget."""
        advisor.expect_envs(1)  # one stream of questions: a batch need not wait for others

    def __call__(self, obs: np.ndarray, mask: np.ndarray, executor: Any) -> int:
        step = self.step
        decision = self.agent.decide(obs, mask, self.advisor.poll(0, step))
        context = context_from_market(executor.bars, executor.feature_rows, executor.current_index,
                                      executor.account_snapshot(), mask)
        if self.advisor.submit(0, step, context, rl_confidence=decision.rl_confidence):
            self.asked += 1
            answer = self._wait(step)
            if answer is not None:
                self.fresh += 1
                decision = self.agent.decide(obs, mask, answer)
        self.last_decision = decision
        self.step += 1
        return decision.action

    def _wait(self, step: int) -> Any:
        """This step's answer if it comes within the budget (None: decide with what was in force)."""
        deadline = time.perf_counter() + self.budget_s
        while True:
            advice = self.advisor.poll(0, step)
            if advice is not None and advice.step == step:
                return advice
            if time.perf_counter() >= deadline:
                return None
            time.sleep(WAIT_POLL_S)

    def health(self) -> str:
        """'ok', 'circuit open' or 'failing', for the status line."""
        h = self.advisor.health
        if h.circuit_open:
            return "circuit open, RL-only"
        return "failing" if h.consecutive else "ok"

    def close(self) -> None:
        self.advisor.close()


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


def live_policy(config: Any, model: Any, vec: Any, run_dir: Any, *, llm: str = "async",
                budget_ms: float = 0.0, llm_overrides: dict | None = None, calibrate: bool = True,
                say: Any = None) -> LivePolicy:
    """Evaluation's deterministic policy of a run for the executor.

    Phases 1-2: ``AgentPolicy``, through its numpy forward (``live.fast_policy``) where the
    network allows. Phase 3: ``HybridAgentPolicy`` with the run's distilled
    student (every bar advised, synchronously: it is a small network); any other back end
    is asked asynchronously (:class:`AsyncAdvisedPolicy`, with the run's batch calibration)
    unless ``llm='off'``, which decides RL-only. ``llm_overrides``: ``llm.*`` keys over the run's
    (e.g. ``{"mock": {"latency_ms": 50}}``), as ``evaluate`` takes them. A leaning model's calibration is
    the run's, fitted first on its training days when it has none, or, ``calibrate=False``, none: raw advice,
    said in the notes and journaled with every decision (``advise.calibrate.advice_calibration``).
    """
    # the advisor's back ends load torch models of their own: imported for phase 3 only
    from hybrid_trader.evaluation.policies import AgentPolicy, HybridAgentPolicy

    phase = config.env.phase
    if phase != 3:
        agent = AgentPolicy(model, vec)
        fast, why = numpy_policy(agent)  # the same decisions, ~20x faster than torch per call
        notes = [] if fast is not None else [f"the policy runs in torch ({why}: no numpy forward for it)"]
        return LivePolicy(fast or agent, f"none (phase {phase})", notes=notes)
    # phase 3 only: the advisor's back ends load torch models of their own
    from hybrid_trader.advise.calibrate import advice_calibration
    from hybrid_trader.llm import build_advisor

    llm_config = config.llm.in_run()
    if llm_overrides:
        from hybrid_trader.config import merge_overrides  # only with overrides (tests, the bench)

        llm_config = merge_overrides(llm_config, llm_overrides, path="llm")
    if llm_config.backend == "student":
        advisor = build_advisor(llm_config)
        return LivePolicy(HybridAgentPolicy(model, vec, advisor, None, config.fusion, max_samples=0), "student")
    if llm == "off":
        return LivePolicy(HybridAgentPolicy(model, vec, None, None, config.fusion, use_llm=False, max_samples=0),
                          f"off (RL-only; llm.backend {llm_config.backend})",
                          notes=[f"--advisor off: decisions were RL-only (the run's llm.backend {llm_config.backend} "
                                 "was not asked)"])
    choice = advice_calibration(run_dir, llm_config, calibrate=calibrate, say=say or (lambda *a: None))
    advisor = build_advisor(llm_config)
    advisor.answerer.batch_calibration = choice.calibration
    notes = [f"the {llm_config.backend} advice was {choice.label}"] if choice.raw else []
    policy = AsyncAdvisedPolicy(model, vec, advisor, config.fusion, budget_ms=budget_ms)
    label = f"{llm_config.backend} async" + (f", {RAW} advice" if choice.raw else "")
    return LivePolicy(policy, label, CONTEXT_RAW_KEYS,
                      notes, calibration=RAW if choice.raw else "batch" if choice.calibration is not None else "")
