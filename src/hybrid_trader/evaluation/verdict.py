"""The prop-firm verdict: how often a policy would pass an evaluation, and what an attempt costs.

A single account over a long period measures "when did it breach"; a prop trader asks "how
often would this pass, and what does it cost me per attempt?". Two ways to answer, each a
series of *attempts*, every attempt a fresh evaluation account under the run's rules:

- ``rolling``: an attempt started on every trading day of the period, each followed until it
  passes, breaches, or runs out of days (``max_days``, or the end of the data: *censored*, an
  attempt the data cut short, which might still have passed or breached; the rates count it as
  neither, so with censored attempts they are lower bounds);
- ``sequential``: one continuing trader: an attempt starts, and the next one starts on the day
  after it passed or breached (a reset), so a breach never ends the measurement.

Figures per policy (:data:`VERDICT_FIGURES`): pass and breach rates, median days to pass and
to breach, and the expected dollar outcome per attempt, ``pass rate x pass_value - fee``,
with the first attempt paying the evaluation fee and later ones the reset fee
(:class:`VerdictConfig`). The policies run through the same environment, account and fills
as every evaluation (``TradingEnv``, ``PropFirmAccount``): nothing here re-implements a rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from hybrid_trader.env import EnvConfig, TradingEnv
from hybrid_trader.env.account import Verdict
from hybrid_trader.errors import UserError


@dataclass(frozen=True)
class VerdictConfig:
    """Fees and limits of the prop-firm verdict (defaults: Apex 50K, public prices at the time of writing)."""

    evaluation_fee: float = 167.0
    """Price of a first evaluation attempt [$] (Apex 50K monthly price, before discounts)."""
    reset_fee: float = 80.0
    """Price of each later attempt, a reset [$] (Apex's reset price)."""
    pass_value: float = 0.0
    """What a passed evaluation is worth to you [$] (a funded account's expected payouts); 0: count fees only."""
    max_days: int = 30
    """Trading days an attempt may take before it counts as neither passed nor breached."""

    def __post_init__(self) -> None:
        for name in ("evaluation_fee", "reset_fee", "pass_value"):
            if not np.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise UserError(f"verdict.{name} {getattr(self, name)!r} must be a finite amount >= 0")
        if self.max_days < 1:
            raise UserError(f"verdict.max_days {self.max_days} must be at least 1")


VERDICT_FIGURES = {
    "Attempts": "evaluation accounts started",
    "Pass rate [%]": "attempts that reached the profit target before any breach",
    "Breach rate [%]": "attempts that touched the trailing threshold first",
    "Median days to pass": "trading days of the passed attempts, median",
    "Median days to breach": "trading days of the breached attempts, median",
    "Censored [%]": "attempts the data ended before they passed, breached or ran max_days (the rates are lower "
                    "bounds)",
    "Expected outcome per attempt [$]": "pass rate x pass_value - the mean fee of an attempt",
    "Fees per pass [$]": "fees paid over all attempts / passes (NaN without a pass)",
}
"""The figures of :func:`prop_verdict` and their definitions."""


@dataclass(frozen=True)
class Attempt:
    """One evaluation account's outcome."""

    start_day: int
    """Index of its first day among the environment's trading days."""
    days: int
    """Trading days it ran."""
    verdict: str
    """``passed``, ``breached`` or ``neither``."""
    censored: bool = False
    """Neither, because the data ended before ``max_days``: it might still have passed or breached."""


def run_attempt(env: TradingEnv, policy: Callable, start: int, max_days: int) -> Attempt:
    """Trade ``policy`` from a fresh account on day ``start`` until it passes, breaches or ``max_days`` end."""
    obs, _ = env.reset(seed=0, options={"start": start})
    windows = env.episode_windows
    final = windows[min(start + max_days, len(windows)) - 1]
    last = final.last
    decided_on = last if final.end_known else last + 1  # a last bar not known as the last is decided on, then closed
    account = env.account
    while True:
        obs, _, terminated, truncated, _ = env.step(policy(obs, env.action_masks(), env))
        verdict = account.verdict
        if verdict is not Verdict.NEITHER or terminated or truncated or env.current_index >= decided_on:
            break
    # the day of the bar that decided it (the step may already stand on the next day's first bar)
    decided = {Verdict.PASSED: account.target_index, Verdict.BREACHED: account.breach_index}.get(verdict, last)
    days = sum(1 for w in windows[start:] if w.first <= min(decided, last))
    return Attempt(start, days, verdict.value, verdict is Verdict.NEITHER and days < max_days)


def prop_verdict(make_policy: Callable[[], Any], market: Any, env_config: EnvConfig, sessions: Sequence[int],
                 config: VerdictConfig | None = None, mode: Literal["rolling", "sequential"] = "rolling",
                 **env_kwargs: Any) -> dict[str, float]:
    """The figures of :data:`VERDICT_FIGURES` for the policies ``make_policy`` makes (one per attempt)."""
    config = config or VerdictConfig()
    cfg = dataclasses.replace(env_config, episode_sessions=None, terminate_on_breach=True)
    env = TradingEnv(market.bars, market.features, cfg, sessions=list(sessions), **env_kwargs)
    n_days = len(env.episode_windows)
    attempts: list[Attempt] = []
    day = 0
    while day < n_days:
        a = run_attempt(env, make_policy(), day, config.max_days)
        attempts.append(a)
        day = day + 1 if mode == "rolling" else day + a.days
    return verdict_figures(attempts, config)


def verdict_figures(attempts: Sequence[Attempt], config: VerdictConfig) -> dict[str, float]:
    """Rates, medians and money of a series of attempts (golden-value tested)."""
    n = len(attempts)
    passed = [a.days for a in attempts if a.verdict == Verdict.PASSED.value]
    breached = [a.days for a in attempts if a.verdict == Verdict.BREACHED.value]
    fees = config.evaluation_fee + max(n - 1, 0) * config.reset_fee
    pass_rate = len(passed) / n if n else float("nan")
    return {
        "Attempts": float(n),
        "Pass rate [%]": 100.0 * pass_rate,
        "Breach rate [%]": 100.0 * len(breached) / n if n else float("nan"),
        "Median days to pass": float(np.median(passed)) if passed else float("nan"),
        "Median days to breach": float(np.median(breached)) if breached else float("nan"),
        "Censored [%]": 100.0 * sum(a.censored for a in attempts) / n if n else float("nan"),
        "Expected outcome per attempt [$]": pass_rate * config.pass_value - fees / n if n else float("nan"),
        "Fees per pass [$]": fees / len(passed) if passed else float("nan"),
    }


SMALL_SAMPLE = 30
"""Fewer attempts than this make a verdict a small sample (its rates are warned about)."""


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate ``successes / n`` (95% by default); (nan, nan) for ``n`` 0."""
    if n <= 0:
        return float("nan"), float("nan")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def small_sample_warning(figures: dict[str, float], days: int) -> str | None:
    """A warning when a policy's verdict rests on fewer than :data:`SMALL_SAMPLE` attempts, with the 95%
    interval of its pass rate, or when the data cut its attempts short (censored: the rates are lower bounds);
    None otherwise."""
    n = int(figures.get("Attempts", 0))
    said = []
    if n < SMALL_SAMPLE:
        passes = round(figures.get("Pass rate [%]", 0.0) * n / 100.0) if n else 0
        low, high = wilson_interval(passes, n)
        rate = f"its pass rate of {passes}/{n} is anywhere from {100 * low:.0f}% to {100 * high:.0f}% (95% " \
               "interval)" if n else "no rate can be measured"
        said.append(f"small sample: {n} attempt(s) over {days} trading day(s); {rate}. Read the verdict on at least "
                    f"{SMALL_SAMPLE} attempts (--split all, or more days in --data)")
    censored = round(figures.get("Censored [%]", 0.0) * n / 100.0) if n else 0
    if censored:
        said.append(f"{censored} of {n} attempt(s) ran out of data before --max-days without passing or breaching: "
                    "the pass and breach rates are lower bounds (more days in --data, or a smaller --max-days)")
    return "; ".join(said) or None
