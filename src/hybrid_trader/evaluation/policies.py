"""Decision rules run through the environment: the trained agent and the baselines.

A policy here is a callable ``(obs, mask, env) -> action``. Every one of them sees
exactly what the agent sees (the observation at bar t, the legal actions) plus the
environment for the bars up to t, and trades through the same environment, so the
costs, fills and rules are identical.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from hybrid_trader.actions import Action


class Policy(Protocol):
    name: str

    def __call__(self, obs: np.ndarray, mask: np.ndarray, env: Any) -> int: ...


class FlatPolicy:
    """Never trades."""

    name = "flat"

    def __call__(self, obs, mask, env) -> int:
        return int(Action.HOLD)


class RandomPolicy:
    """Random legal actions: enters on a share ``entry_rate`` of the bars where entry is legal.

    ``entry_rate`` is set from the agent's own trade rate so that the comparison is at
    the same activity; management actions (phases 2-3) are taken with probability
    ``manage_rate`` when legal.
    """

    def __init__(self, entry_rate: float, seed: int, manage_rate: float = 0.02) -> None:
        self.entry_rate = float(entry_rate)
        self.manage_rate = float(manage_rate)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.name = f"random (seed {seed})"
        self.result_extra = {"group": "random", "seed": seed, "role": "baseline"}

    def __call__(self, obs, mask, env) -> int:
        if mask[1] and self.rng.random() < self.entry_rate:
            return int(self.rng.choice([Action.BUY, Action.SELL]))
        if len(mask) > 3 and mask[3:].any() and self.rng.random() < self.manage_rate:
            return int(self.rng.choice(np.flatnonzero(mask[3:]) + 3))
        return int(Action.HOLD)


class MomentumPolicy:
    """A simple momentum rule: enter in the direction of the last ``lookback`` bars' move
    when it exceeds ``threshold_atr`` ATRs (bars <= t only); exits by stop and target."""

    name = "momentum"

    def __init__(self, lookback: int = 20, threshold_atr: float = 1.0) -> None:
        self.lookback = lookback
        self.threshold_atr = threshold_atr

    def __call__(self, obs, mask, env) -> int:
        if not mask[1]:
            return int(Action.HOLD)
        t = env.current_index
        if t < self.lookback:
            return int(Action.HOLD)
        close = env.bars.close
        move = (close[t] - close[t - self.lookback]) / env.features.atr[t]
        if move > self.threshold_atr:
            return int(Action.BUY)
        if move < -self.threshold_atr:
            return int(Action.SELL)
        return int(Action.HOLD)


class AgentPolicy:
    """The trained MaskablePPO policy, deterministic and masked, on normalised observations."""

    def __init__(self, model: Any, vec_normalize: Any = None, name: str = "agent", deterministic: bool = True) -> None:
        self.model = model
        self.vec_normalize = vec_normalize
        self.name = name
        self.deterministic = deterministic
        self.result_extra = {"role": "agent"}

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        if self.vec_normalize is None:
            return obs
        return self.vec_normalize.normalize_obs(obs)

    def __call__(self, obs, mask, env) -> int:
        action, _ = self.model.predict(self.normalize(obs), action_masks=mask, deterministic=self.deterministic)
        return int(action)


PolicyFn = Callable[[np.ndarray, np.ndarray, Any], int]


class HybridAgentPolicy:
    """The phase 3 agent at evaluation time: RL policy + LLM advice (+ risk veto in the env's mask).

    Queries the advisor synchronously when its query policy says so (same triggers as in
    training), keeps the advice for up to ``max_age_steps`` steps, and decides with
    ``fusion.strategy``: ``prior`` (best action of the trained fused distribution) or
    ``rules`` (seed 001's four priorities on the RL-only distribution and the advice).
    ``use_llm=False`` is the RL-only ablation: no queries and ``llm_weight`` 0.
    Statistics and sample decisions go to ``result_extra``.
    """

    def __init__(self, model: Any, vec_normalize: Any, advisor: Any, market: Any, fusion: Any, *,
                 use_llm: bool = True, name: str = "agent", max_samples: int = 30) -> None:
        self.model = model
        self.vec_normalize = vec_normalize
        self.advisor = advisor
        self.market = market
        self.fusion = fusion
        self.use_llm = use_llm
        self.name = name
        self.max_samples = max_samples
        self.max_age = advisor.config.batching.max_age_steps if advisor is not None else 0
        self.weight = float(fusion.llm_weight) if use_llm else 0.0
        self.step = 0
        self.advice = None
        self.rules_used: dict[str, int] = {}
        self.samples: list[dict] = []
        self.n = self.queries = self.advised = self.agree = self.override = 0
        self.rl_conf_sum = self.llm_conf_sum = 0.0
        self.result_extra: dict = {"role": "agent" if use_llm else "ablation"}

    def _forward(self, obs: np.ndarray, mask: np.ndarray):
        import torch as th

        from hybrid_trader.training.advice_env import advice_block

        block = advice_block(self._current_advice(), self.max_age)
        full = np.concatenate([obs, block]).astype(np.float32)
        x = self.vec_normalize.normalize_obs(full) if self.vec_normalize is not None else full
        policy = self.model.policy
        saved = policy.llm_weight
        policy.llm_weight = self.weight
        try:
            with th.no_grad():
                policy.get_distribution(th.as_tensor(x[None]), action_masks=mask[None])
        finally:
            policy.llm_weight = saved
        rl = policy.last_rl_logits[0].numpy().astype(np.float64)
        prior = np.zeros_like(rl) if policy.last_prior is None else policy.last_prior[0].numpy().astype(np.float64)
        return rl, prior

    def _current_advice(self):
        if self.advice is None or self.step - self.advice.step > self.max_age:
            return None
        from dataclasses import replace

        return replace(self.advice, age_steps=self.step - self.advice.step)

    def __call__(self, obs, mask, env) -> int:
        from hybrid_trader.llm.context import context_from_market
        from hybrid_trader.training.fusion import fuse_rules

        rl, prior = self._forward(obs, mask)
        rl_probs = _softmax_masked(rl, mask)
        rl_best = int(np.argmax(rl_probs))
        ctx = None
        if self.use_llm and self.advisor is not None:
            ctx = context_from_market(self.market.bars, self.market.features, env.current_index,
                                      env.account_snapshot(), mask)
            if self.advisor.should_query(0, self.step, ctx, float(rl_probs[rl_best])):
                self.advisor.policy.mark(0, self.step, ctx)
                self.advice = self.advisor.advise_now([ctx], use_cache=True, env_index=0, step=self.step)[0]
                self.queries += 1
                rl, prior = self._forward(obs, mask)
                rl_probs = _softmax_masked(rl, mask)
                rl_best = int(np.argmax(rl_probs))
        advice = self._current_advice()
        usable = advice is not None and not advice.abstained
        if self.fusion.strategy == "rules" and self.use_llm:
            action, rule = fuse_rules(rl_probs, advice.probs if usable else None,
                                      advice.confidence if usable else 0.0, mask, self.fusion)
        else:
            fused = np.where(mask, rl + self.weight * prior, -np.inf)
            action, rule = int(np.argmax(fused)), ("PRIOR" if usable and self.weight else "RL_ONLY")
        self.rules_used[rule] = self.rules_used.get(rule, 0) + 1
        self.n += 1
        self.rl_conf_sum += float(rl_probs[rl_best])
        self.override += int(action != rl_best)
        if usable:
            self.advised += 1
            self.agree += int(advice.action == rl_best)
            self.llm_conf_sum += advice.confidence
        if len(self.samples) < self.max_samples and (action != 0 or (usable and advice.action != 0)):
            t = env.current_index
            self.samples.append({
                "time": str(self.market.bars.frame.index[t]), "price": float(self.market.bars.close[t]),
                "position": int(env.position), "rl_action": _name(rl_best), "rl_confidence": round(float(rl_probs[rl_best]), 3),
                "llm_action": _name(advice.action) if usable else None,
                "llm_confidence": round(float(advice.confidence), 3) if usable else None,
                "llm_reason": advice.reason if usable else None, "advice_age": advice.age_steps if usable else None,
                "executed": _name(action), "rule": rule,
            })
        self.step += 1
        self._update_extra(env)
        return action

    def _update_extra(self, env) -> None:
        n = max(self.n, 1)
        self.result_extra.update({
            "llm": {
                "LLM queries": self.queries,
                "Query rate [%]": 100.0 * self.queries / n,
                "Advised decisions [%]": 100.0 * self.advised / n,
                "Agreement RL-LLM [%]": 100.0 * self.agree / self.advised if self.advised else None,
                "Override of RL choice [%]": 100.0 * self.override / n,
                "RL confidence (avg)": self.rl_conf_sum / n,
                "LLM confidence (avg)": self.llm_conf_sum / self.advised if self.advised else None,
                "Risk veto [% of decisions]": 100.0 * env.veto_steps / max(env.decision_steps, 1),
                "Veto counts": dict(env.veto_counts),
                "Fusion rules used": dict(self.rules_used),
                "LLM weight": self.weight,
                "Strategy": self.fusion.strategy,
            },
            "sample_decisions": self.samples,
        })


def _softmax_masked(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def _name(action: int) -> str:
    from hybrid_trader.actions import ACTION_NAMES

    return ACTION_NAMES[int(action)]
