"""The variants ablation of issue 14: does the LLM help, and does learned trust help more?

From one phase 2 run (and the student distilled into it), on the same bars, splits and
seeds, ``run_ablation`` trains (or reuses, when already finished) one run per variant
and seed under ``OUT/<variant>-s<seed>/``, each for the same number of steps:

=============================  ==============================================================
variant                        run
=============================  ==============================================================
``RL only``                    phase 2 continued (no LLM)
``RL only, phase 3``           phase 3 without advice (``llm.query.mode: never``): the risk veto
                               and the observation of the LLM variants, no LLM (their control)
``constant prior + student``   phase 3, ``llm.backend: student``, ``fusion.mode: constant``
``constant prior + trend rule`` phase 3, ``llm.backend: trend_rule`` asked on every decision: the
                               rule that reads only the prompt's trend label (the LLM's control:
                               does the LLM beat the label our own code writes?)
``learned fusion + student``   phase 3, ``llm.backend: student``, ``fusion.mode: learned``
``learned fusion + LLM``       (``teacher=``) the learned runs, evaluated with the real LLM
                               (the teacher back end) instead of the student, asked when the
                               query policy says so
=============================  ==============================================================

The last variant trains nothing: it shows what the real LLM gives at evaluation in the
student's place, asked (synchronously, as evaluation asks it: on minute bars its latency
fits inside the bar) on the decisions the query policy picks, as in live trading without
a student (its query rate is in the table). Its evaluations go to ``RUN/eval/<split>-llm-<teacher>``, beside the
student's.

then evaluates every run on the same split (``evaluate_run``) and reports, per variant,
the mean and the spread (standard deviation) over seeds of net P&L, Sharpe, PSR, trades,
the Apex verdicts, the query rate and the RL/LLM agreement. ``OUT/ablation.json`` holds
everything (also what ``evaluate --ablation OUT --json`` prints), ``OUT/ABLATION.md`` the table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.evaluate import EvaluationRequest, evaluate_run
from hybrid_trader.evaluation.metrics import jsonable, metrics_from_json
from hybrid_trader.evaluation.policies import GATE_LABELS
from hybrid_trader.evaluation.results import load_index, read_json
from hybrid_trader.llm.stats import label
from hybrid_trader.run import RunDir
from hybrid_trader.run.advice_dataset import student_path
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.market import load_market
from hybrid_trader.run.rundir import CONFIG, METRICS, MODEL, RESULTS, STATUS, is_stale
from hybrid_trader.training.runner import resume_conflicts, train_run, with_absolute_data

FIGURES = ("Net PnL [$]", "Sharpe (ann.)", "PSR [%]", "Trades", "Max drawdown [$]")
"""The agent's evaluation figures compared across variants (mean and spread over seeds)."""
FRESH_FIGURES = ("Net PnL, fresh days [$]", "Sharpe, fresh days (ann.)", "Breached days, fresh")
"""The same days traded each from a fresh account (``runner.run_fresh_days``): the policy free of the path."""
LLM_FIGURES = {label("llm/query_rate_pct"): "Query rate [%]", label("fusion/agreement_pct"): "Agreement [%]",
               GATE_LABELS["fusion/gate_mean"]: "Trust w(s) (mean)"}
"""LLM figures of the evaluation (``extra.llm`` labels) and their names in the ablation table."""
VERDICT = "Apex verdict"


@dataclass(frozen=True)
class Variant:
    """One variant: its name, its folder stem and the config keys it sets over the phase 2 run's config."""

    name: str
    slug: str
    overrides: dict


def variants(student: str) -> tuple[Variant, ...]:
    """The five trained variants, the LLM ones advised by ``student`` (and the trend-label rule, their control)."""
    p3 = {"env.phase": 3, "llm.backend": "student", "llm.student.path": student}
    return (
        Variant("RL only", "rl-only", {"env.phase": 2}),
        # the control of the LLM variants: same environment (risk veto, 33 LLM features), advice block
        # always empty; without it a difference could be the veto's, not the LLM's
        Variant("RL only, phase 3", "rl-p3", {"env.phase": 3, "llm.backend": "mock", "llm.query.mode": "never"}),
        Variant("constant prior + student", "constant", {**p3, "fusion.mode": "constant"}),
        Variant("constant prior + trend rule", "trend-rule",
                {"env.phase": 3, "llm.backend": "trend_rule", "llm.query.mode": "always", "fusion.mode": "constant"}),
        Variant("learned fusion + student", "learned", {**p3, "fusion.mode": "learned"}),
    )


def _refuse_other_settings(run_dir: Path, config: RunConfig, name: str, seed: int) -> None:
    """A run of an earlier ablation reused only when trained with exactly these settings (steps and student too)."""
    saved = RunDir(run_dir).load_config(RunConfig)
    diffs = resume_conflicts(with_absolute_data(saved), with_absolute_data(config))
    if saved.ppo.total_timesteps != config.ppo.total_timesteps:
        diffs.append(f"ppo.total_timesteps: the run has {saved.ppo.total_timesteps}, "
                     f"given {config.ppo.total_timesteps}")
    if diffs:
        raise UserError(f"{name}, seed {seed}: {run_dir} was trained with other settings, and the table would "
                        "claim the new ones:\n    " + "\n    ".join(diffs),
                        fix="give a new --ablation folder for the new settings, or repeat the settings of this one "
                            f"(see {run_dir / CONFIG})")


def _finished(run_dir: Path) -> bool:
    status = RunDir(run_dir).read_status() if (run_dir / STATUS).exists() else {}
    return status.get("state") == "finished" and (run_dir / MODEL).exists()


TEACHER_VARIANT = "learned fusion + LLM (query policy)"
"""The learned runs evaluated with the real LLM asked on the query policy's triggers (``teacher=``)."""


def run_ablation(p2_run: Path, out: Path, *, timesteps: int, seeds: Sequence[int] = (0, 1, 2), split: str = "test",
                 student: str | None = None, teacher: str | None = None,
                 say: Callable[[str], None] = print) -> dict:
    """Train (or reuse) every variant x seed from ``p2_run`` into ``out``, evaluate them on ``split``; the table.

    ``teacher``: an LLM back end name (e.g. ``transformers``); the learned runs are also
    evaluated with it in place of the student, asked when the query policy says so.
    """
    p2_run, out = Path(p2_run).resolve(), Path(out).resolve()  # recorded paths work from any directory
    RunDir(p2_run).require()
    if (out / CONFIG).exists() or (out / STATUS).exists():
        raise UserError(f"--ablation {out} is a run directory; the ablation writes one run per variant and seed "
                        "into its own folder", fix="give a new folder, e.g. --ablation runs/ablation")
    base = RunDir(p2_run).load_config(RunConfig)
    if base.env.phase != 2:
        raise UserError(f"the ablation starts from a phase 2 run; {p2_run} is phase {base.env.phase}",
                        fix="pass the phase 2 run the student was distilled into")
    if len(seeds) < 1 or timesteps < 1:
        raise UserError(f"need at least one seed and one step (seeds {list(seeds)}, timesteps {timesteps})")
    student = str(Path(student).resolve()) if student else str(student_path(p2_run).resolve())
    if not Path(student).is_file():
        raise UserError("no student to advise the phase 3 variants", file=student,
                        fix=f"hybrid-trader advise collect {p2_run} && hybrid-trader advise distill {p2_run}")
    check_writable(out, what="--ablation")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"--ablation {out} is a file, not a folder", file=str(out),
                        fix="give a folder for the variants' runs, e.g. --ablation runs/ablation") from None
    market = load_market(base.data, base.split)
    runs: dict[str, list[Path]] = {}
    common = {"ppo.total_timesteps": int(timesteps), "train.progress_bar": False}
    for variant in variants(student):
        runs[variant.name] = []
        for seed in seeds:
            run_dir = out / f"{variant.slug}-s{seed}"
            runs[variant.name].append(run_dir)
            config = merge_overrides(base, {**variant.overrides, **common, "ppo.seed": int(seed)},
                                     source="ablation variant")
            if (run_dir / CONFIG).exists():
                _refuse_other_settings(run_dir, config, variant.name, seed)
            if _finished(run_dir):
                say(f"{variant.name}, seed {seed}: {run_dir} already trained with these settings")
                continue
            say(f"{variant.name}, seed {seed}: training {timesteps:,} steps -> {run_dir}")
            if run_dir.exists() and not any(run_dir.iterdir()):
                run_dir.rmdir()
            if run_dir.exists():
                train_run(config, run_dir, resume=True, market=market, quiet=True)
            else:
                train_run(config, run_dir, init=p2_run, market=market, quiet=True)
    evals: dict[str, dict] = {}
    if teacher:
        if teacher == "student":
            raise UserError("--ablation-teacher student: the teacher is the LLM the student was distilled from",
                            fix="name its back end, e.g. transformers, llama_cpp or openai")
        learned = next(v for v in variants(student) if v.slug == "learned")
        runs[TEACHER_VARIANT] = list(runs[learned.name])
        evals[TEACHER_VARIANT] = {"llm_overrides": {"backend": teacher}, "tag": f"llm-{teacher}"}
    table = evaluate_variants(runs, split=split, say=say, evals=evals)
    table.update({"p2_run": str(p2_run), "student": student, "timesteps": int(timesteps), "seeds": list(seeds),
                  "teacher": teacher})
    atomic_write_text(out / "ablation.json", json.dumps(jsonable(table), indent=2))
    atomic_write_text(out / "ABLATION.md", ablation_markdown(table) + "\n")
    return table


def evaluate_variants(runs: dict[str, list[Path]], *, split: str = "test", say: Callable[[str], None] = print,
                      evals: dict[str, dict] | None = None) -> dict:
    """Evaluate each variant's runs on ``split`` (the same days for all: checked); mean and spread per variant.

    ``evals[name]``: ``llm_overrides`` for that variant's evaluations, written under
    ``RUN/eval/<split>-<tag>`` (not over the run's own evaluation).
    """
    out: dict[str, Any] = {"split": split, "variants": {}}
    dates = None
    for name, run_dirs in runs.items():
        per_seed = []
        options = (evals or {}).get(name, {})
        for run_dir in run_dirs:
            where = RunDir(run_dir).eval_dir(split)
            if "tag" in options:
                where = where.with_name(f"{where.name}-{options['tag']}")
            backend = (options.get("llm_overrides") or {}).get("backend")
            stored = stored_evaluation(run_dir, split, where, backend)
            if stored is None:
                say(f"{name}: evaluating {run_dir.name} on {split}" + (f" with {backend} (minutes for a local LLM)"
                                                                    if backend else ""))
                ev = evaluate_run(run_dir, EvaluationRequest(split=split, seeds=1, quiet=True, ablation=False,
                                                             llm_overrides=options.get("llm_overrides"), out_dir=where,
                                                             fresh_days=True))
                stored = ev.metrics["agent"], ev.extra.get("llm") or {}, ev.dates, ev.extra["fresh_days"]
            else:
                say(f"{name}: {run_dir.name} already evaluated on {split} ({where})")
            agent, llm, run_dates, fresh = stored
            if dates is None:
                dates = run_dates
            elif tuple(run_dates) != tuple(dates):
                raise UserError(f"{run_dir} was evaluated on {run_dates}, the other variants on {dates}",
                                fix="train every variant from the same phase 2 run (same bars and split)")
            row = {k: agent.get(k) for k in (*FIGURES, VERDICT)}
            row.update({k: fresh.get(k) for k in FRESH_FIGURES})
            row.update({short: llm.get(long) for long, short in LLM_FIGURES.items() if llm.get(long) is not None})
            row["run"] = str(run_dir)
            row["eval_dir"] = str(where)
            per_seed.append(row)
            say(f"{name}: {run_dir.name} net P&L {_fmt(row.get('Net PnL [$]'))}, trades {row.get('Trades')}")
        out["variants"][name] = summarise(per_seed)
    out["dates"] = dates
    return out


def stored_evaluation(run_dir: Path, split: str, where: Path, backend: str | None) -> tuple | None:
    """``(agent metrics, llm figures, dates, fresh-day figures)`` of an evaluation already in ``where``, when
    it is of the run's current model on ``split``, advised by ``backend`` (None: the run's own back end,
    none in phase 2); else None.

    A rerun of the ablation (more seeds, a new variant) then evaluates only what is new;
    an evaluation with the real LLM takes minutes.
    """
    run = RunDir(run_dir)
    if not (where / RESULTS).is_file() or is_stale(where) or not (where / METRICS).is_file():
        return None
    try:
        index = load_index(where)
        info = index.get("info") or {}
        metrics = metrics_from_json(read_json(where / METRICS, what="metrics"))
        dates = (read_json(run.split_path, what="split") or {}).get("dates", {}).get(split)
        agent = next(s for s in index["strategies"] if s.get("extra", {}).get("role") == "agent")
        config = run.load_config(RunConfig)
    except (UserError, StopIteration, AttributeError, KeyError, TypeError):
        return None
    if info.get("split") != split or info.get("model_sha256") != run.model_sha256() or not dates:
        return None
    # an evaluation with another advisor (evaluate --llm ...) in the same folder is not this variant's
    expected = backend or (config.llm.backend if config.env.phase == 3 else None)
    if info.get("llm_backend") != expected:
        return None
    fresh = agent.get("extra", {}).get("fresh_days")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("agent"), dict) or not isinstance(fresh, dict):
        return None
    return metrics["agent"], agent.get("extra", {}).get("llm") or {}, tuple(dates), fresh


def summarise(per_seed: list[dict]) -> dict:
    """Mean and standard deviation over seeds of each numeric figure; verdict counts."""
    keys = [k for k in (*FIGURES, *FRESH_FIGURES, *LLM_FIGURES.values()) if any(r.get(k) is not None for r in per_seed)]
    mean: dict[str, float | None] = {}
    std: dict[str, float | None] = {}
    for k in keys:
        values = [float(r[k]) for r in per_seed if isinstance(r.get(k), (int, float)) and math.isfinite(float(r[k]))]
        mean[k] = float(np.mean(values)) if values else None
        std[k] = float(np.std(values, ddof=1)) if len(values) > 1 else None  # the sample's, as every seed table
    verdicts: dict[str, int] = {}
    for r in per_seed:
        verdicts[str(r.get(VERDICT))] = verdicts.get(str(r.get(VERDICT)), 0) + 1
    return {"seeds": len(per_seed), "mean": mean, "std": std, "verdicts": verdicts, "per_seed": per_seed}


def _fmt(value: Any) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else ("-" if value is None else str(value))


def ablation_rows(table: dict) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The variants' names and the table's rows ``(figure, cells)``: ``mean ± std`` over seeds, verdicts, seeds."""
    names = list(table["variants"])
    keys = [k for k in (*FIGURES, *FRESH_FIGURES, *LLM_FIGURES.values())
            if any(k in table["variants"][n]["mean"] for n in names)]
    rows: list[tuple[str, list[str]]] = []
    for k in keys:
        cells = []
        for n in names:
            v = table["variants"][n]
            m, s = v["mean"].get(k), v["std"].get(k)
            spread = "" if s is None else f" ± {s:,.2f}"  # none with one seed
            cells.append("-" if m is None else f"{m:,.2f}{spread}")
        rows.append((k, cells))
    verdicts = [table["variants"][n]["verdicts"] for n in names]
    rows.append((VERDICT, [", ".join(f"{verdict} {count}" for verdict, count in v.items()) for v in verdicts]))
    rows.append(("seeds", [str(table["variants"][n]["seeds"]) for n in names]))
    return names, rows


def ablation_title(table: dict) -> str:
    """``Ablation on the test split (first day to last day)``."""
    head = f"Ablation on the {table['split']} split"
    if table.get("dates"):
        head += f" ({table['dates'][0]} to {table['dates'][1]})"
    return head


def ablation_markdown(table: dict) -> str:
    """The variants as a Markdown table: one column per variant, ``mean ± std`` over seeds."""
    names, rows = ablation_rows(table)
    lines = ["| figure | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in rows]
    return ablation_title(table) + ", mean ± std over seeds:\n\n" + "\n".join(lines)
