"""Error bars for studies: bootstrap confidence intervals, paired differences, the Deflated Sharpe Ratio."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

import numpy as np

EULER_GAMMA = 0.5772156649015329
_N = NormalDist()


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, draws: int = 10_000, seed: int = 0,
                 ) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its percentile bootstrap interval (NaN-free values; NaN when none)."""
    x = np.asarray([v for v in values if v == v], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    if len(x) == 1:
        return float(x[0]), math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(draws, len(x)))].mean(axis=1)
    a = (1.0 - level) / 2.0
    return float(x.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1.0 - a))


def paired_difference(a: Sequence[float], b: Sequence[float], **kwargs) -> tuple[float, float, float]:
    """Mean of ``a - b`` over pairs (the same seed and fold) with its bootstrap interval; pairs with a NaN dropped."""
    d = [x - y for x, y in zip(a, b) if x == x and y == y]
    return bootstrap_ci(d, **kwargs)


def fresh_day_comparison(dates: Sequence[str], agent: Sequence[float], momentum: Sequence[float]
                         ) -> dict[str, object]:
    """Days each traded from a fresh account (``evaluate(fresh_days=True)``'s ``fresh_day_pnl``): the agent's mean
    day, momentum's on the same days, and their paired difference day by day, each with its 95% bootstrap CI over
    the days."""
    if not len(dates) == len(agent) == len(momentum):
        raise ValueError(f"{len(dates)} dates, {len(agent)} agent days and {len(momentum)} momentum days: one each")

    def ci(values: tuple[float, float, float]) -> dict[str, float]:
        return dict(zip(("mean", "ci_low", "ci_high"), values))

    return {"days": len(dates), "first": dates[0] if dates else None, "last": dates[-1] if dates else None,
            "agent mean day [$]": ci(bootstrap_ci(agent)), "momentum mean day [$]": ci(bootstrap_ci(momentum)),
            "agent - momentum, paired by day [$]": ci(paired_difference(agent, momentum))}


def expected_max_sharpe(trials: int, variance: float) -> float:
    """The Sharpe ratio the best of ``trials`` independent skill-less trials reaches by luck (Bailey & Lopez de
    Prado 2014): ``sqrt(V) * ((1 - g) Z^-1(1 - 1/N) + g Z^-1(1 - 1/(N e)))``."""
    if trials < 2 or not variance > 0:
        return 0.0
    return math.sqrt(variance) * ((1 - EULER_GAMMA) * _N.inv_cdf(1 - 1 / trials)
                                  + EULER_GAMMA * _N.inv_cdf(1 - 1 / (trials * math.e)))


def deflated_sharpe_ratio(sharpe: float, n_obs: int, skew: float, kurtosis: float, trials: int,
                          trial_sharpe_variance: float) -> float:
    """Probability that the true Sharpe ratio beats the best of ``trials`` skill-less ones (per-period Sharpe).

    The PSR of ``sharpe`` against the benchmark :func:`expected_max_sharpe`; ``kurtosis`` is the
    plain (not excess) kurtosis of the returns, ``n_obs`` their count.
    """
    if n_obs < 2 or sharpe != sharpe:
        return math.nan
    sr0 = expected_max_sharpe(trials, trial_sharpe_variance)
    radicand = 1.0 - skew * sharpe + (kurtosis - 1.0) / 4.0 * sharpe ** 2
    if not radicand > 0:
        return math.nan
    return _N.cdf((sharpe - sr0) * math.sqrt(n_obs - 1) / math.sqrt(radicand))


def bootstrap_statistic(statistic: Callable[[np.ndarray], float], n: int, *, level: float = 0.95, draws: int = 1000,
                        seed: int = 0) -> tuple[float, float, float]:
    """``(value, low, high)``: ``statistic(indices)`` on all ``n`` items and its percentile bootstrap interval.

    For statistics that are not a mean of per-item values (balanced accuracy, a rank
    correlation); :func:`bootstrap_ci` is the fast path for means. NaN draws are dropped.
    """
    if n == 0:
        return math.nan, math.nan, math.nan
    value = float(statistic(np.arange(n)))
    if n == 1:
        return value, math.nan, math.nan
    rng = np.random.default_rng(seed)
    vals = np.array([statistic(rng.integers(0, n, size=n)) for _ in range(draws)], dtype=float)
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return value, math.nan, math.nan
    a = (1.0 - level) / 2.0
    return value, float(np.quantile(vals, a)), float(np.quantile(vals, 1.0 - a))
