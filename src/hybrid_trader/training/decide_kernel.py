"""The rollout's masked categorical decisions as one compiled call (numba), after the network's numpy forward.

Under ``ppo.fast_math`` the rollout decides in numpy (``training.lean_forward.LeanForward._numpy_decide``): the
actor's logits (phase 3: with the prior already added, ``agent.fusion.obs_fused_logits``), then
``MaskableCategorical``'s two normalisations (``x - logsumexp(x)``; the illegal actions at -1e8; again), the
probabilities, and one sample as ``torch.multinomial`` draws it (``argmax(p / q)``, ``q`` the exponential draws
from torch's generator). On four rows of six actions those were some twenty numpy calls of about a microsecond
each; here they are one loop over the rows, the same float32 formulas in the same order (``exp`` and ``log`` from
LLVM's library rather than numpy's: the last bit may differ, as ``fast_math`` allows; a tie goes to the first
action, as with ``np.argmax``). The matrix products stay numpy's (BLAS), and the draws torch's.
"""

from __future__ import annotations

import numba
import numpy as np

ALL_LEGAL = np.zeros((0, 0), dtype=np.bool_)
"""The ``masks`` argument of :func:`decide_into` where every action is legal."""


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _log_normalise(row: np.ndarray) -> None:  # pragma: no cover (compiled)
    """``row - logsumexp(row)`` in place, float32, the maximum subtracted first (``lean_backward.log_normalise``'s
    order)."""
    top = row.max()
    total = np.float32(0.0)
    for j in range(row.shape[0]):
        row[j] = row[j] - top
        total += np.exp(row[j])
    shift = np.log(total)
    for j in range(row.shape[0]):
        row[j] = row[j] - shift


@numba.njit(cache=True, nogil=True, error_model="numpy")
def decide_into(logits: np.ndarray, masks: np.ndarray, masked: float, queue: np.ndarray, chosen: np.ndarray,
                log_prob: np.ndarray) -> bool:  # pragma: no cover (compiled)
    """One action a row of ``logits`` ``(n, k)`` float32 into ``chosen`` (int64) and its log-probability into
    ``log_prob`` (float32).

    ``masks``: ``(n, k)`` legal actions, or :data:`ALL_LEGAL` (then one normalisation, as sb3-contrib's
    distribution without masks); ``masked``: the logit of an illegal action; ``queue``: ``(n, k)`` exponential
    draws. False (the rows after it not written) when a probability is not finite.
    """
    n, k = logits.shape
    row = np.empty(k, dtype=np.float32)
    low = np.float32(masked)
    for i in range(n):
        row[:] = logits[i]
        _log_normalise(row)
        if masks.shape[0]:  # then the illegal actions at ``masked`` and again (without masks, once)
            for j in range(k):
                if not masks[i, j]:
                    row[j] = low
            _log_normalise(row)
        best = -1
        best_ratio = np.float32(0.0)
        for j in range(k):
            p = np.exp(row[j])
            if not np.isfinite(p):
                return False
            ratio = p / queue[i, j]
            if best < 0 or ratio > best_ratio:
                best, best_ratio = j, ratio
        chosen[i] = best
        log_prob[i] = row[best]
    return True
