"""Read a run directory and name the failure modes it shows, with the numbers and a fix.

The failure modes are those of the seed run that never learned
(``002_e41f1f8c1f19f629.txt``): a policy that does not change (a freeze schedule longer
than the run), a weak value function, short episodes, an LLM that is rarely queried or
answers with near-zero confidence, agreement that only comes from the LLM abstaining,
advice that arrives too late, a train/validation gap, and a run that ended without its
final model; plus never trading and overtrading.

It reads the files of a run directory (layout: :mod:`hybrid_trader.run.rundir`).
The package: :mod:`.findings` (codes, thresholds, findings, the run as read),
:mod:`.training_checks`, :mod:`.llm_checks` and :mod:`.registry` (:data:`CHECKS`,
:func:`diagnose`).

A key that is absent means "not measured": its check is skipped (and listed as such),
never failed. Thresholds are in :class:`Thresholds`.

The checks are a registry (:data:`CHECKS`): each :class:`RunCheck` has a name, the codes it
can report and a function ``(RunView, Thresholds) -> list[Finding] | Skip``. The run is
read once into a :class:`RunView` (logs, status, evaluation results, ablation and the
run's config as a typed :class:`~hybrid_trader.run.config.RunConfig`). Adding a
check: write its function, add its codes to :data:`CODES` and its thresholds to
:class:`Thresholds`, append it to :data:`CHECKS`, and add a run built to show it to
``tests/evaluation/test_diagnose.py::SINGLE_FAILURES``.
"""


from hybrid_trader.evaluation.diagnose.findings import (
    CODES,
    Diagnosis,
    Finding,
    RunCheck,
    RunView,
    Skip,
    Thresholds,
    read_run,
)
from hybrid_trader.evaluation.diagnose.registry import CHECKS, diagnose, diagnose_run

__all__ = ["CHECKS", "CODES", "RunCheck", "Diagnosis", "Finding", "RunView", "Skip", "Thresholds", "diagnose",
           "diagnose_run", "read_run"]
