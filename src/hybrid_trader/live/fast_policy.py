"""The executor's policy forward in numpy: the run's actor MLP without torch's per-call overhead.

``evaluation.policies.AgentPolicy`` asks SB3 (``model.predict``) for one observation at a
time: about 0.5 ms of tensor conversions, module calls and a masked ``Categorical`` per
decision, and the executor asked torch once more for the journaled probabilities.
:class:`NumpyAgentPolicy` runs the same network on the same input in numpy (float32):

* the observation is normalised by the run's own normaliser (``vec.normalize_obs``,
  unchanged: the statistics are not folded into the first layer, whose clip at
  ``clip_obs`` a fold could not reproduce), then ``Linear`` / activation layers of
  ``mlp_extractor.policy_net`` and ``action_net``, as float32 matrix products;
* the masked distribution is the softmax of the legal logits (SB3 sets the others to
  -1e8, i.e. probability 0); the decision is its argmax.

Matrix products sum in another order than torch's, so the logits agree to float32
rounding (~2e-8 on the 128 x 128 default), not bit for bit. The decision stays torch's exactly: when the two best
legal logits are closer than :data:`TIE_GAP`, far above that rounding, the decision and
its probabilities come from the torch policy (``fallbacks`` counts them). Architectures
other than a flattened Box observation into an MLP of ``Linear`` + ``Tanh`` / ``ReLU`` /
``Identity`` layers and a ``Discrete`` action head are left to torch (:func:`numpy_policy`
returns None with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from hybrid_trader.evaluation.policies import AgentPolicy

TIE_GAP = 1e-4
"""Best minus second-best legal logit at or below which torch decides (numpy vs torch logits: ~2e-8 apart)."""

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Tanh": np.tanh, "ReLU": lambda x: np.maximum(x, np.float32(0.0)), "Identity": lambda x: x}


def _layers(policy: Any) -> list[tuple[np.ndarray, np.ndarray] | str] | str:
    """The actor's layers as ``(W.T, b)`` float32 pairs and activation names, or why not supported."""
    from gymnasium import spaces
    from stable_baselines3.common.torch_layers import FlattenExtractor
    from torch import nn

    if not isinstance(policy.action_space, spaces.Discrete):
        return f"action space {type(policy.action_space).__name__}, not Discrete"
    space = policy.observation_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return "observation space is not a flat Box"
    if not isinstance(policy.pi_features_extractor, FlattenExtractor):
        return f"features extractor {type(policy.pi_features_extractor).__name__}"
    modules = [*policy.mlp_extractor.policy_net, policy.action_net]
    out: list[tuple[np.ndarray, np.ndarray] | str] = []
    for mod in modules:
        if isinstance(mod, nn.Linear):
            w = mod.weight.detach().cpu().numpy().astype(np.float32)
            b = (mod.bias.detach().cpu().numpy() if mod.bias is not None else np.zeros(w.shape[0])).astype(np.float32)
            out.append((np.ascontiguousarray(w.T), b))
        elif type(mod).__name__ in _ACTIVATIONS:
            out.append(type(mod).__name__)
        else:
            return f"layer {type(mod).__name__}"
    return out


def numpy_policy(agent: AgentPolicy) -> tuple[NumpyAgentPolicy | None, str]:
    """``(the numpy policy, "")`` for a deterministic ``AgentPolicy`` whose network is supported, else
    ``(None, why)``: the caller keeps ``agent`` (torch)."""
    if not agent.deterministic:
        return None, "a stochastic policy"
    layers = _layers(agent.model.policy)
    if isinstance(layers, str):
        return None, layers
    return NumpyAgentPolicy(agent, layers), ""


class NumpyAgentPolicy:
    """``AgentPolicy``'s deterministic masked decision, forward in numpy; torch decides near-ties.

    After each call, :attr:`last_probs` holds the masked probabilities of that decision
    (float64 from the float32 logits; None when torch decided: ask torch for them).
    """

    def __init__(self, agent: Any, layers: list[tuple[np.ndarray, np.ndarray] | str]) -> None:
        """``agent``: an ``AgentPolicy`` or what stands for one (``normalize``, ``name``, ``result_extra``, and the
        call that decides a near-tie in torch: ``live.policy_cache.LazyAgent`` loads torch only then)."""
        self.agent = agent
        self.spec = list(layers)
        """The layers as given: ``(W.T, b)`` pairs and activation names (``live.policy_cache`` writes them)."""
        self.name = agent.name
        self.result_extra = agent.result_extra
        self.layers: list[tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], np.ndarray]] = [
            (lay if isinstance(lay, tuple) else _ACTIVATIONS[lay]) for lay in layers]
        self.last_probs: np.ndarray | None = None
        self.calls = 0
        self.fallbacks = 0
        """Decisions left to torch (best two legal logits within ``TIE_GAP``, or no legal action)."""

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The actor's logits (float32) of one raw observation."""
        x = np.asarray(self.agent.normalize(obs), dtype=np.float32)
        for layer in self.layers:
            if isinstance(layer, tuple):
                x = x @ layer[0] + layer[1]
            else:
                x = layer(x)
        return x

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
        self.last_probs = None
        return int(self.agent(obs, mask, env))
