"""Measured learning (``hybrid-trader llm eval``): base vs fine-tuned model against hindsight labels of later days.

Both models answer in scoring mode (the next-token probabilities of the action names
after the answer prefix, the distribution the advisor uses), on the same labelled
states of the validation or test split. The distribution over the legal actions (HOLD,
BUY, SELL for a flat state) is renormalised, and compared with the label:

| metric | meaning |
|---|---|
| ``Accuracy [%]`` | the most probable action is the label |
| ``Balanced accuracy [%]`` | mean recall over the label classes (a constant answer scores 33%) |
| ``Log-loss [nats]`` | mean -log p(label) |
| ``Brier score`` | mean squared distance of the distribution to the one-hot label (0 best, 2 worst) |
| ``ECE [%]`` | expected calibration error: 10 bins of the top probability vs its accuracy |
| ``Name coverage`` | mean probability mass on the legal action names (how often the model answers with one) |
| ``Label coverage [%]`` | states that could be labelled among those considered |
| ``Advised HOLD/BUY/SELL [%]`` | distribution of the most probable action |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from hybrid_trader.actions import Action
from hybrid_trader.finetune.examples import ExampleSet
from hybrid_trader.hindsight.labels import LABEL_ACTIONS
from hybrid_trader.llm.config import LLMConfig

EPS = 1e-9


@dataclass(frozen=True)
class LlmEvalRequest:
    """What ``llm eval`` measures and how (``hybrid-trader llm eval``'s options)."""

    max_states: int = 200
    """Labelled states of the split the models answer."""
    batch: int = 16
    """Prompts per model call."""
    progress: bool = True
    """Progress bars."""
    cot: int = 0
    """Also run the chain of thought (base model) on that many states: parse rate, latency, agreement."""
    train_states: int = 400
    """Labelled training states the controls are fitted on."""
    draws: int = 1000
    """Bootstrap draws of the informativeness intervals."""
    retrieval: int = 0
    """Also score the prompt with that many retrieved examples, alone and on the adapter; 0: not."""
    retrieval_mode: str = "exact"
    """How the examples are retrieved (``llm.prompt.retrieval.mode``)."""
    calibration_states: int = 120
    """Training states a variant without a run calibration of its identity is calibrated on."""
    calibrate: bool = True
    """A leaning model's batch calibration (the run's, fitted first when it has none); False: raw answers only."""
    say: Callable[[str], None] = print
    """Where notes go."""
    llm: LLMConfig | None = None
    """Another LLM configuration to measure on the run's states instead of the run's own (``llm eval --config``):
    the run's adapter is not used (it was trained for the run's model), the run's calibration only where it was
    fitted for this very advice, else one is fitted on ``calibration_states`` training states and not stored."""
    name: str | None = None
    """With ``llm``: the name of its results, ``RUN_DIR/llm_eval/<split>-<name>.json`` (the config file's stem)."""

METRICS: tuple[str, ...] = (
    "Accuracy [%]", "Balanced accuracy [%]", "Log-loss [nats]", "Brier score", "ECE [%]", "Name coverage",
    "Label coverage [%]", "Advised HOLD [%]", "Advised BUY [%]", "Advised SELL [%]", "States",
)
"""Row labels of the evaluation table, in order."""


def score_examples(backend, examples: ExampleSet, batch: int = 16, progress: bool = True, desc: str = "") -> np.ndarray:
    """The back end's scoring-mode distribution over the six actions for every example, (n, 6)."""
    out = []
    queries = examples.queries
    for start in tqdm(range(0, len(queries), batch), desc=desc or "score", unit="batch", disable=not progress,
                      leave=False):
        out.append(np.asarray(backend.score(queries[start:start + batch]), dtype=np.float64))
    return np.concatenate(out) if out else np.zeros((0, 6))


def outcome_metrics(probs: np.ndarray, label: np.ndarray, *, label_coverage: float = 1.0) -> dict[str, float]:
    """The table's metrics of distributions ``probs`` (n, 6) against labels (n,) (:data:`METRICS`)."""
    legal = list(LABEL_ACTIONS)
    mass = probs[:, legal]
    coverage = mass.sum(axis=1)
    q = np.where(coverage[:, None] > 0, mass / np.maximum(coverage, EPS)[:, None], 1.0 / len(legal))
    label = np.asarray(label, dtype=np.int64)
    col = np.searchsorted(legal, label)
    pred = q.argmax(axis=1)
    correct = pred == col
    recalls = [float(correct[col == c].mean()) for c in range(len(legal)) if (col == c).any()]
    onehot = np.eye(len(legal))[col]
    top = q.max(axis=1)
    bins = np.minimum((top * 10).astype(int), 9)
    ece = sum(abs(float(top[bins == b].mean()) - float(correct[bins == b].mean())) * (bins == b).mean()
              for b in range(10) if (bins == b).any())
    n = len(label)
    out = {
        "Accuracy [%]": 100.0 * float(correct.mean()),
        "Balanced accuracy [%]": 100.0 * float(np.mean(recalls)),
        "Log-loss [nats]": float(-np.log(np.maximum(q[np.arange(n), col], EPS)).mean()),
        "Brier score": float(((q - onehot) ** 2).sum(axis=1).mean()),
        "ECE [%]": 100.0 * float(ece),
        "Name coverage": float(coverage.mean()),
        "Label coverage [%]": 100.0 * float(label_coverage),
    }
    for i, a in enumerate(legal):
        out[f"Advised {Action(a).name} [%]"] = 100.0 * float((pred == i).mean())
    out["States"] = float(n)
    return out


def label_baselines(label: np.ndarray) -> dict[str, float]:
    """What answering the most frequent label always would score (what an accuracy is worth)."""
    counts = {Action(a).name: int((label == a).sum()) for a in LABEL_ACTIONS}
    top = max(counts.values()) if len(label) else 0
    return {"Majority accuracy [%]": 100.0 * top / max(len(label), 1),
            **{f"Label {k} [%]": 100.0 * v / max(len(label), 1) for k, v in counts.items()}}


def llm_eval_table(columns: dict[str, dict[str, float]], rows: Sequence[str] = METRICS) -> str:
    """A plain-text table: one row per metric, one column per model."""
    names = list(columns)
    width = max(len(r) for r in rows) + 2
    cw = {n: max(14, len(n) + 2) for n in names}
    lines = [f"{'':<{width}}" + "".join(f"{n:>{cw[n]}}" for n in names)]
    for r in rows:
        cells = []
        for n in names:
            v = columns[n].get(r)
            cells.append(f"{'-':>{cw[n]}}" if v is None else f"{v:>{cw[n]}.{0 if r == 'States' else 3}f}")
        lines.append(f"{r:<{width}}" + "".join(cells))
    return "\n".join(lines)
