"""Is the advice informative? Metrics with bootstrap intervals, against controls, on later days (issue 21).

For distributions over HOLD/BUY/SELL on labelled flat states: balanced accuracy against
the hindsight label, the information coefficient (Spearman rank correlation of
P(BUY) - P(SELL) with the next bars' return), Brier score and ECE, each with a
bootstrap interval over states. The controls answer the same states: the training
majority class, the trend-label rule (the label our own code writes into the prompt) and
a multinomial logistic regression on the numbers the prompt shows, fitted on training
days. :func:`label_dependence` says how much of the advice the trend label alone explains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hybrid_trader.hindsight.labels import LABEL_ACTIONS
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.study.stats import bootstrap_statistic

EPS = 1e-12
PROMPT_NUMBERS = ("trend_score", "adx", "vwap_distance", "rsi", "momentum", "macd_hist", "ret_20", "ret_60")
"""Context fields the prompt shows that the logistic control reads (NaN -> the training mean)."""
INFO_METRICS = ("Balanced accuracy [%]", "IC (Spearman)", "Brier score", "ECE [%]")
"""The informativeness table's rows (each with a bootstrap interval)."""


def legal3(probs: np.ndarray) -> np.ndarray:
    """(n, 6) distributions -> (n, 3) over HOLD/BUY/SELL, renormalised (uniform where no mass)."""
    m = np.clip(np.asarray(probs, dtype=np.float64)[:, list(LABEL_ACTIONS)], 0.0, None)
    s = m.sum(axis=1, keepdims=True)
    return np.where(s > 0, m / np.maximum(s, EPS), 1.0 / 3.0)


def label_columns(label: np.ndarray) -> np.ndarray:
    return np.searchsorted(list(LABEL_ACTIONS), np.asarray(label, dtype=np.int64))


def balanced_accuracy(q: np.ndarray, col: np.ndarray) -> float:
    pred = q.argmax(axis=1)
    recalls = [float((pred[col == c] == c).mean()) for c in range(3) if (col == c).any()]
    return 100.0 * float(np.mean(recalls)) if recalls else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    def ranks(v: np.ndarray) -> np.ndarray:
        order = np.argsort(v, kind="mergesort")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=np.float64)
        _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
        sums = np.bincount(inv, weights=r)
        return (sums / counts)[inv]
    if len(x) < 3:
        return float("nan")
    rx, ry = ranks(np.asarray(x, float)), ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def brier(q: np.ndarray, col: np.ndarray) -> float:
    return float(((q - np.eye(3)[col]) ** 2).sum(axis=1).mean())


def ece(q: np.ndarray, col: np.ndarray) -> float:
    top = q.max(axis=1)
    correct = q.argmax(axis=1) == col
    bins = np.minimum((top * 10).astype(int), 9)
    return 100.0 * float(sum(abs(top[bins == b].mean() - correct[bins == b].mean()) * (bins == b).mean()
                             for b in range(10) if (bins == b).any()))


def informativeness(probs: np.ndarray, label: np.ndarray, forward_return: np.ndarray, *, draws: int = 1000,
                    seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """Each of :data:`INFO_METRICS` as ``(value, low, high)`` (95% bootstrap over states), plus top-action shares."""
    q = legal3(probs)
    col = label_columns(label)
    ret = np.asarray(forward_return, dtype=np.float64)
    stats: dict[str, Callable[[np.ndarray], float]] = {
        "Balanced accuracy [%]": lambda i: balanced_accuracy(q[i], col[i]),
        "IC (Spearman)": lambda i: spearman(q[i, 1] - q[i, 2], ret[i]),
        "Brier score": lambda i: brier(q[i], col[i]),
        "ECE [%]": lambda i: ece(q[i], col[i]),
    }
    out = {name: bootstrap_statistic(fn, len(q), draws=draws, seed=seed) for name, fn in stats.items()}
    top = q.argmax(axis=1)
    for c, a in enumerate(("HOLD", "BUY", "SELL")):
        share = 100.0 * float((top == c).mean()) if len(top) else float("nan")
        out[f"Top {a} [%]"] = (share, share, share)
    return out


def ic_difference(probs: np.ndarray, other: np.ndarray, forward_return: np.ndarray, *, draws: int = 1000,
                  seed: int = 0) -> tuple[float, float, float]:
    """IC of ``probs`` minus IC of ``other`` on the same states, ``(value, low, high)``: a paired 95%
    bootstrap (each draw resamples the states once for both), so their shared noise cancels."""
    a, b = legal3(probs), legal3(other)
    sa, sb = a[:, 1] - a[:, 2], b[:, 1] - b[:, 2]
    ret = np.asarray(forward_return, dtype=np.float64)
    return bootstrap_statistic(lambda i: spearman(sa[i], ret[i]) - spearman(sb[i], ret[i]), len(a), draws=draws,
                               seed=seed)


def majority_probs(train_label: np.ndarray, n: int) -> np.ndarray:
    """The training label frequencies for every state (its argmax: the majority class)."""
    col = label_columns(train_label)
    freq = np.bincount(col, minlength=3).astype(np.float64) + 1e-3
    p = np.zeros((n, 6))
    p[:, list(LABEL_ACTIONS)] = freq / freq.sum()
    return p


def prompt_numbers(contexts: Sequence[AdvisorContext]) -> np.ndarray:
    """(n, k): the numbers the prompt shows (:data:`PROMPT_NUMBERS`), NaN where missing."""
    return np.array([[float(getattr(c, f)) for f in PROMPT_NUMBERS] for c in contexts], dtype=np.float64)


class LogisticControl:
    """Multinomial logistic regression (numpy, L2, gradient descent) on standardised prompt numbers."""

    def __init__(self, l2: float = 1e-2, steps: int = 500, lr: float = 0.5) -> None:
        self.l2, self.steps, self.lr = l2, steps, lr

    def fit(self, x: np.ndarray, label: np.ndarray) -> LogisticControl:
        self.mean = np.nanmean(x, axis=0)
        self.mean = np.where(np.isfinite(self.mean), self.mean, 0.0)
        z = self._prep(x, fit=True)
        y = np.eye(3)[label_columns(label)]
        self.w = np.zeros((z.shape[1], 3))
        for _ in range(self.steps):
            p = self._softmax(z @ self.w)
            self.w -= self.lr * (z.T @ (p - y) / len(z) + self.l2 * self.w)
        return self

    def _prep(self, x: np.ndarray, fit: bool = False) -> np.ndarray:
        x = np.where(np.isfinite(x), x, self.mean)
        if fit:
            self.scale = x.std(axis=0)
            self.scale = np.where(self.scale > 0, self.scale, 1.0)
        return np.hstack([(x - self.mean) / self.scale, np.ones((len(x), 1))])

    @staticmethod
    def _softmax(s: np.ndarray) -> np.ndarray:
        e = np.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, x: np.ndarray) -> np.ndarray:
        p = np.zeros((len(x), 6))
        p[:, list(LABEL_ACTIONS)] = self._softmax(self._prep(x) @ self.w)
        return p


def label_dependence(probs: np.ndarray, rule_probs: np.ndarray, trend_score: np.ndarray) -> dict[str, float]:
    """Agreement of the top advice with the trend rule's, and H(advice | trend label) [bits] against H(advice)."""
    a = legal3(probs).argmax(axis=1)
    r = legal3(rule_probs).argmax(axis=1)
    trend = np.asarray(trend_score, dtype=np.int64)

    def entropy(v: np.ndarray) -> float:
        p = np.bincount(v, minlength=3) / max(len(v), 1)
        p = p[p > 0]
        return float(max(0.0, -(p * np.log2(p)).sum()))

    cond = sum((trend == s).mean() * entropy(a[trend == s]) for s in np.unique(trend)) if len(a) else float("nan")
    return {"Agreement with the trend rule [%]": 100.0 * float((a == r).mean()) if len(a) else float("nan"),
            "H(advice) [bits]": entropy(a), "H(advice | trend label) [bits]": float(cond)}


def forward_returns(close: np.ndarray, session_id: np.ndarray, t: np.ndarray, horizon: int) -> np.ndarray:
    """log(close[t + horizon] / close[t]), the later bar clipped to the last bar of t's session."""
    close = np.asarray(close, dtype=np.float64)
    sid = np.asarray(session_id)
    last = np.searchsorted(sid, sid[t], side="right") - 1  # sessions are contiguous and in order
    later = np.minimum(t + horizon, last)
    return np.log(close[later] / close[t])


def format_info_table(info: dict[str, dict[str, tuple[float, float, float]]]) -> str:
    """Rows: metrics; columns: advisors and controls; cells ``value [low, high]``."""
    names = list(info)
    rows = [*INFO_METRICS, "Top HOLD [%]", "Top BUY [%]", "Top SELL [%]"]
    width = max(len(r) for r in rows) + 2
    lines = [f"{'':<{width}}" + "".join(f"{n:>24}" for n in names)]
    for r in rows:
        cells = []
        for n in names:
            v, lo, hi = info[n][r]
            digits = 1 if "%" in r else 3
            cell = f"{v:.{digits}f}" + (f" [{lo:.{digits}f}, {hi:.{digits}f}]" if r in INFO_METRICS else "")
            cells.append(f"{cell:>24}")
        lines.append(f"{r:<{width}}" + "".join(cells))
    return "\n".join(lines)
