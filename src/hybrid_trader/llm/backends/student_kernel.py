"""The student's forward on the CPU as one compiled kernel (numba), writing where its answer is needed.

Always-on phase 3 asks the student once per vector step for a handful of rows. In numpy
that forward was some twenty array calls of about a microsecond each, and twice that
inside the training loop, where the policy's forward evicts the student's arrays from
the caches; compiled, the whole forward, the copy of the features into the phase 3
observation and the writing of the advice block are one call (measured in
``docs/TRAINING.md``). The same kernel answers every CPU caller (training, evaluation,
the executor), so a student's advice does not depend on who asks.

The network is :class:`~hybrid_trader.llm.backends.student_backend.StudentNet`:
normalise and clip the inputs, ``Linear`` + ReLU layers, then one head of six action
logits (a softmax over the legal actions; HOLD is made legal in a row where no action is)
and one confidence logit (a sigmoid). :func:`pack_student` flattens its weights into one float32
vector; :func:`forward_into` reads it. Sums run in float32 in input order, so the answers
differ from the torch network's in the last bits only (tested against it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from hybrid_trader.actions import N_ACTIONS

CLIP = 10.0
"""Normalised inputs are clipped to [-CLIP, CLIP] (as in the torch network)."""
NO_COLUMN = -1
"""A column argument of :func:`forward_into` that is not written."""


@dataclass(frozen=True)
class PackedStudent:
    """A student's weights as the kernel reads them."""

    params: np.ndarray
    """float32: mean, 1/std, then each layer's weight (inputs x outputs, row-major) and bias, the heads last."""
    widths: np.ndarray
    """int64: the inputs, each hidden layer's units, then ``N_ACTIONS + 1`` (the heads)."""


def pack_student(state: dict[str, Any]) -> PackedStudent:
    """Flatten a ``StudentNet``'s state dict (numpy or torch values) for the kernel (its layers read from the
    keys: ``body.<i>.weight`` for each ``Linear`` of the body, in order)."""
    def arr(key: str) -> np.ndarray:
        value = state[key]
        value = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        return value.astype(np.float32)

    mean = arr("mean")
    parts = [mean, (1.0 / arr("std")).astype(np.float32)]
    body = sorted(int(key.split(".")[1]) for key in state if key.startswith("body.") and key.endswith(".weight"))
    hidden = []
    for i in body:  # body = Linear, ReLU, Linear, ReLU, ...
        weight = arr(f"body.{i}.weight")  # (out, in)
        parts += [weight.T.ravel(), arr(f"body.{i}.bias")]
        hidden.append(weight.shape[0])
    head_w = np.concatenate([arr("logits.weight"), arr("confidence.weight")])  # (N_ACTIONS + 1, last)
    parts += [head_w.T.ravel(), np.concatenate([arr("logits.bias"), arr("confidence.bias")])]
    widths = np.array([len(mean), *hidden, N_ACTIONS + 1], dtype=np.int64)
    return PackedStudent(np.ascontiguousarray(np.concatenate(parts), dtype=np.float32), widths)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _layers(params, widths, x, y):  # pragma: no cover  (compiled: coverage does not see inside)
    """The body and the heads on the normalised inputs in ``x[:widths[0]]``; the heads' outputs land in
    ``x[:N_ACTIONS + 1]``."""
    n_layers = len(widths) - 1
    off = 2 * widths[0]
    for k in range(n_layers):
        n_in = widths[k]
        n_out = widths[k + 1]
        # 2-D views: the inner loop then indexes with loop counters only, which LLVM vectorises
        weight = params[off:off + n_in * n_out].reshape((n_in, n_out))
        bias = params[off + n_in * n_out:off + n_in * n_out + n_out]
        for u in range(n_out):
            y[u] = np.float32(0.0)
        for j in range(n_in):
            xj = x[j]
            for u in range(n_out):
                y[u] += xj * weight[j, u]
        for u in range(n_out):
            v = y[u] + bias[u]
            x[u] = max(v, np.float32(0.0)) if k < n_layers - 1 else v  # ReLU but on the heads
        off += n_in * n_out + n_out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _softmax(x, legal, probs):  # pragma: no cover  (compiled: coverage does not see inside)
    """Softmax of the action logits ``x[:N_ACTIONS]`` over the legal actions (HOLD where none is) into ``probs``."""
    none = True
    for a in range(N_ACTIONS):
        none = none and not legal[a]
    top = np.float32(-np.inf)
    for a in range(N_ACTIONS):
        if (legal[a] or (none and a == 0)) and x[a] > top:
            top = x[a]
    total = np.float32(0.0)
    for a in range(N_ACTIONS):
        e = np.float32(0.0)
        if legal[a] or (none and a == 0):
            e = np.float32(np.exp(x[a] - top))
        probs[a] = e
        total += e
    for a in range(N_ACTIONS):
        probs[a] /= total


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _forward_into(params, widths, layout, obs, masks, out):  # pragma: no cover  (compiled: coverage does not see)
    """``layout``: the output's ``(probs_col, conf_col, present_col, copy)`` (:func:`forward_into`)."""
    probs_col, conf_col, present_col, copy = layout
    d = widths[0]
    size = 0
    for w in widths:
        size = max(size, w)
    x = np.empty(size, np.float32)
    y = np.empty(size, np.float32)
    probs = np.empty(N_ACTIONS, np.float32)
    mean = params[:d]
    inv_std = params[d:2 * d]
    lo = np.float32(-CLIP)
    hi = np.float32(CLIP)
    for r in range(obs.shape[0]):
        for j in range(copy):
            out[r, j] = obs[r, j]
        for j in range(d):
            x[j] = min(max((obs[r, j] - mean[j]) * inv_std[j], lo), hi)
        _layers(params, widths, x, y)
        _softmax(x, masks[r], probs)
        if probs_col >= 0:
            for a in range(N_ACTIONS):
                out[r, probs_col + a] = probs[a]
        if conf_col >= 0:
            out[r, conf_col] = np.float32(1.0) / (np.float32(1.0) + np.float32(np.exp(-x[N_ACTIONS])))
        if present_col >= 0:
            out[r, present_col] = np.float32(1.0)


def forward_into(packed: PackedStudent, obs: np.ndarray, masks: np.ndarray, out: np.ndarray, *,
                 probs_col: int = 0, conf_col: int = N_ACTIONS, present_col: int = NO_COLUMN,
                 copy: int = 0) -> None:
    """The student's answer for each row of ``obs`` (float32, at least ``packed.widths[0]`` values a row), in ``out``.

    Row ``r`` of ``out`` (float32) gets the first ``copy`` values of ``obs[r]``, the six
    action probabilities (zero on illegal actions) at ``probs_col``, the confidence at
    ``conf_col`` and 1.0 at ``present_col``; other values are left as they are; a column
    of :data:`NO_COLUMN` is not written. ``masks`` (bool, one row of six legal actions
    per row of ``obs``).
    """
    # one compiled version: C-ordered float32 rows and bool masks (no copy when they already are)
    _forward_into(packed.params, packed.widths, (probs_col, conf_col, present_col, copy),
                  np.ascontiguousarray(obs, dtype=np.float32), np.ascontiguousarray(masks, dtype=np.bool_), out)


def block_writer(packed: PackedStudent, *, probs_col: int, conf_col: int, present_col: int,
                 copy: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """``write(obs, masks, out)``: :func:`forward_into` with these columns, bound once (training's every step:
    no keyword handling or conversion a call). ``obs`` must be C-ordered float32 and ``masks`` bool (other
    layouts work but compile the kernel again)."""
    return functools.partial(_forward_into, packed.params, packed.widths, (probs_col, conf_col, present_col, copy))
