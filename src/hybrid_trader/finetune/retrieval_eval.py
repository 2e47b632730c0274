"""``llm eval --retrieval K``: the retrieval columns (alone and on the LoRA adapter), each batch-calibrated.

Each variant (its prompt config and, for the adapter, the fine-tuned weights) is scored
on the same labelled states as the fixed-examples column. Its batch calibration is the
run's ``llm_calibration.json`` when that file was fitted under the variant's advice
identity (retrieval settings and training pool included); otherwise it is fitted here the
same way, on training-day flat states only (``advise calibrate``'s bars), so every
calibrated column divides by a mean of its own answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.advise.calibrate import CalibrationFit, fit_calibration, score_contexts
from hybrid_trader.config import merge_overrides
from hybrid_trader.finetune.evaluate import LlmEvalRequest
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.backends.transformers_backend import TransformersBackend
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.run.advice_identity import advice_identity
from hybrid_trader.run.calibration import calibration_path
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import Market


def retrieval_config(llm: LLMConfig, k: int, mode: str) -> LLMConfig:
    """``llm`` with ``k`` retrieved examples in ``mode``."""
    return merge_overrides(llm, {"prompt.retrieval.k": int(k), "prompt.retrieval.mode": mode},
                           source="llm eval --retrieval")


def variant_calibration(run_dir: Path, backend: Backend, builder: PromptBuilder, market: Market,
                        run_config: RunConfig, request: LlmEvalRequest, desc: str) -> tuple[BatchCalibration, str]:
    """The variant's batch calibration and where it came from ('run' or 'fitted on N training states': the
    request's ``calibration_states``, flat, the states the evaluation asks; not stored)."""
    r = builder.retrieval
    identity = advice_identity(builder.config, retrieval=r.identity() if r is not None else None)
    path = calibration_path(run_dir)
    if path.is_file():
        stored = BatchCalibration.load(path)
        if stored.identity.get("hash") == identity["hash"]:
            return stored, "run"
    fit = CalibrationFit(max_states=request.calibration_states, positions=(0,), batch=request.batch, backend=backend)
    cal, contexts, _ = fit_calibration(builder, market, run_config, fit, progress=request.progress,
                                       desc=desc + " calibration")
    return cal, f"fitted on {len(contexts)} training states"


def neighbour_labels(builder: PromptBuilder, contexts: Sequence[AdvisorContext]) -> np.ndarray:
    """(n, 6) a control: the label frequencies of the examples each state is shown (+0.5 each of HOLD/BUY/SELL).

    What copying the retrieved answers would say, without a model: the LLM's retrieval
    column is worth something only where it beats this.
    """
    r = builder.retrieval
    assert r is not None
    out = np.zeros((len(contexts), 6))
    for row, ctx in enumerate(contexts):
        counts = np.bincount(np.asarray(r.pool.label)[r.neighbours(ctx)].astype(np.int64), minlength=3)[:3]
        out[row, :3] = (counts + 0.5) / (counts.sum() + 1.5)
    return out


def retrieval_variants(run_dir: Path, llm: LLMConfig, market: Market, run_config: RunConfig,
                       contexts: Sequence[AdvisorContext], adapter: LLMConfig | None,
                       request: LlmEvalRequest) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray]]:
    """Raw and calibrated distributions of: retrieval (``request.retrieval`` examples, ``request.retrieval_mode``);
    the adapter (when given); the adapter with retrieval.

    Returns the columns (``name`` and ``name calibrated``); per variant, its advice
    identity hash and where its calibration came from; and the ``retrieved labels`` control
    (:func:`neighbour_labels`) when ``k`` > 0.
    """
    k, mode = request.retrieval, request.retrieval_mode
    variants: list[tuple[str, LLMConfig]] = []
    if k > 0:
        variants.append(("retrieval", retrieval_config(llm, k, mode)))
    if adapter is not None:
        variants.append(("fine-tuned", adapter))
        if k > 0:
            variants.append(("fine-tuned + retrieval", retrieval_config(adapter, k, mode)))
    columns: dict[str, np.ndarray] = {}
    controls: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {}
    for name, cfg in variants:
        builder = PromptBuilder(cfg, source=str(run_dir / "config.yaml"))
        attach_run_pool(builder, market, run_config)
        if builder.retrieval is not None and not controls:
            controls["retrieved labels"] = neighbour_labels(builder, contexts)
        backend = (TransformersBackend(cfg, builder) if cfg.transformers.adapter else make_backend(cfg, builder))
        try:
            raw = score_contexts(backend, builder, contexts, batch=request.batch, progress=request.progress,
                                 desc=name)
            cal, origin = variant_calibration(run_dir, backend, builder, market, run_config, request, name)
        finally:
            backend.close()
        columns[name] = raw
        columns[f"{name} calibrated"] = np.array([cal.apply(p, c.legal, c.market, c.position)
                                                  for p, c in zip(raw, contexts)])
        r = builder.retrieval
        info[name] = {"identity": cal.identity.get("hash"), "calibration": origin,
                      **({"retrieval": r.identity()} if r is not None else {})}
    return columns, info, controls


PAIRS: tuple[tuple[str, str], ...] = (
    ("retrieval calibrated", "LLM calibrated"),
    ("retrieval", "LLM raw"),
    ("fine-tuned + retrieval calibrated", "fine-tuned calibrated"),
    ("fine-tuned + retrieval calibrated", "retrieval calibrated"),
    ("fine-tuned calibrated", "LLM calibrated"),
)
"""Paired IC differences ``llm eval`` reports between LLM columns (first minus second), where both exist."""
