"""One advised decision: the phase 3 agent and its advisor, per bar, in evaluation and in the executor.

:class:`AdvisedPolicy` ``(obs, mask, view) -> action``, for each decision bar:

1. decides with the advice in force (the latest answer, aged by the steps since its question; none
   once it is older than ``llm.batching.max_age_steps``) through ``agent.HybridAgent.decide``;
2. offers the bar's context to the advisor, whose query policy decides whether to ask (the RL
   confidence it reads is that decision's), the cache answering at once when it can;
3. when it asked and the answer came in time, decides again with it (age 0).

**The budget** is how long a decision waits for its own bar's answer. Unlimited (``budget_ms=None``,
evaluation): it waits as long as the answer takes; the question is answered in the caller's thread
(``Advisor.advise_now``), so every decision a query policy asks about is made with its answer, and the
decisions are reproducible. Finite (the executor, ``run --llm-budget-ms``): the question goes to the
advisor's worker thread (``Advisor.submit``, never blocking) and the decision waits at most that long
for the answer (``0``: not at all: the advice a decision uses was asked one or more bars earlier). A
failing back end opens the advisor's circuit: decisions go on RL-only.

**Always on** (a back end with ``advise_batch``: the distilled student) every decision is advised, on the
raw observation and the legal actions, age 0, as in training, whatever the budget. Without an advisor
(or ``use_llm=False``, the RL-only ablation) the agent decides alone.

The context of a question is the bar's (``llm.context.context_from_market``) read from the ``view``
the policy is called with: :func:`env_context` reads a ``TradingEnv``'s bars and features; the
executor passes its own reader of the bars and features so far (equal values bar for bar).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_trader.agent.fusion import FusionConfig
from hybrid_trader.llm.advice import Advice
from hybrid_trader.llm.context import AdvisorContext, context_from_market

if TYPE_CHECKING:
    from hybrid_trader.agent.hybrid_agent import Decision, HybridAgent

WAIT_POLL_S = 0.0005
"""How often a decision with a finite budget looks for its answer [s]."""

ContextOf = Callable[[Any, np.ndarray], AdvisorContext]
"""``(view, mask) -> the advisor's context of the view's current bar``."""


def env_context(view: Any, mask: np.ndarray) -> AdvisorContext:
    """The context of a ``TradingEnv``'s current bar (its bars, features and account)."""
    return context_from_market(view.bars, view.features, view.current_index, view.account_snapshot(), mask)


class AdvisedPolicy:
    """The hybrid agent with its advisor and a budget (see the module's docstring); ``policy(obs, mask, view)``."""

    def __init__(self, agent: HybridAgent, advisor: Any, budget_ms: float | None = None, *,
                 context: ContextOf = env_context) -> None:
        self.agent = agent
        self.advisor: Any = advisor if agent.use_llm else None
        """The ``llm.async_advisor.Advisor`` (None: RL-only)."""
        self.budget_s = None if budget_ms is None else max(float(budget_ms), 0.0) / 1000.0
        """How long a decision waits for its own answer [s] (None: as long as it takes, in this thread)."""
        self.context = context
        backend = getattr(self.advisor, "backend", None)
        self.advise_batch = getattr(backend, "advise_batch", None)
        """Always on: the back end's batched advice (the student); None: the query policy decides."""
        student = getattr(backend, "student", None)
        self.student_dim = int(student.obs_dim) if student is not None else 0
        self.step = 0
        self.advice: Advice | None = None
        """The latest answer (an unlimited budget keeps it here; a finite one in the advisor's slot)."""
        self.last_decision: Decision | None = None
        """The latest decision (fused probabilities, rule, advice): evaluation records it, the executor journals it."""
        self.asked = 0
        """Questions the advisor took (answered, queued, or from its cache); always on: every decision."""
        self.fresh = 0
        """Decisions made again with their own bar's answer (a finite budget: inside it)."""
        if self.asynchronous:
            advisor.expect_envs(1)  # one stream of questions: a batch need not wait for others

    @classmethod
    def of_model(cls, model: Any, vec_normalize: Any, advisor: Any, fusion: FusionConfig, *,
                 budget_ms: float | None = None, use_llm: bool = True,
                 context: ContextOf = env_context) -> AdvisedPolicy:
        """The advised policy of a trained phase 3 model (``MaskablePPO``) and its ``VecNormalize`` (or None)."""
        # loads torch (the agent runs the network in it): the executor imports this module without it (phases 1-2)
        from hybrid_trader.agent.hybrid_agent import HybridAgent

        max_age = advisor.config.batching.max_age_steps if advisor is not None else 0
        agent = HybridAgent.from_model(model, vec_normalize, fusion, max_age=max_age, use_llm=use_llm)
        return cls(agent, advisor, budget_ms, context=context)

    @property
    def asynchronous(self) -> bool:
        """Questions go to the advisor's worker, a decision waiting at most the budget (a finite budget, not always
        on)."""
        return self.advisor is not None and self.advise_batch is None and self.budget_s is not None

    def __call__(self, obs: np.ndarray, mask: np.ndarray, view: Any) -> int:
        return self.decide(obs, mask, view).action

    def decide(self, obs: np.ndarray, mask: np.ndarray, view: Any) -> Decision:
        """The decision on ``view``'s current bar (``obs``: its observation, unnormalised; ``mask``: legal actions)."""
        step = self.step
        if self.advise_batch is not None:
            self.advice = self._always_on(obs, mask, step)
            self.asked += 1
            decision = self.agent.decide(obs, mask, self.advice.with_age(step))
        else:
            decision = self.agent.decide(obs, mask, self._in_force(step))
            if self.advisor is not None:
                answer = self._ask(step, self.context(view, mask), decision.rl_confidence)
                if answer is not None:
                    self.fresh += 1
                    decision = self.agent.decide(obs, mask, answer)
        self.last_decision = decision
        self.step += 1
        return decision

    def _always_on(self, obs: np.ndarray, mask: np.ndarray, step: int) -> Advice:
        assert self.advise_batch is not None
        probs, conf = self.advise_batch(np.asarray(obs, dtype=np.float32)[None, :self.student_dim],
                                        np.asarray(mask, dtype=bool)[None])
        p = probs[0]
        return Advice(probs=p, action=int(np.argmax(p)), confidence=float(conf[0]), coverage=1.0,
                      backend="student", step=step)

    def _in_force(self, step: int) -> Advice | None:
        """The latest answer aged to ``step`` (the agent drops it once too old); None: none yet."""
        if self.asynchronous:
            return self.advisor.poll(0, step)
        return None if self.advice is None else self.advice.with_age(step)

    def _ask(self, step: int, context: AdvisorContext, rl_confidence: float) -> Advice | None:
        """Offer ``context``; this step's answer if the advisor was asked and answered within the budget."""
        advisor = self.advisor
        if not self.asynchronous:
            if not advisor.should_query(0, step, context, rl_confidence):
                return None
            advisor.policy.mark(0, step, context)
            self.advice = advisor.advise_now([context], use_cache=True, env_index=0, step=step)[0]
            self.asked += 1
            return self.advice.with_age(step)
        if not advisor.submit(0, step, context, rl_confidence=rl_confidence):
            return None
        self.asked += 1
        assert self.budget_s is not None
        deadline = time.perf_counter() + self.budget_s
        while True:
            advice = advisor.poll(0, step)
            if advice is not None and advice.step == step:
                return advice
            if time.perf_counter() >= deadline:
                return None
            time.sleep(WAIT_POLL_S)

    def health(self) -> str:
        """'ok', 'circuit open, RL-only' or 'failing', for the executor's status line."""
        h = self.advisor.health if self.advisor is not None else None
        if h is None:
            return "ok"
        if h.circuit_open:
            return "circuit open, RL-only"
        return "failing" if h.consecutive else "ok"

    def close(self) -> None:
        """Close the advisor (its worker and back end)."""
        if self.advisor is not None:
            self.advisor.close()
