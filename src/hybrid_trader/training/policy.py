"""``HybridMaskablePolicy``: MaskablePPO's actor-critic with the LLM's advice as a logit prior.

The distribution's logits are ``agent.fusion.fused_logits(rl_logits, advice, llm_weight)``
(``rl_logits + llm_weight * log p_llm``), the advice read from the (unnormalised) advice
block of the observation. Masking is applied after, so vetoed and illegal actions have
probability zero. Because the advice is part of the observation stored in the rollout
buffer, PPO's update recomputes exactly the distribution the action was sampled from:
the stored log-probabilities are exact. ``agent.HybridAgent`` decides with the same
function on :meth:`HybridMaskablePolicy.rl_logits`.

Each rollout step (``forward``) records ``last_decision``: the RL-only logits and the
action masks, from which the advisor's query policy reads the RL confidence
(``AdvisorVecEnv.follow``) and the statistics callback its counts.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import BaseModel

from hybrid_trader.agent.advice_block import OBS_ADVICE
from hybrid_trader.agent.fusion import fused_logits


class RolloutDecision(NamedTuple):
    """The RL side of one rollout step's decisions (one row per environment)."""

    rl_logits: th.Tensor
    """RL-only logits ``(n_envs, 6)`` (no prior)."""
    masks: np.ndarray | None
    """Legal actions ``(n_envs, 6)``; None: all legal."""


class HybridMaskablePolicy(MaskableActorCriticPolicy):
    """Maskable actor-critic whose action distribution includes the LLM prior."""

    def __init__(self, *args: Any, llm_weight: float = 0.3, **kwargs: Any) -> None:
        self.llm_weight = float(llm_weight)
        super().__init__(*args, **kwargs)
        self._advice: th.Tensor | None = None
        self.last_rl_logits: th.Tensor | None = None
        self.last_decision: RolloutDecision | None = None

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["llm_weight"] = self.llm_weight
        return data

    def _read_advice(self, obs: th.Tensor) -> None:
        """Keep the advice blocks of ``obs`` for the distribution built next (rows without advice add no prior)."""
        # plain attribute, set past nn.Module.__setattr__ (its checks cost on every forward); no
        # "any advice?" test: it costs as much as the prior it would skip
        object.__setattr__(self, "_advice", obs[..., OBS_ADVICE].float())

    # The three distribution paths read the observation's advice first; the distribution
    # is then built from the latent in _get_action_dist_from_latent.
    def forward(self, obs: th.Tensor, deterministic: bool = False, action_masks: np.ndarray | None = None):
        self._read_advice(obs)
        out = super().forward(obs, deterministic, action_masks)
        rl_logits = self.last_rl_logits
        assert rl_logits is not None  # set by _get_action_dist_from_latent just now
        masks = None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(rl_logits.shape)
        object.__setattr__(self, "last_decision", RolloutDecision(rl_logits, masks))
        return out

    def evaluate_actions(self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None = None):
        self._read_advice(obs)
        return super().evaluate_actions(obs, actions, action_masks)

    def get_distribution(self, obs: Any, action_masks: np.ndarray | None = None):
        self._read_advice(obs)
        return super().get_distribution(obs, action_masks)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor):
        rl_logits = self.action_net(latent_pi)
        object.__setattr__(self, "last_rl_logits", rl_logits.detach())
        logits = fused_logits(rl_logits, self._advice, self.llm_weight)
        return self.action_dist.proba_distribution(action_logits=logits)

    def rl_logits(self, obs: th.Tensor) -> th.Tensor:
        """RL-only action logits of (normalised) observations ``(n, d)``: no prior, no side effects."""
        features = BaseModel.extract_features(self, obs.float(), self.pi_features_extractor)
        return self.action_net(self.mlp_extractor.forward_actor(features))
