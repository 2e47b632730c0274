"""What early stopping would have done to a finished search: ASHA and successive halving replayed on its curves.

A search run without a scheduler (``scheduler: none``) trains every configuration to its end and validates it every
``train.validate_every`` steps (``validation.jsonl`` in each trial's runs). Those curves hold all that a rung-based
scheduler reads, so a scheduler replayed on them tells, without training anything again, how many trial-steps it
would have saved and whether each fold would still select what the full search selects (the same configuration, or
one no worse on validation; :func:`~hybrid_trader.study.search_results.selection_of` is the selection in both).

Two schedulers, each over reduction factors and grace periods (:func:`replay_search`):

- ``asha``: Ray Tune's ``ASHAScheduler`` as it decides (:func:`replay_asha`). Trials start in the order of their
  samples on ``workers`` workers; each is judged when it first reports at or past a rung (``grace x rf^k`` steps),
  against the values recorded at that rung before it, and stopped when below their ``(1 - 1/rf)`` percentile. A
  trial's time is its recorded seconds spread evenly over its steps (the order in which trials reach a rung is what
  the decisions depend on).
- ``sha``: synchronous successive halving (:func:`replay_sha`): at each rung every live trial is judged at once and
  the best ``n // rf`` go on (at least one); it needs no timing and is the same whatever the order.

A trial the replay lets finish contributes its full steps; one it stops, the step of the report it was stopped at.
The replay also gives, per rung, the rank correlation (Spearman) between the trials' validation there and the
figure they are selected by at the end: how much an early rung can know.
"""

from __future__ import annotations

import heapq
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from hybrid_trader.errors import UserError
from hybrid_trader.run.files import atomic_write_text
from hybrid_trader.run.rundir import VALIDATION
from hybrid_trader.study.search_results import selection_of
from hybrid_trader.study.spec import StudySpec, load_study
from hybrid_trader.study.transport import TRIALS
from hybrid_trader.study.trials import read_trial
from hybrid_trader.training.selection import METRIC

REPLAY = "replay.json"
"""The replay's record in the study folder."""
SAVE_TARGET = 0.40
"""The share of the trial-steps an early-stopping setting must save (issue 36's target)."""
REDUCTION_FACTORS = (2, 3, 4)
"""The reduction factors replayed."""
GRACE_MULTIPLES = (1, 2, 3, 5)
"""The grace periods replayed, in validations (``train.validate_every`` steps each)."""


def asha_max_t(steps: int) -> int:
    """``max_t`` of the search's ``ASHAScheduler``: past a trial's last report (``steps + 1``), so that no rung
    stops a trial at its end."""
    return 2 * steps + 2


def asha_rungs(grace: int, reduction_factor: float, max_t: int) -> list[int]:
    """The rung milestones of Ray Tune's ``ASHAScheduler`` (one bracket), lowest first: ``grace x rf^k`` for the
    ``k`` its ``max_t`` allows."""
    count = int(np.log(max_t / grace) / np.log(reduction_factor) + 1)
    return [int(grace * reduction_factor ** k) for k in range(count)]


@dataclass(frozen=True)
class Curve:
    """One finished trial of a search: its periodic validation and the figure it is selected by."""

    row: Mapping[str, Any]
    """The trial's row (``trial.json``): sample, fold, status, steps, seconds, the selection figure."""
    points: tuple[tuple[int, float], ...]
    """``(step, validation net P&L per day)`` of each periodic validation, in order."""

    @property
    def steps(self) -> int:
        return int(self.row["steps"])

    def at(self, milestone: int) -> tuple[int, float] | None:
        """The first report at or past ``milestone``: ``(step, value)`` (None: the trial ends before)."""
        for step, value in self.points:
            if step >= milestone:
                return step, value
        return None


@dataclass
class Outcome:
    """A scheduler replayed on one fold."""

    steps: int
    """Trial-steps it trains."""
    full_steps: int
    """Trial-steps of the search without it."""
    stopped: dict[str, int] = field(default_factory=dict)
    """Each stopped trial and the step it was stopped at."""
    selected: str | None = None
    """The fold's selection among the trials it lets finish."""
    selected_value: float | None = None
    control: str | None = None
    """The selection of the search without it."""
    control_value: float | None = None

    @property
    def kept(self) -> bool:
        """The same selection, or one no worse by the selection figure (as good on validation)."""
        if self.control is None or self.selected == self.control:
            return True
        return self.selected_value is not None and self.control_value is not None \
            and self.selected_value >= self.control_value


def _value(row: Mapping[str, Any], metric: str, sign: float) -> float:
    return sign * float(row[metric])


def _outcome(spec: StudySpec, curves: Sequence[Curve], stopped: dict[str, int]) -> Outcome:
    fold = int(curves[0].row["fold"])
    full = sum(c.steps for c in curves)
    used = sum(stopped.get(str(c.row["trial"]), c.steps) for c in curves)
    rows = [dict(c.row) for c in curves]
    live = [r for r in rows if r["trial"] not in stopped]
    chosen, control = selection_of(spec, live, fold), selection_of(spec, rows, fold)
    metric, sign = spec.select.metric, (1.0 if spec.select.mode == "max" else -1.0)
    return Outcome(used, full, dict(stopped),
                   chosen["trial"] if chosen else None, _value(chosen, metric, sign) if chosen else None,
                   control["trial"] if control else None, _value(control, metric, sign) if control else None)


def replay_sha(spec: StudySpec, curves: Sequence[Curve], rungs: Sequence[int], reduction_factor: int) -> Outcome:
    """Synchronous successive halving on one fold's ``curves``: at each rung the best ``n // rf`` live trials (at
    least one) by their validation there go on; ties to the lower sample."""
    live = sorted(curves, key=lambda c: int(c.row["sample"]))
    stopped: dict[str, int] = {}
    for milestone in rungs:
        # trials that end before the rung just finish
        judged = [(c, got) for c in live if (got := c.at(milestone)) is not None]
        if len(judged) < 2:
            break
        keep = max(1, len(judged) // reduction_factor)
        ranked = sorted(judged, key=lambda item: (-_finite(item[1][1]), int(item[0].row["sample"])))
        for c, (step, _) in ranked[keep:]:
            stopped[str(c.row["trial"])] = step
        live = [c for c in live if str(c.row["trial"]) not in stopped]
    return _outcome(spec, curves, stopped)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else -math.inf


def replay_asha(spec: StudySpec, curves: Sequence[Curve], rungs: Sequence[int], reduction_factor: float,
                workers: int) -> Outcome:
    """Ray Tune's ``ASHAScheduler`` (``mode: max``, one bracket) on one fold's ``curves``, with ``workers`` trials at
    a time started in sample order; each trial's reports come at its steps x its seconds per step."""
    order = sorted(curves, key=lambda c: int(c.row["sample"]))
    rate = {str(c.row["trial"]): float(c.row.get("seconds") or 0.0) / max(c.steps, 1) for c in order}
    recorded: dict[int, list[float]] = {m: [] for m in rungs}
    judged: dict[str, set[int]] = {}
    stopped: dict[str, int] = {}
    events: list[tuple[float, int, int, str, int]] = []  # (time, sample, report, trial, step); the last: its end
    queue = list(order)

    def start(now: float) -> None:
        c = queue.pop(0)
        name, sample = str(c.row["trial"]), int(c.row["sample"])
        judged[name] = set()
        for k, (step, _) in enumerate(c.points):
            heapq.heappush(events, (now + step * rate[name], sample, k, name, step))
        heapq.heappush(events, (now + c.steps * rate[name], sample, len(c.points), name, c.steps + 1))

    for _ in range(min(max(1, workers), len(queue))):
        start(0.0)
    by_name = {str(c.row["trial"]): c for c in order}
    while events:
        now, _, report, name, step = heapq.heappop(events)
        if name in stopped:
            continue
        c = by_name[name]
        if report < len(c.points):
            if _asha_continues(recorded, judged[name], rungs, step, c.points[report][1], reduction_factor):
                continue
            stopped[name] = step
        else:  # its last report, the selection figure per day (``steps + 1``): recorded; the trial has finished
            _asha_continues(recorded, judged[name], rungs, step, float(c.row.get(METRIC, math.nan)), reduction_factor)
        if queue:  # the trial ended (finished or stopped): its worker starts the next
            start(now)
    return _outcome(spec, curves, stopped)


def _asha_continues(recorded: dict[int, list[float]], judged: set[int], rungs: Sequence[int], step: int,
                    value: float, reduction_factor: float) -> bool:
    """``ASHAScheduler``'s ``_Bracket.on_result`` (``stop_last_trials``, its default): the highest rung at or below
    ``step`` where the trial was not yet recorded judges it against the values recorded there before it (below
    their ``np.nanpercentile`` at ``(1 - 1/rf)``: stopped), then records its value."""
    for milestone in sorted(rungs, reverse=True):
        if step < milestone or milestone in judged:
            continue
        values = recorded[milestone]
        with warnings.catch_warnings():  # a rung of NaN values only: no cutoff (NaN), as in Tune
            warnings.simplefilter("ignore", RuntimeWarning)
            cutoff = float(np.nanpercentile(values, (1 - 1 / reduction_factor) * 100)) if values else None
        judged.add(milestone)
        values.append(value)
        return cutoff is None or not value < cutoff
    return True


def read_curves(out: Path, rows: Sequence[Mapping[str, Any]], phases: Sequence[int]) -> list[Curve]:
    """The finished trials of a search and their periodic validation (each phase's ``validation.jsonl``, its steps
    counted over the phases as the search reports them)."""
    curves = []
    for row in rows:
        if row.get("status") != "finished" or "sample" not in row:
            continue
        folder = out / TRIALS / str(row["trial"])
        points: list[tuple[int, float]] = []
        offset = 0
        per_phase = int(row["steps"]) // max(len(phases), 1)
        for phase in phases:
            path = folder / f"p{phase}" / VALIDATION
            if path.exists():
                for line in path.read_text().splitlines():
                    got = json.loads(line)
                    value = got.get(METRIC)
                    points.append((offset + int(got["time/total_timesteps"]),
                                   math.nan if value is None else float(value)))
            offset += per_phase
        curves.append(Curve(row, tuple(points)))
    return curves


def rung_correlations(spec: StudySpec, curves: Sequence[Curve], milestones: Sequence[int]) -> dict[int, float | None]:
    """Per milestone: Spearman's rank correlation between the trials' validation there and their selection figure
    (None with fewer than three trials or no spread)."""
    out: dict[int, float | None] = {}
    for m in milestones:
        pairs = [(got[1], float(c.row[spec.select.metric])) for c in curves if (got := c.at(m)) is not None
                 and math.isfinite(got[1]) and c.row.get(spec.select.metric) is not None]
        if len(pairs) < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
            out[m] = None
            continue
        rho = spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic
        out[m] = round(float(rho), 3)
    return out


def replay_search(spec: StudySpec, out: Path, rows: Sequence[Mapping[str, Any]], workers: int) -> dict[str, Any]:
    """Every setting (``asha`` and ``sha``, :data:`REDUCTION_FACTORS` x :data:`GRACE_MULTIPLES`) replayed on every
    fold of a search run without a scheduler; the record written to ``out/replay.json``."""
    if spec.scheduler != "none":
        raise UserError(f"the replay needs a search run with scheduler: none; this one ran with {spec.scheduler} "
                        "(its stopped trials have no curve past their stop)",
                        fix="replay the same study file with scheduler: none (its control), once it has run")
    base = spec.run_config(spec.variants[0], spec.seeds[0], 0, spec.phases[0])
    every = int(base.train.validate_every)
    if every <= 0:
        raise UserError("the replay reads the trials' periodic validation, and train.validate_every is 0",
                        fix="run the search with base: {train.validate_every: N}")
    curves = read_curves(out, rows, spec.phases)
    folds = sorted({int(c.row["fold"]) for c in curves})
    if not folds:
        raise UserError(f"{out}: no finished trial of a search to replay", fix="run the study first")
    settings: list[dict[str, Any]] = []
    correlations: dict[int, dict[int, float | None]] = {}
    by_fold = {fold: [c for c in curves if int(c.row["fold"]) == fold] for fold in folds}
    max_t = {fold: asha_max_t(max(c.steps for c in mine)) for fold, mine in by_fold.items()}
    for fold, mine in by_fold.items():
        end = max(c.steps for c in mine)
        milestones = sorted({m for rf in REDUCTION_FACTORS for g in GRACE_MULTIPLES
                             for m in asha_rungs(g * every, rf, max_t[fold]) if m < end})
        correlations[fold] = rung_correlations(spec, mine, milestones)
    for kind in ("asha", "sha"):
        for rf in REDUCTION_FACTORS:
            for multiple in GRACE_MULTIPLES:
                grace = multiple * every
                per_fold = {}
                for fold, mine in by_fold.items():
                    rungs = asha_rungs(grace, rf, max_t[fold])
                    per_fold[fold] = replay_asha(spec, mine, rungs, rf, workers) if kind == "asha" \
                        else replay_sha(spec, mine, rungs, rf)
                settings.append(_setting_record(kind, rf, grace, per_fold))
    meeting = [s for s in settings if s["saved_pct"] >= 100 * SAVE_TARGET and s["folds_kept"] == s["folds"]]
    record = {"workers": workers, "validate_every": every, "trials": len(curves), "folds": folds,
              "save_target_pct": 100 * SAVE_TARGET, "settings": settings,
              "meeting_target": [f"{s['scheduler']} rf={s['reduction_factor']} grace={s['grace_period']}"
                                 for s in meeting],
              "rung_spearman": {str(f): {str(m): v for m, v in c.items()} for f, c in correlations.items()}}
    atomic_write_text(out / REPLAY, json.dumps(record, indent=1))
    return record


def _setting_record(kind: str, rf: int, grace: int, per_fold: Mapping[int, Outcome]) -> dict[str, Any]:
    used = sum(o.steps for o in per_fold.values())
    full = sum(o.full_steps for o in per_fold.values())
    return {"scheduler": kind, "reduction_factor": rf, "grace_period": grace,
            "saved_pct": round(100.0 * (1 - used / full), 1) if full else 0.0,
            "folds": len(per_fold), "folds_kept": sum(o.kept for o in per_fold.values()),
            "per_fold": {str(f): {**asdict(o), "kept": o.kept} for f, o in per_fold.items()}}


def replay_table(record: Mapping[str, Any]) -> str:
    """The replay as a text table: a setting a line."""
    lines = [f"{'scheduler':9s} {'rf':>2s} {'grace':>8s} {'saved [%]':>9s} {'folds kept':>10s}  selections "
             "(replayed / without early stopping)"]
    for s in record["settings"]:
        picks = "; ".join(f"f{f}: {o['selected']} / {o['control']}" for f, o in s["per_fold"].items())
        lines.append(f"{s['scheduler']:9s} {s['reduction_factor']:>2d} {s['grace_period']:>8,d} "
                     f"{s['saved_pct']:>9.1f} {s['folds_kept']:>4d} of {s['folds']:<3d}  {picks}")
    return "\n".join(lines)


def replay_study(study: Path, out: Path, workers: int | None = None) -> dict[str, Any]:
    """:func:`replay_search` on the study folder ``out`` of the study file ``study`` (its trials' records);
    ``workers``: the search's (None: as its ``summary.json`` recorded, else 2)."""
    spec = load_study(study)
    if not spec.space:
        raise UserError(f"{study}: the replay replays a search (a study with a space); this one has none",
                        fix="replay a study with space: and scheduler: none, once it has run")
    folder = out / TRIALS
    if not folder.is_dir():
        raise UserError("no trials to replay", file=str(folder), fix=f"run the study first (--out {out})")
    rows = [row for path in sorted(folder.iterdir()) if (row := read_trial(path)) is not None]
    if workers is None:
        try:
            workers = int(json.loads((out / "summary.json").read_text())["timing"]["workers"])
        except (OSError, ValueError, KeyError, TypeError):
            workers = 2
    return replay_search(spec, out, rows, workers)
