"""A phase 3 run's advisor, set up once for training, evaluation and the executor: :func:`run_advisor`.

The run's ``llm`` section as a run uses it (``LLMConfig.in_run``), ``overrides`` (``llm.*`` keys: ``evaluate
--llm``, ``run --llm``, tests) over it, the advisor built from that (its start-up check runs here), and the batch
calibration that divides its answers:

* with a ``calibrate`` rule (``advise.calibrate.advice_calibration``, passed in by the commands that ask a model:
  ``train``, ``run``; this layer does not import ``advise``): the calibration of the first of ``homes`` fitted for
  this model, else of the last of them, which the rule fits first when a leaning model has none, or none at all
  (``--no-calibrate``: the advice is raw, said so);
* without one (evaluation, studies, benchmarks): the first calibration of this model found in ``homes``, or none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_trader.config import merge_overrides
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.run.advice_identity import RAW, advice_identity
from hybrid_trader.run.calibration import AdviceCalibration, attach_calibration, fitted_model, needs_calibration
from hybrid_trader.run.config import RunConfig

CalibrationRule = Callable[..., AdviceCalibration]
"""``(run_dir, llm_config, say=) -> AdviceCalibration``: ``advise.calibrate.advice_calibration`` (with the command's
``--no-calibrate``)."""


@dataclass(frozen=True)
class RunAdvisor:
    """The run's advisor and what it was made of."""

    advisor: Any
    """The ``llm.async_advisor.Advisor`` (close it when done)."""
    llm: LLMConfig
    """The ``llm`` section it was built from (the run's, overrides applied)."""
    calibration: AdviceCalibration
    """What divides its answers (``calibration.raw``: a leaning model answers undivided)."""

    @property
    def calibration_record(self) -> str:
        """What evaluation's results record: the calibration's file, ``raw`` or ``none``."""
        c = self.calibration
        return str(c.path) if c.path is not None else RAW if c.raw else "none"


def run_llm_config(config: RunConfig, overrides: dict | None = None) -> LLMConfig:
    """The run's ``llm`` section as the run uses it, ``overrides`` (``llm.*`` keys, without the prefix) over it."""
    llm = config.llm.in_run()
    return merge_overrides(llm, overrides, path="llm") if overrides else llm


def run_advisor(config: RunConfig, overrides: dict | None = None, *, homes: Sequence[Path | str | None] = (),
                calibrate: CalibrationRule | None = None, say: Callable[[str], None] | None = None) -> RunAdvisor:
    """The advisor of a phase 3 run (see the module's docstring). ``homes``: the runs whose batch calibration it
    may take, in order (this run, then the one it started from; missing folders are passed over)."""
    llm = run_llm_config(config, overrides)
    dirs = [Path(d) for d in homes if d is not None and Path(d).is_dir()]
    choice: AdviceCalibration | None = None
    if calibrate is not None and dirs:  # fitted, if at all, before the advisor loads its own model
        model = advice_identity(llm)["model"]
        home = next((d for d in dirs if fitted_model(d) == model), dirs[-1])
        choice = calibrate(home, llm, say=say or (lambda *a: None))
    from hybrid_trader.llm import build_advisor  # a phase 3 run only: loads the advisor's back ends

    advisor = build_advisor(llm)
    if choice is None:
        path = attach_calibration(advisor, llm, dirs)
        choice = AdviceCalibration(advisor.answerer.batch_calibration, path,
                                   raw=path is None and needs_calibration(llm))
    else:
        advisor.answerer.batch_calibration = choice.calibration
    return RunAdvisor(advisor, llm, choice)
