"""The agent tests' phase 3 policy: an untrained ``HybridMaskablePolicy`` (seed 0, llm_weight 0.8)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import PHASE3_OBS_DIM
from hybrid_trader.training.policy import HybridMaskablePolicy


@pytest.fixture(scope="module")
def policy() -> HybridMaskablePolicy:
    th.manual_seed(0)
    space = gym.spaces.Box(-np.inf, np.inf, shape=(PHASE3_OBS_DIM,), dtype=np.float32)
    pol = HybridMaskablePolicy(space, gym.spaces.Discrete(N_ACTIONS), lambda _: 1e-3, llm_weight=0.8)
    pol.set_training_mode(False)
    return pol
