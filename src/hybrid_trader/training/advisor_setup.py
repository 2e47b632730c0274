"""Phase 3's advice at training time: the LLM advisor (with its batch calibration), the teacher beside
the student, and the advice inputs a run records (the student and adapter paths, pinned)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybrid_trader.config import merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.run.advice_dataset import student_path
from hybrid_trader.run.advisor import CalibrationRule, run_advisor
from hybrid_trader.run.calibration import calibration_path
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import Market


def llm_inputs(llm: Any) -> dict[str, str | None]:
    """The files outside the run that its advice depends on (``run.pins``): the student, an adapter."""
    return {"student": llm.student.path if llm.backend == "student" else None,
            "adapter": llm.transformers.adapter if llm.backend == "transformers" else None}


def with_absolute_inputs(config: RunConfig) -> RunConfig:
    """The student and adapter paths made absolute (a run is used from any directory)."""
    over = {f"llm.{key}": str(Path(p).resolve()) for key, p in
            (("student.path", config.llm.student.path), ("transformers.adapter", config.llm.transformers.adapter))
            if p and not Path(p).is_absolute()}
    return merge_overrides(config, over) if over else config


def with_default_student(config: RunConfig, init: Path | None) -> RunConfig:
    """Phase 3 with ``llm.backend: student`` and no ``llm.student.path``: the student distilled into ``init``.

    ``hybrid-trader advise distill P2_RUN`` writes ``P2_RUN/advice/student.pt``; the run's
    config.yaml records the resolved path.
    """
    if config.env.phase != 3 or config.llm.backend != "student" or config.llm.student.path or init is None:
        return config
    return merge_overrides(config, {"llm.student.path": str(student_path(Path(init)).resolve())})


def make_advisor(config: RunConfig, say, run_dirs: tuple = (),
                 calibrate: CalibrationRule | None = None) -> tuple[Any, Any]:
    """Phase 3: the run's advisor (``run.advisor.run_advisor``: its start-up check runs here, before any file is
    written), with the batch calibration of the first of ``run_dirs`` (this run, then its ``init``) that has one of
    its model, and what it is said to the user; ``(None, None)`` in phases 1-2.

    ``calibrate``: the rule of every command that asks a model; a leaning model with no calibration in
    ``run_dirs`` has it fitted on the last of them (the ``--init`` run, whose training days this run trains
    on), or answers raw, said so. None: the calibration found, if any (studies, benchmarks)."""
    if config.env.phase != 3:
        return None, None
    made = run_advisor(config, homes=run_dirs, calibrate=calibrate, say=say)
    advisor, llm_config, choice = made.advisor, made.llm, made.calibration
    if choice.raw:
        say(f"LLM advice: {choice.label}")
    if choice.path is not None:
        say(f"LLM advice divided by the batch calibration {choice.path}")
    fusion = f"fusion {config.fusion.mode}, llm_weight {config.fusion.llm_weight}" + \
        ("" if config.fusion.advice_input else ", advice through the prior alone (not an input)")
    if callable(getattr(advisor.backend, "advise_batch", None)):
        say(f"LLM advisor: {advisor.backend.describe()}, always on (every decision, one batched forward per step), "
            f"{fusion}")
    else:
        say(f"LLM advisor: {llm_config.backend} back end, {llm_config.mode} mode, query {llm_config.query.mode}, "
            f"{fusion}")
    return advisor, llm_config


def keep_calibration(advisor: Any, run_dir: Path) -> None:
    """Copy the batch calibration phase 3 trains with into its run (when it came from ``--init``), so its
    evaluation, a resume and ``hybrid-trader run`` divide the advice by the same means."""
    cal = getattr(getattr(advisor, "answerer", None), "batch_calibration", None)
    if cal is not None and not calibration_path(run_dir).exists():
        cal.save(calibration_path(run_dir))


def make_teacher(config: RunConfig, market: Market, say) -> Any:
    """Phase 3 with the student and ``llm.student.teacher``: the real LLM beside it, or None (``training.teacher``)."""
    teacher = config.llm.student.teacher
    if teacher is not None and config.env.phase != 3:
        raise UserError(f"a teacher ({teacher}) answers beside the student in phase 3; this run is phase "
                        f"{config.env.phase}", fix="drop --teacher (llm.student.teacher), or train phase 3")
    if config.env.phase != 3 or teacher is None:
        return None
    if config.llm.backend != "student":
        raise UserError(f"llm.student.teacher ({teacher}) answers beside the student, but this run's back end is "
                        f"{config.llm.backend}", fix="set llm.backend: student, or drop llm.student.teacher")
    from hybrid_trader.llm import build_advisor  # phase 3 only: loads the advisor's back ends
    from hybrid_trader.training.teacher import TeacherLog, teacher_config  # teacher runs only: loads pyarrow

    log = TeacherLog(build_advisor(teacher_config(config.llm)), market, phase=config.env.phase)
    say(f"teacher: {log.describe()} answers the decisions llm.query picks (mode {config.llm.query.mode}), "
        "as fast as it can, into RUN_DIR/advice/train")
    return log
