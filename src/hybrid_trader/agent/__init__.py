"""The agent: the advice block, the fusion of RL and LLM, the decision, and the policy's forward in numpy.

One definition of the phase 3 decision, used by training (``HybridMaskablePolicy``
delegates its prior to :mod:`hybrid_trader.agent.fusion`), by evaluation and by the
executor (:class:`~hybrid_trader.agent.hybrid_agent.HybridAgent`, asked through one
:class:`~hybrid_trader.agent.advised.AdvisedPolicy`).

- :mod:`~hybrid_trader.agent.advice_block`: the advice values appended to a phase 3
  observation, by name (``ADVICE.probs``, ``ADVICE.present``, ...);
- :mod:`~hybrid_trader.agent.fusion`: the logit prior and the four fusion rules, reason codes;
- :mod:`~hybrid_trader.agent.hybrid_agent`: ``HybridAgent.decide(obs, mask, advice) -> Decision``;
- :mod:`~hybrid_trader.agent.advised`: ``AdvisedPolicy(agent, advisor, budget_ms)``, the advised decision of
  evaluation (unlimited budget) and of the executor (a finite one);
- :mod:`~hybrid_trader.agent.stats`: the decision statistics (agreement, override, ...);
- :mod:`~hybrid_trader.agent.numpy_forward`: the policy network's forward in numpy (phases 1-2: the
  executor's policy and the trainer's ``fast_math`` rollout).
"""
