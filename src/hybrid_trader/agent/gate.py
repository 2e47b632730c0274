"""The learned trust gate of ``fusion.mode: learned``: how much the agent trusts the LLM, state by state.

``w(s) = w_max * sigmoid(g(s))`` with ``g`` a tiny MLP over

=========================  ===================================================================
input                      value
=========================  ===================================================================
RL confidence              probability of the RL policy's best legal action [0-1]
advice probabilities       the six ``ADVICE.probs`` [0-1]
advice confidence          ``ADVICE.confidence`` [0-1]
advice age                 ``ADVICE.age`` [0-1]
agreement                  1 when the RL policy's and the LLM's best legal actions are equal
market context             ``GATE_CONTEXT`` features by name, as the policy sees them (normalised)
=========================  ===================================================================

The last layer is zero-initialised and its bias set so that ``w = fusion.llm_weight``
everywhere at step 0: a learned run starts exactly as the constant prior. The gate's
parameters are policy parameters, trained by PPO's own loss; it reads only the
observation (features + advice block) and the legal actions, so PPO's recomputed
log-probabilities equal the stored ones.

Reading it: ``trust_buckets`` groups the gate's values by trend (``market_regime``:
down / flat / up) and volatility (``volatility_regime``: low / mid / high), on the raw
feature values (``GATE_STATISTICS`` names the logged keys).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import torch as th
from torch import nn

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.agent.advice_block import ADVICE
from hybrid_trader.features.names import FEATURE_NAMES

GATE_CONTEXT = ("market_regime", "session_trend", "volatility_regime", "adx_slope", "efficiency_ratio")
"""Market-context features the gate reads (names of ``features.names.FEATURE_NAMES``)."""
GATE_CONTEXT_INDEX = [FEATURE_NAMES.index(name) for name in GATE_CONTEXT]
"""Their positions in the observation."""
TREND_FEATURE = "market_regime"
"""Trend buckets: below -``TREND_CUT`` down, above +``TREND_CUT`` up, else flat (raw value)."""
TREND_CUT = 0.25
VOLATILITY_FEATURE = "volatility_regime"
"""Volatility buckets: log(ATR / its 900-minute mean) below -``VOLATILITY_CUT`` low, above high, else mid."""
VOLATILITY_CUT = 0.2
TREND_BUCKETS = ("down", "flat", "up")
VOLATILITY_BUCKETS = ("low", "mid", "high")
N_GATE_INPUTS = 1 + N_ACTIONS + 3 + len(GATE_CONTEXT)
"""RL confidence, advice probabilities, confidence, age, agreement, context."""

GATE_STATISTICS: dict[str, str] = {
    "fusion/gate_mean": "mean trust w(s) the learned gate gave the LLM on advised decisions",
    "fusion/gate_std": "spread (standard deviation) of w(s) over advised decisions",
    **{f"fusion/trust_trend_{b}": f"mean w(s) on advised decisions in a {b} trend (market_regime)"
       for b in TREND_BUCKETS},
    **{f"fusion/trust_vol_{b}": f"mean w(s) on advised decisions at {b} volatility (volatility_regime)"
       for b in VOLATILITY_BUCKETS},
}
"""The gate's statistics (TensorBoard, progress.jsonl, evaluation) and what they mean."""


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


class TrustGate(nn.Module):
    """``w(s) = w_max * sigmoid(g(s))`` per row; ``g`` is Linear-Tanh-Linear with a zero last layer."""

    def __init__(self, llm_weight: float, w_max: float, hidden: int = 16) -> None:
        super().__init__()
        if not 0.0 < llm_weight < w_max:
            raise ValueError(f"the gate starts at llm_weight {llm_weight}, which must lie in (0, w_max {w_max})")
        self.w_max = float(w_max)
        self.body = nn.Sequential(nn.Linear(N_GATE_INPUTS, int(hidden)), nn.Tanh())
        self.out = nn.Linear(int(hidden), 1)
        nn.init.zeros_(self.out.weight)
        nn.init.constant_(self.out.bias, _logit(llm_weight / w_max))
        self.register_buffer("context_index", th.as_tensor(GATE_CONTEXT_INDEX, dtype=th.long), persistent=False)

    def inputs(self, obs: th.Tensor, rl_logits: th.Tensor, advice: th.Tensor, masks: th.Tensor | None) -> th.Tensor:
        """The gate's input rows ``(n, N_GATE_INPUTS)`` (no gradient flows into the RL logits)."""
        logits = rl_logits.detach()
        if masks is not None:
            logits = th.where(masks.bool(), logits, th.full_like(logits, -1e8))
        rl_probs = th.softmax(logits, dim=-1)
        rl_conf, rl_best = rl_probs.max(dim=-1)
        probs = advice[..., ADVICE.probs]
        present = advice[..., ADVICE.present]
        agree = (probs.argmax(dim=-1) == rl_best).float() * present
        context = obs.index_select(-1, cast(th.Tensor, self.context_index)).float()
        return th.cat([rl_conf.unsqueeze(-1), probs, advice[..., ADVICE.confidence:ADVICE.age + 1],
                       agree.unsqueeze(-1), context], dim=-1)

    def forward(self, obs: th.Tensor, rl_logits: th.Tensor, advice: th.Tensor,
                masks: th.Tensor | None = None) -> th.Tensor:
        """Trust ``w(s)`` of each row, shape ``(n, 1)``, in ``[0, w_max]``."""
        g = self.out(self.body(self.inputs(obs, rl_logits, advice, masks)))
        return self.w_max * th.sigmoid(g)


def trust_buckets(trust: np.ndarray, trend: np.ndarray, volatility: np.ndarray) -> dict[str, float]:
    """``GATE_STATISTICS`` of gate values ``trust (n,)`` with the raw trend and volatility features of their states."""
    out: dict[str, float] = {}
    trust = np.asarray(trust, dtype=np.float64).reshape(-1)
    if not len(trust):
        return out
    out["fusion/gate_mean"] = float(trust.mean())
    out["fusion/gate_std"] = float(trust.std())
    t = np.digitize(np.asarray(trend).reshape(-1), [-TREND_CUT, TREND_CUT + 1e-12])
    v = np.digitize(np.asarray(volatility).reshape(-1), [-VOLATILITY_CUT, VOLATILITY_CUT + 1e-12])
    for i, name in enumerate(TREND_BUCKETS):
        if (t == i).any():
            out[f"fusion/trust_trend_{name}"] = float(trust[t == i].mean())
    for i, name in enumerate(VOLATILITY_BUCKETS):
        if (v == i).any():
            out[f"fusion/trust_vol_{name}"] = float(trust[v == i].mean())
    return out


def trust_table(values: dict[str, float]) -> str:
    """"When the agent trusts the LLM": mean w(s) per trend and volatility bucket, as a small Markdown table."""
    rows = ["| context | mean trust w(s) |", "|---|---|"]
    for name in TREND_BUCKETS:
        key = f"fusion/trust_trend_{name}"
        if key in values:
            rows.append(f"| trend {name} | {values[key]:.3f} |")
    for name in VOLATILITY_BUCKETS:
        key = f"fusion/trust_vol_{name}"
        if key in values:
            rows.append(f"| volatility {name} | {values[key]:.3f} |")
    if "fusion/gate_mean" in values:
        rows.append(f"| all advised decisions | {values['fusion/gate_mean']:.3f} "
                    f"(std {values.get('fusion/gate_std', 0.0):.3f}) |")
    return "\n".join(rows)
