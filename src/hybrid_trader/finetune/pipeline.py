"""The two commands' work on a run directory: fine-tune the LLM on its training days, evaluate it on later days."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hybrid_trader.advise.calibrate import advice_calibration
from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.finetune.evaluate import (
    LlmEvalRequest,
    label_baselines,
    llm_eval_table,
    outcome_metrics,
    score_examples,
)
from hybrid_trader.finetune.examples import ExampleSet, build_examples
from hybrid_trader.finetune.informativeness import (
    LogisticControl,
    format_info_table,
    forward_returns,
    ic_difference,
    informativeness,
    label_dependence,
    majority_probs,
    prompt_numbers,
)
from hybrid_trader.finetune.lora import FinetuneConfig, FinetuneData, FinetuneResult, finetune
from hybrid_trader.finetune.retrieval_eval import PAIRS, retrieval_variants, variant_calibration
from hybrid_trader.hindsight.labels import LABEL_ACTIONS, LabelConfig
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.base import Backend
from hybrid_trader.llm.backends.transformers_backend import TransformersBackend
from hybrid_trader.llm.backends.trend_rule_backend import TrendRuleBackend
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.model_cache import ADAPTER_META
from hybrid_trader.llm.parsing import ParseError, parse_answer, parse_cot_steps
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.run.advice_identity import RAW
from hybrid_trader.run.calibration import needs_calibration
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.market import Market, load_market
from hybrid_trader.run.rundir import ADAPTER, LLM_EVAL
from hybrid_trader.training.runner import load_run_config

"""Folder of ``llm eval``'s JSON results inside a run directory."""


@dataclass
class RunData:
    """A run's configuration and market."""

    path: Path
    config: RunConfig
    market: Market

    @property
    def llm(self) -> LLMConfig:
        return self.config.llm


def load_run(run_dir: str | Path) -> RunData:
    path = Path(run_dir)
    config = load_run_config(path)
    return RunData(path, config, load_market(config.data, config.split))


def finetune_run(run_dir: str | Path, config: FinetuneConfig, labels: LabelConfig, *, resume: bool = False,
                 progress: bool = True, on_step=None) -> tuple[FinetuneResult, ExampleSet, ExampleSet]:
    """Label the training days, take validation examples from the next split, train the adapter."""
    run = load_run(run_dir)
    check_writable(run.path / ADAPTER, what="llm finetune")
    train = build_examples(run.market, run.config, run.llm, "train", purpose="train", run_dir=run.path,
                           label_config=labels)
    val_part = "val" if len(run.market.split.val) else "test"
    if val_part == "test":
        raise UserError("the run has no validation days: early stopping would tune on test days",
                        fix="give the run a validation split (split.val > 0)")
    val = build_examples(run.market, run.config, run.llm, val_part, purpose="evaluate", run_dir=run.path,
                         label_config=labels, max_states=config.val_examples)
    result = finetune(run.path, run.llm, FinetuneData(train, val, dataclasses.asdict(labels)), config,
                      resume=resume, progress=progress, on_step=on_step)
    return result, train, val


def adapter_config(llm: LLMConfig, adapter_dir: Path) -> LLMConfig:
    """``llm`` with the adapter set (the fine-tuned model)."""
    return dataclasses.replace(llm, transformers=dataclasses.replace(llm.transformers, adapter=str(adapter_dir)))


def evaluate_llm(run_dir: str | Path, split: str = "val", request: LlmEvalRequest | None = None) -> dict[str, Any]:
    """The run's LLM (raw, batch-calibrated, fine-tuned when ``RUN_DIR/llm_adapter`` exists) and three controls
    on ``split``'s labelled states, as ``request`` says (None: the defaults); writes ``RUN_DIR/llm_eval/<split>.json``.

    A leaning model's batch calibration is the run's, fitted first when it has none; ``request.calibrate=False``
    measures the raw answers alone (``calibration: raw``) (:func:`~hybrid_trader.advise.calibrate.advice_calibration`).
    Retrieval variants: :mod:`hybrid_trader.finetune.retrieval_eval`.
    """
    request = request or LlmEvalRequest()
    max_states, batch, progress, cot = request.max_states, request.batch, request.progress, request.cot
    train_states, draws = request.train_states, request.draws
    if split not in ("val", "test"):
        raise UserError(f"--split {split!r}: evaluation is on later days", value=split, fix="use val or test")
    if max_states < 1 or batch < 1 or cot < 0 or train_states < 1:
        raise UserError(f"llm eval: --max-states {max_states}, --batch {batch} and --cot {cot}: states and batch "
                        "must be 1 or more, --cot 0 or more", fix="e.g. --max-states 200 --batch 16 --cot 0")
    run = load_run(run_dir)
    llm = request.llm or run.llm
    out = run.path / LLM_EVAL / (f"{split}.json" if request.llm is None else f"{split}-{request.name or 'config'}.json")
    check_writable(out.parent, what="llm eval")  # before minutes of model calls, not after
    adapter_dir = run.path / ADAPTER
    meta_path = adapter_dir / ADAPTER_META
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
    builder = PromptBuilder(llm, source=str(run.path / "config.yaml"))
    attach_run_pool(builder, run.market, run.config)  # a retrieving run: its pool is part of the identity
    labels = LabelConfig(**meta.get("labels", {})) if meta.get("labels") else LabelConfig()
    if request.llm is not None:
        meta = {}  # the run's adapter was trained for the run's model, not this one (its labels are kept)
    examples = build_examples(run.market, run.config, llm, split, purpose="evaluate", run_dir=run.path,
                              label_config=labels, max_states=max_states)
    coverage = examples.labelled / max(examples.candidates, 1)
    contexts = [q.context for q in examples.queries]
    advisors: dict[str, np.ndarray] = {}
    own = eval_calibration(run, None, builder, request) if request.llm is None else None  # before the model loads
    backend = make_backend(llm, builder)
    try:
        advisors["LLM raw"] = score_examples(backend, examples, batch=batch, progress=progress, desc="base")
        calibration, cal_kind, cal_label = own or eval_calibration(run, backend, builder, request)
    finally:
        backend.close()
    if calibration is not None:
        advisors["LLM calibrated"] = np.array([calibration.apply(p, c.legal, c.market, c.position)
                                               for p, c in zip(advisors["LLM raw"], contexts)])
    variants, variant_info, retrieved = retrieval_variants(
        run.path, llm, run.market, run.config, contexts, adapter_config(llm, adapter_dir) if meta else None,
        request)
    advisors.update(variants)
    train = build_examples(run.market, run.config, run.llm, "train", purpose="train", run_dir=run.path,
                           label_config=labels, max_states=train_states)
    rule = TrendRuleBackend().score(examples.queries)
    controls = {
        "majority": majority_probs(train.labels.label, len(examples)),
        "trend rule": rule,
        "logistic": LogisticControl().fit(prompt_numbers([q.context for q in train.queries]), train.labels.label)
        .predict(prompt_numbers(contexts)),
        **retrieved,
    }
    columns = {name: outcome_metrics(p, examples.labels.label, label_coverage=coverage)
               for name, p in advisors.items()}
    fwd = forward_returns(run.market.bars.close, run.market.bars.session_id, examples.labels.t, labels.horizon or 60)
    info = {name: informativeness(p, examples.labels.label, fwd, draws=draws)
            for name, p in {**advisors, **controls}.items()}
    ic_diff = {name: {control: list(ic_difference(p, controls[control], fwd, draws=draws))
                      for control in ("trend rule", "logistic", *retrieved)} for name, p in advisors.items()}
    for a, b in PAIRS:
        if a in advisors and b in advisors:
            ic_diff[a][b] = list(ic_difference(advisors[a], advisors[b], fwd, draws=draws))
    trend = np.array([c.trend_score for c in contexts])
    dependence = {name: label_dependence(p, rule, trend) for name, p in advisors.items()}
    probs = {name: p.round(5).tolist() for name, p in advisors.items()}
    cot_result = cot_study(llm, examples, advisors["LLM raw"], cot, progress=progress) if cot else None
    result = {
        "split": split, "states": len(examples), "source": examples.source, "labels": dataclasses.asdict(labels),
        "baselines": label_baselines(examples.labels.label), "metrics": columns,
        "informativeness": {n: {k: list(v) for k, v in m.items()} for n, m in info.items()},
        "ic_difference": ic_diff, "label_dependence": dependence,
        "calibration": cal_kind, "calibration_label": cal_label, "variants": variant_info,
        "llm_config": request.name if request.llm is not None else None,
        "train_states": len(train), "horizon": labels.horizon or 60,
        "adapter": {"dir": str(adapter_dir), "best_step": meta.get("best_step"),
                    "best_val_loss": meta.get("best_val_loss"), "base_model": meta.get("base_model")} if meta else None,
        "t": examples.labels.t.tolist(), "label": examples.labels.label.tolist(), "probs": probs,
        **({"cot": cot_result} if cot_result else {}),
    }
    atomic_write_text(out, json.dumps(result, indent=1) + "\n")  # whole or not at all: a crash leaves the old file
    result["table"] = llm_eval_table(columns)
    result["info_table"] = format_info_table(info)
    result["path"] = str(out)
    return result


def eval_calibration(run: RunData, backend: Backend | None, builder: PromptBuilder,
                     request: LlmEvalRequest) -> tuple[BatchCalibration | None, str | None, str]:
    """The batch calibration ``llm eval`` applies to its model's answers: ``(calibration, kind, label)``, kind
    ``batch``, ``raw`` or None (a model without a lean, uncalibrated).

    The run's own model: the run's rule (:func:`~hybrid_trader.advise.calibrate.advice_calibration`: the run's
    calibration, fitted and stored first when it has none). Another configuration (``request.llm``): the run's only
    when it was fitted for this very advice (its identity), else fitted here on ``request.calibration_states``
    training states with ``backend`` (that model, loaded) and not stored: the run's calibration stays its own
    model's."""
    llm = builder.config
    retrieval = builder.retrieval.identity() if builder.retrieval is not None else None
    if request.llm is None or (needs_calibration(llm) and not request.calibrate):  # (raw: nothing read or written)
        choice = advice_calibration(run.path, llm, calibrate=request.calibrate, run_config=run.config,
                                    market=run.market, say=request.say, retrieval=retrieval)
        kind = "batch" if choice.calibration is not None else RAW if choice.raw else None
        return choice.calibration, kind, choice.label
    if not needs_calibration(llm):
        return None, None, f"none ({llm.backend} has no answer lean)"
    assert backend is not None  # another configuration's calibration is fitted on the model already loaded
    cal, origin = variant_calibration(run.path, backend, builder, run.market, run.config, request, "LLM")
    return cal, "batch", f"{origin} (not stored)" if origin != "run" else "the run's (fitted for this advice)"


def cot_study(llm: LLMConfig, examples: ExampleSet, base_probs: np.ndarray, n: int, *, max_new_tokens: int = 200,
              progress: bool = True) -> dict[str, Any]:
    """The chain of thought on ``n`` of the examples (evenly spread), one decision at a time.

    Returns the parse rate, the share of answers with all four steps, latency per
    decision, agreement with scoring mode's top action (``base_probs``) and accuracy
    against the hindsight labels, plus the first answers' steps as samples.
    """
    cfg = merge_overrides(llm, {"mode": "generate", "prompt.chain_of_thought": True,
                                "generation.max_new_tokens": max_new_tokens}, source="llm eval --cot")
    builder = PromptBuilder(cfg, source="llm eval --cot")
    backend = TransformersBackend(cfg, builder)
    pick = np.unique(np.linspace(0, len(examples) - 1, min(n, len(examples))).round().astype(np.int64))
    legal = list(LABEL_ACTIONS)
    rows: list[dict[str, Any]] = []
    try:
        for i in tqdm(pick.tolist(), desc="cot", unit="decision", disable=not progress, leave=False):
            query = builder.query(examples.queries[i].context)
            t0 = time.perf_counter()
            text = backend.generate([query], max_new_tokens, 0.0)[0]
            ms = (time.perf_counter() - t0) * 1000.0
            try:
                action: int | None = parse_answer(text, chain_of_thought=True).action
            except ParseError:
                action = None
            scoring = legal[int(np.argmax(base_probs[i, legal]))]
            rows.append({"t": int(examples.labels.t[i]), "latency_ms": round(ms, 1), "action": action,
                         "scoring_action": scoring, "label": int(examples.labels.label[i]),
                         "steps": parse_cot_steps(text), "tokens": len(backend.tokenizer(text).input_ids)})
    finally:
        backend.close()
    parsed = [r for r in rows if r["action"] is not None]
    lat = np.array([r["latency_ms"] for r in rows])
    return {
        "decisions": len(rows),
        "Parse rate [%]": 100.0 * len(parsed) / max(len(rows), 1),
        "Four steps [%]": 100.0 * sum(len(r["steps"]) == 4 for r in rows) / max(len(rows), 1),
        "Latency median [ms]": float(np.median(lat)) if len(lat) else None,
        "Latency max [ms]": float(lat.max()) if len(lat) else None,
        "Tokens mean": float(np.mean([r["tokens"] for r in rows])) if rows else None,
        "Agreement with scoring [%]": 100.0 * sum(r["action"] == r["scoring_action"] for r in parsed)
        / max(len(parsed), 1),
        "Accuracy vs labels [%]": 100.0 * sum(r["action"] == r["label"] for r in parsed) / max(len(parsed), 1),
        "Scoring accuracy on the same states [%]": 100.0 * sum(r["scoring_action"] == r["label"] for r in rows)
        / max(len(rows), 1),
        "rows": rows,
    }
