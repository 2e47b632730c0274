"""The hybrid agent: the advice block, the fusion of RL and LLM, and the decision.

One definition of the phase 3 decision, used by training (``HybridMaskablePolicy``
delegates its prior to :mod:`hybrid_trader.agent.fusion`), by evaluation and, next, by
an executor (:class:`~hybrid_trader.agent.hybrid_agent.HybridAgent`).

- :mod:`~hybrid_trader.agent.advice_block`: the advice values appended to a phase 3
  observation, by name (``ADVICE.probs``, ``ADVICE.present``, ...);
- :mod:`~hybrid_trader.agent.fusion`: the logit prior and the four fusion rules, reason codes;
- :mod:`~hybrid_trader.agent.hybrid_agent`: ``HybridAgent.decide(obs, mask, advice) -> Decision``;
- :mod:`~hybrid_trader.agent.stats`: the decision statistics (agreement, override, ...).
"""
