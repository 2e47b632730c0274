"""``HybridMaskablePolicy``: MaskablePPO's actor-critic with the LLM's advice as a logit prior.

``logits = rl_logits + llm_weight * log p_llm(a)`` where ``p_llm`` is read from the
(unnormalised) advice block at the end of the observation. Masking is applied after,
so vetoed and illegal actions have probability zero. Because the advice is part of the
observation stored in the rollout buffer, PPO's update recomputes exactly the
distribution the action was sampled from: the stored log-probabilities are exact.

For monitoring, the last forward pass keeps ``last_rl_logits`` and ``last_prior`` (None
when no observation of the batch carried advice).
"""

from __future__ import annotations

from typing import Any

import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

from hybrid_trader.training.fusion import ADVICE_DIM, PROB_FLOOR


class HybridMaskablePolicy(MaskableActorCriticPolicy):
    """Maskable actor-critic whose action distribution includes the LLM prior."""

    def __init__(self, *args: Any, llm_weight: float = 0.3, **kwargs: Any) -> None:
        self.llm_weight = float(llm_weight)
        super().__init__(*args, **kwargs)
        self._prior: th.Tensor | None = None
        self.last_rl_logits: th.Tensor | None = None
        self.last_prior: th.Tensor | None = None

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["llm_weight"] = self.llm_weight
        return data

    @staticmethod
    def prior_from_obs(obs: th.Tensor) -> th.Tensor:
        """``log p_llm`` (zero where no advice is present) from observations ``(n, d)``."""
        advice = obs[..., -ADVICE_DIM:]
        return th.where(advice[..., 8:9] > 0.5, advice[..., :6].clamp(min=PROB_FLOOR, max=1.0).log(), 0.0)

    def extract_features(self, obs, features_extractor=None):  # type: ignore[override]
        # Every distribution path (forward, evaluate_actions, get_distribution) extracts
        # features from the observation and then builds the distribution from the latent:
        # keep the observation's prior for that second step. Rows without advice have a
        # zero prior; when no row has advice (most steps with a slow model) there is none.
        obs = obs.float()
        prior = self.prior_from_obs(obs) if bool((obs[..., -1] > 0.5).any()) else None
        # plain attributes, set past nn.Module.__setattr__ (its checks cost on every forward)
        object.__setattr__(self, "_prior", prior)
        return super().extract_features(obs, features_extractor)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor):
        rl_logits = self.action_net(latent_pi)
        prior = self._prior
        object.__setattr__(self, "last_rl_logits", rl_logits.detach())
        object.__setattr__(self, "last_prior", None if prior is None else prior.detach())
        logits = rl_logits + self.llm_weight * prior if (self.llm_weight and prior is not None) else rl_logits
        return self.action_dist.proba_distribution(action_logits=logits)
