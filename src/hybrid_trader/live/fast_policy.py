"""The executor's policy for phases 1-2 in numpy: the run's actor without torch's per-call overhead.

``evaluation.policies.AgentPolicy`` asks SB3 (``model.predict``) for one observation at a
time: about 0.5 ms of tensor conversions, module calls and a masked ``Categorical`` per
decision. :class:`NumpyAgentPolicy` runs the same network on the same input through the one
numpy forward (``agent.numpy_forward.NumpyMLP``, float32):

* the observation is normalised by the run's own normaliser (``vec.normalize_obs``,
  unchanged: the statistics are not folded into the first layer, whose clip at
  ``clip_obs`` a fold could not reproduce), then the actor's layers
  (``agent.numpy_forward.actor_layers``: ``mlp_extractor.policy_net`` and ``action_net``);
* the masked distribution is the softmax of the legal logits (SB3 sets the others to
  -1e8, i.e. probability 0); the decision is its argmax.

Matrix products sum in another order than torch's, so the logits agree to float32
rounding (~2e-8 on the 128 x 128 default), not bit for bit. The decision stays torch's exactly: when the two best
legal logits are closer than :data:`TIE_GAP`, far above that rounding, the decision and
its probabilities come from the torch policy (``fallbacks`` counts them). Architectures
the forward does not cover are left to torch (:func:`numpy_policy` returns None with the reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid_trader.agent.numpy_forward import Layer, NumpyMLP, actor_layers

if TYPE_CHECKING:
    from hybrid_trader.evaluation.policies import AgentPolicy

TIE_GAP = 1e-4
"""Best minus second-best legal logit at or below which torch decides (numpy vs torch logits: ~2e-8 apart)."""


def numpy_policy(agent: AgentPolicy) -> tuple[NumpyAgentPolicy | None, str]:
    """``(the numpy policy, "")`` for a deterministic ``AgentPolicy`` whose network is supported, else
    ``(None, why)``: the caller keeps ``agent`` (torch)."""
    if not agent.deterministic:
        return None, "a stochastic policy"
    layers = actor_layers(agent.model.policy)
    if isinstance(layers, str):
        return None, layers
    return NumpyAgentPolicy(agent, layers), ""


class NumpyAgentPolicy:
    """``AgentPolicy``'s deterministic masked decision, forward in numpy; torch decides near-ties.

    After each call, :attr:`last_probs` holds the masked probabilities of that decision (float64 from the
    float32 logits; torch's own, float32, when torch decided: the executor journals them).
    """

    def __init__(self, agent: Any, layers: list[Layer]) -> None:
        """``agent``: an ``AgentPolicy`` or what stands for one (``normalize``, ``name``, ``result_extra``, and the
        call that decides a near-tie in torch: ``live.policy_cache.LazyAgent`` loads torch only then)."""
        self.agent = agent
        self.actor = NumpyMLP(layers)
        """The actor's forward (``actor.spec``: its layers, which ``live.policy_cache`` writes)."""
        self.name = agent.name
        self.result_extra = agent.result_extra
        self.last_probs: np.ndarray | None = None
        self.calls = 0
        self.fallbacks = 0
        """Decisions left to torch (best two legal logits within ``TIE_GAP``, or no legal action)."""

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The actor's logits (float32) of one raw observation."""
        return self.actor(np.asarray(self.agent.normalize(obs), dtype=np.float32))

    def __call__(self, obs: np.ndarray, mask: np.ndarray, env: Any) -> int:
        self.calls += 1
        logits = self.logits(obs).astype(np.float64)
        legal = np.asarray(mask, dtype=bool)
        if legal.sum() >= 1:
            masked = np.where(legal, logits, -np.inf)
            best = int(np.argmax(masked))
            second = np.max(np.delete(masked, best)) if len(masked) > 1 else -np.inf
            if masked[best] - second > TIE_GAP:
                e = np.where(legal, np.exp(masked - masked[best]), 0.0)
                self.last_probs = e / e.sum()
                return best
        self.fallbacks += 1
        action = int(self.agent(obs, mask, env))
        self.last_probs = self.agent.last_probs  # SB3's distribution of the decision it made
        return action
