"""``HybridMaskablePolicy``: MaskablePPO's actor-critic with the LLM's advice as a logit prior.

The distribution's logits are ``rl_logits + llm_weight * log p_llm``, the advice read from
the (unnormalised) advice block of the observation: ``agent.fusion.obs_fused_logits`` with
a constant weight, ``agent.fusion.fused_logits`` with the learned gate's. Masking is
applied after, so vetoed and illegal actions have probability zero. Because the advice is
part of the observation stored in the rollout buffer, PPO's update recomputes exactly the
distribution the action was sampled from: the stored log-probabilities are exact.
``agent.HybridAgent`` decides with ``fused_logits`` (the same distribution) on
:meth:`HybridMaskablePolicy.rl_logits`.

With ``advice_input`` off (``fusion.advice_input: false``) the network reads the
observation's features only (:class:`AdviceFreeFeatures`): the advice acts through the
prior alone, and the first layers are ``ADVICE.size`` inputs narrower.

With ``record_decisions`` on, each rollout step (``forward``) records ``last_decision``:
the RL-only logits and the action masks, from which the advisor's query policy (and a
teacher) reads the RL confidence (``AdvisorVecEnv.follow`` turns it on where they do).
The statistics callback reads each step's RL-only logits (and learned trust) from
``decision_log`` instead, a list the step appends to.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import BaseModel
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import N_FEATURES, OBS_ADVICE
from hybrid_trader.agent.fusion import fused_logits, obs_fused_logits
from hybrid_trader.agent.gate import TrustGate


class RolloutDecision(NamedTuple):
    """The RL side of one rollout step's decisions (one row per environment)."""

    rl_logits: th.Tensor
    """RL-only logits ``(n_envs, 6)`` (no prior)."""
    masks: np.ndarray | None
    """Legal actions ``(n_envs, 6)``; None: all legal."""
    trust: th.Tensor | None = None
    """Learned fusion: the gate's ``w(s)`` of each environment ``(n_envs, 1)``; None: constant weight."""


class AdviceFreeFeatures(BaseFeaturesExtractor):
    """The network's input without the advice block: the first ``N_FEATURES`` values of a phase 3 observation.

    A view (``narrow``): the first layer's matrix product reads it in place, no copy.
    """

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, N_FEATURES)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return observations.narrow(-1, 0, N_FEATURES)


class HybridMaskablePolicy(MaskableActorCriticPolicy):
    """Maskable actor-critic whose action distribution includes the LLM prior.

    ``fusion_mode`` constant: ``w = llm_weight``; learned: ``w(s)`` from a
    :class:`~hybrid_trader.agent.gate.TrustGate` (``self.gate``, its parameters in the
    optimizer like the rest of the policy's), equal to ``llm_weight`` at step 0.
    ``advice_input`` False: the actor and critic read the features only
    (:class:`AdviceFreeFeatures`; the gate still reads the whole observation).
    """

    record_decisions = False
    """Whether each rollout step records ``last_decision`` (for a query policy's uncertainty trigger or a
    teacher: ``AdvisorVecEnv.follow`` turns it on where they read it)."""
    decision_log: list[tuple[th.Tensor, th.Tensor | None]] | None = None
    """When a list (the statistics callback sets one each rollout), each rollout step appends its RL-only logits
    and learned trust (None in constant mode) to it: the same tensors the step computed, kept for the
    rollout's statistics."""

    def __init__(self, *args: Any, llm_weight: float = 0.3, fusion_mode: str = "constant", w_max: float = 1.0,
                 gate_hidden: int = 16, advice_input: bool = True, **kwargs: Any) -> None:
        self.llm_weight = float(llm_weight)
        self.fusion_mode = str(fusion_mode)
        self.w_max = float(w_max)
        self.gate_hidden = int(gate_hidden)
        self.advice_input = bool(advice_input)
        if not self.advice_input:
            kwargs["features_extractor_class"] = AdviceFreeFeatures
        super().__init__(*args, **kwargs)
        self._obs: th.Tensor | None = None
        self._masks: th.Tensor | None = None
        self.last_rl_logits: th.Tensor | None = None
        self.last_trust: th.Tensor | None = None
        self.last_decision: RolloutDecision | None = None

    def _build(self, lr_schedule: Any) -> None:
        # the gate must exist before the parent builds the optimizer over self.parameters()
        self.gate = TrustGate(self.llm_weight, self.w_max, self.gate_hidden) if self.fusion_mode == "learned" else None
        super()._build(lr_schedule)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(llm_weight=self.llm_weight, fusion_mode=self.fusion_mode, w_max=self.w_max,
                    gate_hidden=self.gate_hidden, advice_input=self.advice_input)
        return data

    def _read_advice(self, obs: th.Tensor, action_masks: Any = None) -> None:
        """Keep ``obs`` (its advice block is the prior of the distribution built next; rows without advice
        add none) and, for the gate, the legal actions."""
        # plain attributes, set past nn.Module.__setattr__ (its checks cost on every forward); no
        # "any advice?" test: it costs as much as the prior it would skip
        object.__setattr__(self, "_obs", obs)
        if self.gate is not None:
            masks = None if action_masks is None else \
                th.as_tensor(action_masks, device=obs.device).bool().reshape(-1, N_ACTIONS)
            object.__setattr__(self, "_masks", masks)

    lean_rollout = True
    """``forward`` is SB3's between :meth:`before_decision` and :meth:`after_decision` (so
    ``training.lean_ppo.LeanForward`` may run the layers itself between the same hooks)."""

    # The three distribution paths read the observation's advice first; the distribution
    # is then built from the latent in _get_action_dist_from_latent.
    def forward(self, obs: th.Tensor, deterministic: bool = False, action_masks: np.ndarray | None = None):
        self.before_decision(obs, action_masks)
        out = super().forward(obs, deterministic, action_masks)
        self.after_decision(action_masks)
        return out

    def before_decision(self, obs: th.Tensor, action_masks: Any = None) -> None:
        """Before a rollout decision: the observation's advice (and the legal actions) for the prior."""
        self._read_advice(obs, action_masks)

    def after_decision(self, action_masks: Any = None) -> None:
        """After a rollout decision: its records (``decision_log``, ``last_decision``)."""
        log = self.decision_log
        if log is not None:
            log.append((self.last_rl_logits, self.last_trust))  # type: ignore[arg-type]  # set just now
        if self.record_decisions:
            rl_logits = self.last_rl_logits
            assert rl_logits is not None  # set by _get_action_dist_from_latent just now
            masks = None if action_masks is None else np.asarray(action_masks, dtype=bool).reshape(rl_logits.shape)
            object.__setattr__(self, "last_decision", RolloutDecision(rl_logits, masks, self.last_trust))

    def evaluate_actions(self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None = None):
        self._read_advice(obs, action_masks)
        return super().evaluate_actions(obs, actions, action_masks)

    def get_distribution(self, obs: Any, action_masks: np.ndarray | None = None):
        self._read_advice(obs, action_masks)
        return super().get_distribution(obs, action_masks)

    def _get_action_dist_from_latent(self, latent_pi: th.Tensor):
        rl_logits = self.action_net(latent_pi)
        obs = self._obs
        assert obs is not None  # set by _read_advice on each of the three paths
        object.__setattr__(self, "last_rl_logits", rl_logits.detach())
        if self.gate is None:
            logits = obs_fused_logits(rl_logits, obs, self.llm_weight)
        else:
            advice = obs[..., OBS_ADVICE].float()
            trust = self.gate(obs, rl_logits, advice, self._masks)
            object.__setattr__(self, "last_trust", trust.detach())
            logits = fused_logits(rl_logits, advice, trust)
        return self.action_dist.proba_distribution(action_logits=logits)

    def trust(self, obs: th.Tensor, rl_logits: th.Tensor, masks: th.Tensor | None = None) -> th.Tensor | None:
        """The learned trust ``w(s)`` ``(n, 1)`` of (normalised) observations; None in constant mode."""
        if self.gate is None:
            return None
        return self.gate(obs.float(), rl_logits, obs[..., OBS_ADVICE].float(), masks)

    def rl_logits(self, obs: th.Tensor) -> th.Tensor:
        """RL-only action logits of (normalised) observations ``(n, d)``: no prior, no side effects."""
        features = BaseModel.extract_features(self, obs.float(), self.pi_features_extractor)
        return self.action_net(self.mlp_extractor.forward_actor(features))
