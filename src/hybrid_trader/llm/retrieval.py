"""Retrieved few-shot examples: the k labelled training-day states nearest a state (``llm.prompt.retrieval``).

A :class:`RetrievalPool` holds flat states of a run's **training days** with their
hindsight label (built by :func:`hybrid_trader.hindsight.retrieval_pool.build_pool`, which
refuses any other day). States are compared by the numbers the prompt shows
(:data:`~hybrid_trader.llm.retrieval_config.RETRIEVAL_FIELDS` the template renders, or
``retrieval.features``), z-scored with the pool's mean and spread (a missing number
counts as the mean); the distance is Euclidean, exact, brute force over the pool.

Each neighbour is rendered with the prompt's own context template, its answer the label's
action name (``Answer: BUY``), the nearest last (a small base model leans toward the last
example it read). In exact mode a query never retrieves a state of its own trading day (a
training-day query, e.g. for the batch calibration, would otherwise read its own outcome);
a group's shared prefix in clusters mode may hold one (only training-day queries can meet it).

Two modes:

- ``exact``: the prefix is the system text alone (cached); the per-query part is the
  state's k examples, then its own context. Every query pays for its examples' tokens.
- ``clusters``: the pool is grouped by k-means (``retrieval.clusters``, deterministic);
  each group is a cached prefix (system text + the k pool states nearest its centre) and
  a state reads the prefix of its nearest centre. A batch is one forward pass whatever
  groups its rows read (the transformers back end stacks their cached prefixes), so queries
  cost about what fixed examples cost.

States in a position keep the fixed examples (labels exist for flat states only).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.config import template_roots
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.retrieval_config import RETRIEVAL_FIELDS, RetrievalConfig

KMEANS_ITERATIONS = 25


def template_features(template: str, config: RetrievalConfig, source: str = "llm config") -> tuple[str, ...]:
    """The numbers states are compared by: ``config.features``, or every one the template shows.

    A configured feature the template does not show is a UserError naming it: the model
    would read examples chosen for a number it cannot see.
    """
    shown = template_roots(template)
    if config.features:
        for name in config.features:
            if not shown.intersection(RETRIEVAL_FIELDS[name]):
                raise UserError(
                    f"llm.prompt.retrieval.features has '{name}' but llm.prompt.context_template shows none of "
                    f"{', '.join('{' + f + '}' for f in RETRIEVAL_FIELDS[name])}", file=source, value=name,
                    fix=f"add {{{RETRIEVAL_FIELDS[name][0]}}} to the template, or remove '{name}' from "
                        "retrieval.features (empty: the numbers the template shows)")
        return tuple(config.features)
    found = tuple(f for f, fields in RETRIEVAL_FIELDS.items() if shown.intersection(fields))
    if not found:
        raise UserError("llm.prompt.retrieval is on but llm.prompt.context_template shows no number states can be "
                        "compared by", file=source,
                        fix=f"show some of {', '.join('{' + f + '}' for f in RETRIEVAL_FIELDS)} in the template")
    return found


def feature_matrix(contexts: Sequence[AdvisorContext], features: Sequence[str]) -> np.ndarray:
    """(n, d) raw numbers of the contexts (NaN where missing)."""
    return np.array([[float(getattr(c, f)) for f in features] for c in contexts], dtype=np.float64).reshape(
        len(contexts), len(features))


@dataclass
class RetrievalPool:
    """Labelled flat states of training days, with the normalised matrix they are searched in."""

    contexts: list[AdvisorContext]
    """The states (flat, an entry legal), as the prompt renders them."""
    label: np.ndarray
    """Hindsight label of each (Action index: 0 HOLD, 1 BUY, 2 SELL)."""
    t: np.ndarray
    """Decision bar of each."""
    session: np.ndarray
    """Session (trading day) index of each: training days only."""
    dates: list[str]
    """Trading day of each, YYYY-MM-DD."""
    features: tuple[str, ...]
    """The numbers compared, in matrix column order."""
    source: str = ""
    """What the pool was built from (data file, split, labeller), for its digest."""
    mean: np.ndarray = field(init=False)
    scale: np.ndarray = field(init=False)
    matrix: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if not len(self.contexts):
            raise UserError("retrieval has no labelled training state to show",
                            fix="give the run training days inside the entry window (split.train, env.trade_start, "
                                "env.last_entry), or turn retrieval off (llm.prompt.retrieval.k: 0)")
        raw = feature_matrix(self.contexts, self.features)
        with np.errstate(all="ignore"):
            self.mean = np.nan_to_num(np.nanmean(raw, axis=0)) if raw.size else np.zeros(len(self.features))
            std = np.nanstd(raw, axis=0)
        self.scale = np.where(np.isfinite(std) & (std > 0), std, 1.0)
        self.matrix = self.normalise(raw)

    def __len__(self) -> int:
        return len(self.contexts)

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        z = (np.asarray(raw, dtype=np.float64) - self.mean) / self.scale
        return np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)

    def nearest(self, ctx: AdvisorContext, k: int) -> np.ndarray:
        """Indices of the ``k`` pool states nearest ``ctx``, farthest first (the nearest last); none of its day."""
        z = self.normalise(feature_matrix([ctx], self.features))[0]
        dist = ((self.matrix - z) ** 2).sum(axis=1)
        day = ctx.timestamp.strftime("%Y-%m-%d") if ctx.timestamp is not None else None
        if day is not None:
            dist = np.where(np.asarray(self.dates) == day, np.inf, dist)
        k = min(int(k), int(np.isfinite(dist).sum()))
        if k <= 0:
            return np.zeros(0, np.int64)
        idx = np.argpartition(dist, k - 1)[:k] if k < len(dist) else np.arange(len(dist))
        order = np.lexsort((-idx, -dist[idx]))  # farthest first; ties: the later bar first
        return idx[order].astype(np.int64)

    def digest(self) -> str:
        """Short hash of what the pool holds (its states, labels, features and source)."""
        ident = {"t": self.t.tolist(), "label": np.asarray(self.label).tolist(), "features": list(self.features),
                 "source": self.source}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


def kmeans(matrix: np.ndarray, groups: int, iterations: int = KMEANS_ITERATIONS) -> np.ndarray:
    """Centres of ``groups`` k-means clusters of the rows (deterministic: started from evenly spaced rows)."""
    n = len(matrix)
    groups = max(1, min(int(groups), n))
    centres = matrix[np.linspace(0, n - 1, groups).round().astype(np.int64)].copy()
    for _ in range(iterations):
        assign = ((matrix[:, None, :] - centres[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
        moved = np.array([matrix[assign == g].mean(axis=0) if (assign == g).any() else centres[g]
                          for g in range(groups)])
        if np.allclose(moved, centres):
            break
        centres = moved
    return centres


class Retriever:
    """Chooses and renders the retrieved examples of a state (attached to a ``PromptBuilder``)."""

    def __init__(self, pool: RetrievalPool, config: RetrievalConfig) -> None:
        if not config.enabled:
            raise UserError("llm.prompt.retrieval.k is 0: nothing to retrieve", fix="set retrieval.k, e.g. 4")
        self.pool = pool
        self.config = config
        self.k = int(config.k)
        self.mode = config.mode
        self._text: dict[int, str] = {}
        self.centres = kmeans(pool.matrix, config.clusters) if self.mode == "clusters" else None
        self.cluster_members: list[np.ndarray] = []
        if self.centres is not None:
            for c in self.centres:
                dist = ((pool.matrix - c) ** 2).sum(axis=1)
                k = min(self.k, len(dist))
                idx = np.argsort(dist, kind="stable")[:k]
                self.cluster_members.append(idx[::-1].astype(np.int64))  # nearest the centre last

    def identity(self) -> dict:
        """What decides the retrieved examples: the settings and the pool's digest."""
        return {"k": self.k, "mode": self.mode, "clusters": self.config.clusters if self.mode == "clusters" else None,
                "features": list(self.pool.features), "horizon": self.config.horizon,
                "pool_states": self.config.pool_states, "pool": self.pool.digest()}

    def cluster_of(self, ctx: AdvisorContext) -> int:
        assert self.centres is not None
        z = self.pool.normalise(feature_matrix([ctx], self.pool.features))[0]
        return int(((self.centres - z) ** 2).sum(axis=1).argmin())

    def neighbours(self, ctx: AdvisorContext) -> np.ndarray:
        """Pool indices of the examples ``ctx`` reads, in prompt order (empty: fixed examples)."""
        if ctx.position != 0:
            return np.zeros(0, np.int64)
        if self.mode == "clusters":
            return self.cluster_members[self.cluster_of(ctx)]
        return self.pool.nearest(ctx, self.k)

    def example_text(self, i: int, render, answer_prefix: str) -> str:
        """Pool state ``i`` in the template, answered with its label's action name."""
        text = self._text.get(i)
        if text is None:
            text = f"{render(self.pool.contexts[i])}\n{answer_prefix} {ACTION_WORDS[int(self.pool.label[i])]}"
            self._text[i] = text
        return text


def labels_of(pool: RetrievalPool, idx: np.ndarray) -> list[tuple[str, str]]:
    """(date, action name) of pool states ``idx`` (what a prompt shows, for tests and reports)."""
    return [(pool.dates[int(i)], ACTION_WORDS[int(pool.label[int(i)])]) for i in idx]
