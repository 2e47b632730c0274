"""Phase 3: the LLM advisor fed from the policy side, batched across environments.

``AdvisorVecEnv`` wraps the vectorised environments (in the main process, whether the
environments run there or in subprocesses). After every step it

1. turns each environment's account snapshot (``info["advisor_account"]``) and the
   precomputed features of its bar into an ``AdvisorContext``;
2. offers it to the advisor with ``submit`` (never blocks: the advisor's query policy
   decides whether to ask, the cache may answer at once, otherwise a worker thread
   batches the queries of all environments into one forward pass);
3. polls each environment's latest ready advice (never blocks) and writes it, with its
   age, into the advice block appended to the observation (``agent.advice_block``).

The policy reads that block as the LLM prior (``HybridMaskablePolicy``), so the
advice that shaped a sampled action is stored with it in the rollout buffer.

The query policy's uncertainty trigger reads the RL confidence of each environment's
last decision straight from the policy that took it (:meth:`AdvisorVecEnv.follow`),
computed only when the trigger is checked.

**Always-on** (a back end with ``block_writer``: the distilled student, ``llm.backend:
student``): every decision of every environment is advised, synchronously, in ONE
batched forward per vector step on the raw observations (before normalisation) and the
legal actions, which also writes the phase 3 observations (the features copied, the
advice block filled: one compiled call on the CPU); no query policy, no thread, no
waiting, age 0 (the query rate is 100%).
A teacher (``llm.student.teacher``, :mod:`hybrid_trader.training.teacher`) may run beside
it: offered each step's decisions, it answers those its query policy picks, in its own
worker, into the run's advice dataset. Without a teacher the student reads nothing of a
step but the legal actions: no account snapshot is built a step, and the environments'
infos carry nothing where ``LeanDummyVecEnv`` records the legal actions with the
observations (``TradingEnv.set_advisor_info("advisor_nothing")``), else those alone
(``"advisor_mask"``).
(The student inside the policy network was measured slower: PPO's update would run it
again on every minibatch of every epoch; here it runs once a step and its advice is
stored with the observation.)

Normalisation (``training.normalizer.LeanVecNormalize``) covers the
features and leaves the advice as it is (probabilities must stay probabilities for the
prior). ``PartialVecNormalize`` is its old name, kept so that runs trained before load.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import (
    ADVICE,
    N_FEATURES,
    OBS_ADVICE,
    PHASE3_OBS_DIM,
    block_bounds,
    write_advice,
)
from hybrid_trader.agent.fusion import rl_confidence
from hybrid_trader.env.trading_env import ADVISOR_ACCOUNT, ADVISOR_MASK, ADVISOR_NOTHING
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.context import context_from_market
from hybrid_trader.training.normalizer import LeanVecNormalize
from hybrid_trader.training.vec_env import recorded_masks, rollout_masks

BLOCK_COLUMNS = {"probs_col": OBS_ADVICE.start + ADVICE.probs.start, "conf_col": OBS_ADVICE.start + ADVICE.confidence,
                 "present_col": OBS_ADVICE.start + ADVICE.present, "copy": N_FEATURES}
"""Where the always-on back end writes into a phase 3 observation: the features, then the advice block's
probabilities, confidence and presence flag (its age stays 0)."""

LastDecision = Callable[[], Any]
"""Returns the policy's last rollout decision ``(rl_logits (n_envs, 6), masks or None)``, or None."""


class PartialVecNormalize(LeanVecNormalize):
    """The normaliser of phase 3 runs trained before ``LeanVecNormalize`` (unpickled by this name)."""


class AdvisorVecEnv(VecEnvWrapper):
    """Appends the LLM's latest advice to each environment's observation; never waits for it."""

    def __init__(self, venv, advisor: Any, market: Any, *, max_age: int, teacher: Any = None) -> None:
        base = venv.observation_space
        if base.shape != (N_FEATURES,):
            raise ValueError(f"AdvisorVecEnv needs the phase 3 observation ({N_FEATURES},), got {base.shape}")
        low, high = block_bounds()
        low = np.concatenate([base.low, low])
        high = np.concatenate([base.high, high])
        super().__init__(venv, observation_space=gym.spaces.Box(low, high, dtype=np.float32))
        self.advisor = advisor
        advisor.expect_envs(self.num_envs)
        self.market = market
        self.max_age = int(max_age)
        self.clock = 0
        """Vector steps since the start of training: the steps each environment has taken (the advisor's clock)."""
        self.last_decision: LastDecision | None = None
        """Where the RL confidence comes from (:meth:`follow`); None: the query policy gets none."""
        self.last_advice: list[Any] = [None] * self.num_envs
        self.last_age = np.zeros(self.num_envs, dtype=np.int64)
        """Age in steps of each environment's last advice (when it was read)."""
        self.submitted = 0
        self.advised_steps = 0
        self.age_sum = 0.0
        self.total_steps = 0
        self.answered = 0
        """Decisions the always-on back end answered itself (the threaded advisor counts its own)."""
        self.advise_into = always_on_advice(advisor)
        """Always-on: ``(raw features, masks, out)``, the back end's writer of phase 3 observations
        (``block_writer``); None: query policy + thread."""
        student = getattr(getattr(advisor, "backend", None), "student", None)
        if self.advise_into is not None and student is not None:
            student.check_layout(FEATURE_NAMES[:student.obs_dim], "the phase 3 observation's prefix")
        self._last_out = np.zeros((self.num_envs, PHASE3_OBS_DIM), dtype=np.float32)
        """Always-on: the last observations returned (their advice is in force at a truncation)."""
        if teacher is not None and self.advise_into is None:
            raise ValueError("a teacher answers beside an always-on advisor (llm.backend: student) only")
        self.teacher = teacher
        """Always-on: the real LLM beside the student (``training.teacher.TeacherLog``), or None."""
        self.masks_only = self.advise_into is not None and teacher is None and venv.has_attr("set_advisor_info")
        """Always-on without a teacher: the student reads the legal actions and nothing else, so no account
        snapshot is built a step."""
        self._recorded = recorded_masks(venv) if self.masks_only else None
        """Always-on without a teacher: the layer below that records the legal actions with the observations (one
        array a step; the infos then carry nothing, ``ADVISOR_NOTHING``), or None (each info carries its
        environment's, ``ADVISOR_MASK``)."""
        if self.masks_only:
            venv.env_method("set_advisor_info", ADVISOR_MASK if self._recorded is None else ADVISOR_NOTHING)

    def follow(self, policy: Any) -> None:
        """Give the query policy (or the teacher) the RL confidence of ``policy``'s rollout decisions.

        ``policy`` records ``last_decision`` (RL-only logits and masks) on each rollout
        step (``HybridMaskablePolicy.forward``) when its ``record_decisions`` is on, which this
        turns on where something reads it: the query policy's uncertainty trigger, or a teacher
        beside the always-on student (an always-on run alone reads none). Each environment's
        confidence is computed from it only when asked.
        """
        if self.advise_into is None or self.teacher is not None:
            policy.record_decisions = True
        self.last_decision = lambda: getattr(policy, "last_decision", None)

    # ------------------------------------------------------------------ VecEnv API
    def reset(self):
        obs = self.venv.reset()
        assert isinstance(obs, np.ndarray)  # a Box observation space: one array, never a dict or tuple
        self.advisor.reset()
        infos = self.venv.unwrapped.reset_infos
        if self.advise_into is not None:
            return self._always_on(obs, infos)
        return self._with_advice(obs, infos, np.ones(self.num_envs, dtype=bool))

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        assert isinstance(obs, np.ndarray)  # a Box observation space: one array, never a dict or tuple
        self.clock += 1
        done = dones.tolist()  # Python bools: numpy scalars cost per environment
        snaps = infos
        if True in done:  # a finished episode's next observation (and snapshot) is its reset's
            reset_infos = self.venv.unwrapped.reset_infos
            snaps = [reset_infos[i] if done[i] else infos[i] for i in range(self.num_envs)]
            for i in (i for i in range(self.num_envs) if done[i]):
                terminal = infos[i].get("terminal_observation")
                if terminal is not None and terminal.shape == (N_FEATURES,):
                    infos[i]["terminal_observation"] = self._terminal(i, terminal, infos[i].get("terminal_mask"))
        if self.advise_into is not None:
            return self._always_on(obs, snaps), rewards, dones, infos
        return self._with_advice(obs, snaps, dones), rewards, dones, infos

    def _terminal(self, i: int, terminal: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Environment ``i``'s terminal observation with its advice, for the value bootstrap of a truncated episode:
        always on, the advice on that state itself (as on every other observation); else the advice in force."""
        if self.advise_into is not None and mask is not None:
            out = np.zeros((1, PHASE3_OBS_DIM), dtype=np.float32)
            self.advise_into(np.ascontiguousarray(terminal[None], dtype=np.float32), np.asarray(mask, bool)[None], out)
            return out[0]
        block = self._last_out[i, OBS_ADVICE] if self.advise_into is not None else \
            write_advice(self.last_advice[i], self.max_age, int(self.last_age[i]))
        return np.concatenate([terminal, block]).astype(np.float32)

    def _always_on(self, obs: np.ndarray, infos) -> np.ndarray:
        """Every environment's advice from one call of the back end (age 0), which also copies the features."""
        assert self.advise_into is not None
        n = self.num_envs
        out = np.zeros((n, PHASE3_OBS_DIM), dtype=np.float32)
        snaps: list[Any] = []
        missing: list[int] = []
        if self._recorded is not None:  # every step of training: the masks the environments recorded
            masks = rollout_masks(self.venv, self._recorded)
        else:
            if self.masks_only:
                rows = [info.get(ADVISOR_MASK) if info else None for info in infos]
            else:
                snaps = [info.get(ADVISOR_ACCOUNT) if info else None for info in infos]
                rows = [None if snap is None else snap.mask for snap in snaps]
            missing = [i for i, row in enumerate(rows) if row is None] if None in rows else []
            if missing:  # an environment without its legal actions (no info): all legal, and no advice below
                masks = np.ones((n, N_ACTIONS), dtype=bool)
                for i, row in enumerate(rows):
                    if row is not None:
                        masks[i] = row
            else:  # one array from the mask tuples
                masks = np.array(rows, dtype=np.bool_)
        self.advise_into(obs, masks, out)
        if missing:
            out[missing, OBS_ADVICE] = 0.0
        self._last_out = out  # nothing writes into the observations once returned
        k = n - len(missing)
        self.total_steps += k
        self.advised_steps += k
        self.answered += k
        self.submitted += k
        if self.teacher is not None:
            decision = self.last_decision() if self.last_decision is not None else None
            rl_confidence_of = None if decision is None else \
                (lambda i: functools.partial(decision_confidence, decision, i))
            self.teacher.offer(obs, snaps, [self.clock] * self.num_envs, rl_confidence_of)
        return out

    def _with_advice(self, obs: np.ndarray, infos, new_episode: np.ndarray) -> np.ndarray:
        out = np.zeros((self.num_envs, PHASE3_OBS_DIM), dtype=np.float32)
        out[:, :N_FEATURES] = obs
        bars, features = self.market.bars, self.market.features
        advisor = self.advisor
        step = self.clock
        decision = self.last_decision() if self.last_decision is not None else None
        new = np.asarray(new_episode, dtype=bool).tolist()
        for i in range(self.num_envs):
            snap = infos[i].get(ADVISOR_ACCOUNT) if infos[i] else None
            if new[i]:
                advisor.reset(i)
            if snap is None:
                continue
            # The query policy reads the snapshot itself (position sign, balance, win rate,
            # losses) and the RL confidence only when its uncertainty trigger is checked; the
            # full context (prompt fields) is built only when a query is due.
            conf = functools.partial(decision_confidence, decision, i) if decision is not None else None
            if advisor.should_query(i, step, snap, conf):
                ctx = context_from_market(bars, features, snap.t, snap, snap.mask)
                if advisor.submit(i, step, ctx, force=True):
                    self.submitted += 1
            advice, age = advisor.latest(i, step)
            self.last_advice[i] = advice
            self.last_age[i] = age
            self.total_steps += 1
            if advice is not None and not advice.abstained:
                write_advice(advice, self.max_age, age, out[i, OBS_ADVICE])
                self.advised_steps += 1
                self.age_sum += age
        return out

    def close(self) -> None:
        try:
            if self.teacher is not None:
                self.teacher.close()  # writes every answer it recorded
        finally:
            try:
                self.advisor.close()
            finally:
                self.venv.close()


def decision_confidence(decision: Any, env_index: int) -> float:
    """RL confidence of environment ``env_index`` in a recorded decision ``(rl_logits, masks, ...)``."""
    logits, masks = decision[0], decision[1]
    return rl_confidence(logits[env_index].tolist(), None if masks is None else masks[env_index].tolist())


def always_on_advice(advisor: Any) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """The advisor back end's always-on writer of phase 3 observations (``block_writer``, the student's: the
    features copied, the advice block filled, in :data:`BLOCK_COLUMNS`), or None when it has none."""
    make = getattr(getattr(advisor, "backend", None), "block_writer", None)
    return make(**BLOCK_COLUMNS) if callable(make) else None


def advice_layer(venv: Any) -> AdvisorVecEnv | None:
    """The :class:`AdvisorVecEnv` inside a VecEnv wrapper stack (None without one: phases 1-2)."""
    while isinstance(venv, VecEnvWrapper):
        if isinstance(venv, AdvisorVecEnv):
            return venv
        venv = venv.venv
    return None
