"""A run's batch calibration file (``RUN_DIR/llm_calibration.json``), refused under another model or prompt."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.llm.backends import backend_spec
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.run.advice_identity import RAW, advice_identity, check_same_advice
from hybrid_trader.run.rundir import CALIBRATION

CONTENT_FREE = "content-free"
"""A leaning back end's answers divided by its answer to an empty context (``llm.scoring.calibrate``)."""


def calibration_path(run_dir: Path) -> Path:
    return Path(run_dir) / CALIBRATION


def needs_calibration(config: LLMConfig) -> bool:
    """Whether ``config``'s advice is divided by a run's batch calibration: a back end with an answer lean
    (``BackendSpec.leans``: the language models, not the trend rule, the mock or the student) in scoring mode,
    without content-free calibration (``llm.scoring.calibrate``) instead."""
    return backend_spec(config.backend).leans and config.mode == "score" and not config.scoring.calibrate


@dataclass(frozen=True)
class AdviceCalibration:
    """What divides a run's advice (``advise.calibrate.advice_calibration`` decides it for every caller)."""

    calibration: BatchCalibration | None = None
    """The run's batch calibration; None: the back end needs none, or the advice is raw."""
    path: Path | None = None
    """Its file."""
    raw: bool = False
    """A leaning back end answers undivided (``--no-calibrate``): datasets, reports and journals say so."""
    fitted_s: float | None = None
    """Seconds spent fitting it just now (None: it was there already)."""
    content_free: bool = False
    """A leaning back end calibrated content-free instead (``llm.scoring.calibrate``)."""

    @property
    def mark(self) -> str:
        """What a dataset's chunks record: ``batch:<digest of the means>``, ``raw``, ``content-free`` or ''
        (a back end without a lean)."""
        if self.calibration is not None:
            digest = hashlib.sha256(json.dumps(self.calibration.means, sort_keys=True).encode()).hexdigest()[:12]
            return f"batch:{digest}"
        return RAW if self.raw else CONTENT_FREE if self.content_free else ""

    @property
    def label(self) -> str:
        """One line for reports: ``batch (FILE)``, ``raw (...)``, ``content-free`` or ``none needed``."""
        if self.calibration is not None:
            return f"batch ({self.path})"
        if self.raw:
            return f"{RAW} (not calibrated: the model's constant lean is in every answer)"
        return CONTENT_FREE if self.content_free else "none needed"


def load_calibration(run_dir: Path, config: LLMConfig, *, required: bool = False,
                     retrieval: dict | None = None) -> BatchCalibration | None:
    """The run's batch calibration, checked against ``config``'s advice identity (None: none fitted, not required).

    Content-free calibration (``llm.scoring.calibrate``) and generation mode use none, nor
    does the student (it learnt from advice collect had already calibrated). ``retrieval``: the prompt's
    ``Retriever.identity()`` when it retrieves its examples (the pool is part of the identity).
    """
    path = calibration_path(run_dir)
    if config.mode != "score" or not backend_spec(config.backend).language_model or (config.scoring.calibrate
                                                                                   and not required):
        return None
    if not path.is_file():
        if required:
            raise UserError("the run has no batch calibration", file=str(path),
                            fix=f"fit it on the training days: hybrid-trader advise calibrate {run_dir}")
        return None
    cal = BatchCalibration.load(path)
    check_same_advice(cal.identity, advice_identity(config, retrieval=retrieval), file=str(path),
                      fix=f"fit it again for this model and prompt: hybrid-trader advise calibrate {run_dir} --force")
    return cal


def fitted_model(run_dir: Path) -> str | None:
    """The model a run's calibration was fitted for (``advice_identity``'s ``model``); None: none fitted."""
    path = calibration_path(run_dir)
    return str(BatchCalibration.load(path).identity.get("model")) if path.is_file() else None


def attach_calibration(advisor: Any, config: LLMConfig, run_dirs: Sequence[Path | str | None]) -> Path | None:
    """Give ``advisor`` the first run's batch calibration found among ``run_dirs``; returns its file (None: none).

    A calibration fitted for another model is not this advisor's and is passed over (an
    ablation's trend-rule or mock variants evaluated from a run calibrated for Gemma); one
    fitted for the same model under another prompt is refused, naming both.
    """
    model = advice_identity(config)["model"]
    for d in run_dirs:
        if d is None or fitted_model(Path(d)) not in (None, model):
            continue
        cal = load_calibration(Path(d), config)
        if cal is not None:
            advisor.answerer.batch_calibration = cal
            return calibration_path(Path(d))
    return None
