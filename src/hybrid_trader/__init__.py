"""hybrid_trader: a hybrid reinforcement learning + LLM agent for futures day trading.

Follow a bar from file to decision:

1. ``hybrid_trader.data``      loads and validates bars (``load_bars``) or generates them (``synthetic``).
2. ``hybrid_trader.features``  turns bars into one float32 feature matrix, computed once.
3. ``hybrid_trader.env``       the Gymnasium ``TradingEnv``: contracts, prop-firm rules, fills, masks.
4. ``hybrid_trader.llm``       the LLM advisor: prompts, back ends, scoring, async batching.
5. ``hybrid_trader.training``  MaskablePPO phases 1-3, fusion of RL logits with LLM advice, risk veto.
6. ``hybrid_trader.evaluation`` metrics, baselines, report and diagnosis on later, unseen bars.
"""

__version__ = "0.1.0"
