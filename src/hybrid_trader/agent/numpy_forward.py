"""The policy network's forward pass in numpy: one MLP forward for every place that needs no SB3.

Phases 1-2's policy is an SB3 ``MaskableActorCriticPolicy``: a flattened observation into
``Linear`` + activation layers (``mlp_extractor.policy_net``), then ``action_net``. :class:`NumpyMLP`
runs such a stack in float32 numpy, layer by layer (``x @ W.T``, ``+= b``, the activation in place).
It is the forward of

* the executor's policy (``live.fast_policy.NumpyAgentPolicy``: the actor, weights copied C-contiguous,
  or read back from the policy cache, one observation at a time), and
* the trainer's rollout under ``ppo.fast_math`` (``training.lean_forward.LeanForward``: the actor and the
  critic on views of the weights that Adam updates in place, a row per environment).

Matrix products sum in the order numpy's BLAS picks for the array's layout and the number of rows, which is
not torch's (MKL): the logits agree with SB3's to float32 rounding (about 2e-8 on the 128 x 128 default),
and so never bit for bit; a decision is SB3's exactly because near-ties are left to torch
(``live.fast_policy.TIE_GAP``; ``tests/agent/test_numpy_forward.py`` checks both on the test models). Each
caller keeps its weights' layout and its batch shape, so its own figures do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Layer = tuple[np.ndarray, np.ndarray] | str
"""A ``(W.T, b)`` pair of float32 arrays (a ``Linear``), or an activation's name (a key of :data:`ACTIVATIONS`)."""


def _relu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.float32(0.0), out=out)


ACTIVATIONS: dict[str, Callable[..., Any] | None] = {"Tanh": np.tanh, "ReLU": _relu, "Identity": None}
"""The activations the forward covers, by the torch module's class name: ``f(x, out=x)`` in place (None: none)."""


class NumpyMLP:
    """``Linear`` / activation layers in float32 numpy: ``mlp(x)`` for one observation ``(d,)`` or rows ``(n, d)``."""

    def __init__(self, layers: Sequence[Layer]) -> None:
        self.spec = list(layers)
        """The layers as given: ``(W.T, b)`` pairs and activation names (``live.policy_cache`` writes them)."""
        self._steps: list[tuple[np.ndarray | None, np.ndarray | None, list[Callable[..., Any]]]] = []
        """Each ``Linear`` with the activations after it (a leading activation: a step without weights)."""
        for layer in self.spec:
            if isinstance(layer, tuple):
                self._steps.append((layer[0], layer[1], []))
                continue
            act = ACTIVATIONS[layer]
            if act is None:
                continue
            if not self._steps:
                self._steps.append((None, None, []))
            self._steps[-1][2].append(act)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The output (float32, a new array) of ``x`` (float32)."""
        for w, b, acts in self._steps:
            if w is None:
                x = x.copy()  # a leading activation: never in place on the caller's array
            else:
                x = x @ w
                x += b
            for act in acts:
                act(x, out=x)
        return x


def torch_layers(modules: Sequence[Any], *, views: bool = False) -> list[Layer] | str:
    """The :class:`NumpyMLP` layers of torch ``modules`` (``Linear`` and activations), or why they are not covered.

    ``views``: each ``W.T`` and ``b`` a view of the module's weights (they follow in-place updates: the trainer's);
    else C-contiguous float32 copies (the executor's)."""
    from torch import nn  # only to read a torch network's modules: the executor's restart from its cache has none

    out: list[Layer] = []
    for mod in modules:
        if isinstance(mod, nn.Linear):
            if views:
                if mod.bias is None:
                    return "a Linear layer without a bias"
                out.append((mod.weight.detach().numpy().T, mod.bias.detach().numpy()))
                continue
            w = mod.weight.detach().cpu().numpy().astype(np.float32)
            b = (mod.bias.detach().cpu().numpy() if mod.bias is not None else np.zeros(w.shape[0])).astype(np.float32)
            out.append((np.ascontiguousarray(w.T), b))
        elif type(mod).__name__ in ACTIVATIONS:
            out.append(type(mod).__name__)
        else:
            return f"layer {type(mod).__name__}"
    return out


def actor_layers(policy: Any) -> list[Layer] | str:
    """The actor of an SB3 policy (``mlp_extractor.policy_net``, then ``action_net``) as :class:`NumpyMLP` layers
    (copies), or why it is not covered: a flat ``Box`` observation through ``FlattenExtractor`` into an MLP of
    ``Linear`` + ``Tanh`` / ``ReLU`` / ``Identity`` layers, and a ``Discrete`` action head."""
    # SB3 and gymnasium only to read a loaded model's structure (the caller has loaded torch already)
    from gymnasium import spaces
    from stable_baselines3.common.torch_layers import FlattenExtractor

    if not isinstance(policy.action_space, spaces.Discrete):
        return f"action space {type(policy.action_space).__name__}, not Discrete"
    space = policy.observation_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        return "observation space is not a flat Box"
    if not isinstance(policy.pi_features_extractor, FlattenExtractor):
        return f"features extractor {type(policy.pi_features_extractor).__name__}"
    return torch_layers([*policy.mlp_extractor.policy_net, policy.action_net])
