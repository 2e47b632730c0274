"""Trials another study folder already ran, taken instead of run again (``study --reuse OTHER``).

A variant added after a study was declared makes a new study (its identity changes, ``study.engine``), and that
study would train again every trial it shares with the old one. :func:`reuse_trials` copies those finished trials
from the old folder instead, each only when it is the very computation the new study would run:

- the old trial finished;
- every phase's run configuration is the new study's for that variant, seed and fold (paths compared absolute;
  a ``data.market`` the new study leaves to the file name's guess matches the old run's resolved one);
- the files a run pinned (a distilled student, an adapter) have the content they had (``run.pins``);
- the trial ran on this machine with these libraries (its fingerprint, threads aside): on another machine its
  floating point may differ (``study.fingerprint``);
- both studies evaluate alike (split, seeds, verdict, fees) over the same phases;
- it ran with this code: the package's version, commit and uncommitted changes (``code`` in its record,
  :func:`~hybrid_trader.study.fingerprint.code_version`).

A trial recorded before trials recorded their code (no ``code``) cannot be checked for it: reuse those only between
studies you know ran the same code. A reused trial's record says where it came from (``reused_from``), the study's
``attempts.jsonl`` logs it (so the Deflated Sharpe Ratio counts it), and the summary counts the reused trials.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybrid_trader.config import from_dict, to_dict
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.metrics import jsonable
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.run.pins import check_pins
from hybrid_trader.study.attempts import record_attempt
from hybrid_trader.study.engine import STUDY_FILE, finished_trials, open_study_folder, trials_of
from hybrid_trader.study.fingerprint import code_label, code_version, fingerprint
from hybrid_trader.study.spec import StudySpec, load_study
from hybrid_trader.study.transport import TRIAL_FILE, TRIALS, absolute_paths, relocate
from hybrid_trader.study.trials import CONFIRM_PREFIX, CONFIRM_RECORD, REUSED_FROM, Trial, read_trial
from hybrid_trader.training.advisor_setup import with_absolute_inputs
from hybrid_trader.training.runner import load_run_config

MACHINE_ONLY = ("id", "torch_threads", "deterministic_algorithms")
"""Fingerprint fields left out of the comparison (a trial sets them itself, in its own process)."""
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables of the fingerprint left out too: threads (a Ray worker sets OMP_NUM_THREADS=1 and a
trial runs one torch thread whatever they say), not kernels."""
SAME_EVALUATION = ("phases", "evaluate")
"""Study settings outside the run configurations that decide a trial's figures: they must be equal."""


def reuse_into(spec_path: str | Path | StudySpec, out: str | Path, source: str | Path,
               say: Callable[[str], None] = print) -> list[Trial]:
    """Before ``run_study(spec_path, out)``: the study's folder opened (refused if it holds another study) and
    each trial it has not finished taken from ``source`` where that folder ran the same computation; returns them.
    """
    spec = spec_path if isinstance(spec_path, StudySpec) else load_study(spec_path)
    if spec.space:
        raise UserError("--reuse: a search's trials are Ray Tune's, sampled anew each run; there is nothing to reuse",
                        fix="drop --reuse, or give a study of variants")
    src = Path(source).resolve()
    out = Path(out).resolve()
    if src == out:
        raise UserError(f"--reuse {src} is the study's own folder", fix="give another study's folder (--reuse)")
    check_writable(out, what="study --out")
    out.mkdir(parents=True, exist_ok=True)
    with FolderLock(out, "study"):
        open_study_folder(out, spec)
        trials = trials_of(spec)
        done = finished_trials(out, trials)
        taken = reuse_trials(spec, out, src, [t for t in trials if t.slug not in done], say=say)
        copied = sum(_copy_confirmations(src, out, t.slug) for t in trials)
        if copied:
            say(f"and {copied} confirmation(s) on later data of the reused trials ({CONFIRM_PREFIX}*)")
        return taken


def reuse_trials(spec: StudySpec, out: Path, source: str | Path, trials: list[Trial],
                 say: Callable[[str], None] = print) -> list[Trial]:
    """Copy into ``out`` each of ``trials`` that ``source`` (another study's folder) finished with the same
    computation; returns those copied. The caller holds ``out``'s lock and has checked its identity."""
    src = Path(source).resolve()
    old_spec = _study_spec(src)
    new_data = to_dict(spec)
    differ = [k for k in SAME_EVALUATION if old_spec.get(k) != new_data.get(k)]
    if differ:
        raise UserError(f"--reuse {src}: that study's {' and '.join(differ)} differ from this one's, so none of "
                        "its trials is a trial of this study", file=str(src / STUDY_FILE),
                        fix="reuse a study evaluated the same way, or run the trials (drop --reuse)")
    new_spec = from_dict(StudySpec, absolute_paths(new_data), source="study")
    here = _machine(fingerprint())
    taken: list[Trial] = []
    reasons: dict[str, str] = {}
    for t in trials:
        folder = src / TRIALS / t.slug
        why = _why_not(new_spec, t, folder, here)
        if why:
            reasons[t.slug] = why
            continue
        _copy_trial(folder, out / TRIALS / t.slug)
        taken.append(t)
    say(f"reused {len(taken)} of {len(trials)} trials from {src}"
        + (f"; {len(reasons)} not reusable, run here (e.g. {next(iter(reasons))}: {next(iter(reasons.values()))})"
           if reasons else ""))
    return taken


def _study_spec(src: Path) -> dict[str, Any]:
    path = src / STUDY_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))["spec"]
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"--reuse {src}: not a study folder ({type(err).__name__}: {err})", file=str(path),
                        fix="give the folder a study wrote (it holds study.json and trials/)") from None


def _machine(fp: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint's machine and libraries, without what a trial's own process sets (threads)."""
    out = {k: v for k, v in fp.items() if k not in MACHINE_ONLY}
    out["env"] = {k: v for k, v in (fp.get("env") or {}).items() if k not in THREAD_ENV}
    return out


def _why_not(spec: StudySpec, trial: Trial, folder: Path, here: dict[str, Any]) -> str | None:
    """Why ``folder`` is not this study's ``trial`` (None: it is)."""
    record = read_trial(folder)
    if not record or record.get("status") != "finished":
        return "not finished there"
    if _machine(record.get("fingerprint") or {}) != here:
        return "ran on another machine or with other libraries"
    code = record.get("code")
    if code and code != code_version():  # a trial from before the code was recorded cannot be checked
        return f"ran with other code ({code_label(code)}; here {code_label(code_version())})"
    variant = next(v for v in spec.variants if v.name == trial.variant)
    for phase in spec.phases:
        run = folder / f"p{phase}"
        try:
            old = to_dict(load_run_config(run))
            check_pins(run, doing="reuse")
        except (UserError, OSError, ValueError) as err:
            return f"phase {phase}: {getattr(err, 'message', err)}"
        new = to_dict(with_absolute_inputs(spec.run_config(variant, trial.seed, trial.fold, phase)))
        if new["data"].get("market") is None:  # left to the file name's guess: the old run recorded the guess
            old["data"]["market"] = None
        keys = _differences(new, old)
        if keys:
            return f"phase {phase} configuration differs ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
    return None


def _differences(new: dict[str, Any], old: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(new) | set(old)):
        a, b = new.get(k), old.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _differences(a, b, f"{prefix}{k}.")
        elif a != b:
            keys.append(prefix + k)
    return keys


def _copy_trial(src: Path, dst: Path) -> None:
    """The trial's folder copied, its records naming their new place, its record saying where it came from."""
    record = read_trial(src) or {}
    origin = _origin(src)
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(TRIAL_FILE))
    relocate(dst, str(dst), was=str(src))
    record[REUSED_FROM] = origin
    atomic_write_text(dst / TRIAL_FILE, json.dumps(jsonable(record), indent=1))
    record_attempt(dst.parent.parent, record)


def _origin(folder: Path) -> str:
    """Where the trial in ``folder`` ran: the folder it was reused from, else ``folder`` itself."""
    return (read_trial(folder) or {}).get(REUSED_FROM) or str(folder)


def _copy_confirmations(src: Path, out: Path, slug: str) -> int:
    """A trial reused from ``src``: its finished confirmations on later data (``confirm-<stem>/trials/<slug>.json``)
    copied too, naming the trial's new folder (their evaluations are inside it, copied with it), so that ``study
    --confirm`` reads them back instead of evaluating again; returns how many. Idempotent; a confirmation folder of
    another file of the same name is left alone."""
    origin = (read_trial(out / TRIALS / slug) or {}).get(REUSED_FROM)
    there = src / TRIALS / slug
    if not origin or _origin(there) != origin:  # run here, or reused from elsewhere: not this folder's computation
        return 0
    copied = 0
    for folder in sorted(p for p in src.glob(f"{CONFIRM_PREFIX}*") if p.is_dir()):
        row_path, target = folder / TRIALS / f"{slug}.json", out / folder.name / TRIALS / f"{slug}.json"
        try:
            text = row_path.read_text(encoding="utf-8")
            finished = json.loads(text).get("status") == "finished"
            identity = (folder / CONFIRM_RECORD).read_text(encoding="utf-8")
        except (OSError, ValueError):
            continue
        mine = out / folder.name / CONFIRM_RECORD
        if not finished or target.exists() or (mine.exists() and json.loads(mine.read_text(encoding="utf-8"))
                                                .get("sha256") != json.loads(identity).get("sha256")):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if not mine.exists():
            atomic_write_text(mine, identity)
        old, new = (json.dumps(str(p))[1:-1] for p in (there, out / TRIALS / slug))  # as paths appear in JSON
        atomic_write_text(target, text.replace(old, new))
        copied += 1
    return copied
