"""The run directory: every file name, and the reading and writing of each file.

One training run owns one folder (``hybrid-trader train --out RUN_DIR``)::

    RUN_DIR/config.yaml          resolved configuration (pass it to --config to reuse it)
    RUN_DIR/split.json           the sessions (and dates) of train / val / test
    RUN_DIR/model.zip            final model (sb3 zip, includes the optimizer state)
    RUN_DIR/vecnormalize.pkl     observation normalisation fitted on the training split
    RUN_DIR/checkpoints/         step_XXXXXXXXX.zip (+ _vecnormalize.pkl), the newest few
    RUN_DIR/tb/                  TensorBoard events: one run, continued by --resume
    RUN_DIR/progress.jsonl       the same metrics, one JSON object per PPO update
    RUN_DIR/validation.jsonl     periodic train/validation results
    RUN_DIR/best.json            the best validation so far (train.select, train.early_stop_patience)
    RUN_DIR/best_model.zip       train.select: best_val: the best validation's model (+ best_vecnormalize.pkl)
    RUN_DIR/status.json          running / finished / interrupted, steps done, target
    RUN_DIR/llm.yaml             phase 3: the resolved LLM advisor configuration
    RUN_DIR/llm_journal.sqlite   phase 3: the advisor's journal, where llm.journal points it (suggested name)
    RUN_DIR/manifest.json        sha256 and size of every file above written whole
    RUN_DIR/.lock                writer lock (flock) with the PID of the process writing
    RUN_DIR/eval/<split>/        evaluation on the run's own data (results.json, CSVs, report.html)
    RUN_DIR/eval/<stem>-<hash8>/<split>/   evaluation on other data (``evaluate --data``)
    RUN_DIR/eval/ablation.json   phase 3: hybrid vs RL-only on the test split
    RUN_DIR/advice/<split>/      the LLM's advice on visited states, Parquet chunks (``run.advice_dataset``;
                                 advise collect, a phase 3 teacher); advice/student.pt and
                                 advice/student_metrics.json: advise distill; advice/placebo.json: a
                                 placebo's teacher, seed and permutation (advise shuffle)
    RUN_DIR/llm_adapter/         llm finetune: the LoRA adapter, its metadata and checkpoints/
    RUN_DIR/llm_eval/<split>.json  llm eval: base vs fine-tuned against hindsight labels
    RUN_DIR/llm_eval/<split>-<name>.json  llm eval --config NAME.yaml: another LLM config on the same states

Rules every writer follows (``hybrid_trader.run``):

- one writer per folder: :meth:`RunDir.lock` (``train``), a
  :class:`~hybrid_trader.run.lock.FolderLock` on the output folder (``evaluate``);
- files written whole go through a temporary name, fsync and ``os.replace``, and their
  checksum into ``manifest.json`` (:class:`~hybrid_trader.run.files.Manifest`); readers
  verify them (:meth:`RunDir.verified`), so a damaged file is a UserError naming it;
- logs (``*.jsonl``) are appended; a resume first drops the rows past its checkpoint
  (:meth:`RunDir.truncate_logs`), so steps never go backwards;
- an evaluation records the sha256 of the model and of the data it used; one whose model
  is no longer the run's is stale (:meth:`RunDir.stale_evaluations`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from hybrid_trader.config import load_yaml_config, save_config
from hybrid_trader.data.many import bars_files, files_sha256, is_many
from hybrid_trader.errors import UserError
from hybrid_trader.run.files import Manifest, atomic_write_text, sha256_file
from hybrid_trader.run.lock import LOCK, FolderLock

T = TypeVar("T")

CONFIG = "config.yaml"
SPLIT = "split.json"
MODEL = "model.zip"
VECNORMALIZE = "vecnormalize.pkl"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tb"
PROGRESS = "progress.jsonl"
VALIDATION = "validation.jsonl"
BEST_MODEL = "best_model.zip"
"""The model with the best validation result so far (``train.select: best_val``)."""
BEST_VECNORMALIZE = "best_vecnormalize.pkl"
BEST = "best.json"
"""Which validation was best so far, and how many have passed since (``training.selection``)."""
STATUS = "status.json"
LLM_CONFIG = "llm.yaml"
JOURNAL = "llm_journal.sqlite"
EVAL = "eval"
ABLATION = "ablation.json"
RESULTS = "results.json"
METRICS = "metrics.json"
ADVICE = "advice"
"""The LLM's advice dataset (one folder per split, ``run.advice_dataset``) and the student distilled from it."""
STUDENT = "student.pt"
"""In ``advice/``: the distilled student (``advise distill``)."""
STUDENT_METRICS = "student_metrics.json"
"""In ``advice/``: the student's fidelity on held-out days."""
PLACEBO = "placebo.json"
"""In ``advice/`` of a placebo dataset: its teacher, seed and permutation (``advise shuffle``)."""
ADAPTER = "llm_adapter"
"""The LoRA adapter of ``llm finetune`` (peft files, metadata, ``checkpoints/``)."""
CALIBRATION = "llm_calibration.json"
"""The LLM's batch calibration: mean answer per market and position state on training days (``advise calibrate``)."""
LLM_EVAL = "llm_eval"
"""``llm eval`` results, one JSON file per split."""
STEP_KEY = "time/total_timesteps"
"""The step column of progress.jsonl and validation.jsonl."""

_CHECKPOINT = re.compile(r"^step_(\d+)\.zip$")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: its step, model file and normalisation file (which may be absent)."""

    step: int
    model: Path
    vecnormalize: Path


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of a log, one per line; a line cut short (a killed writer) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def data_identity(data: Any) -> dict[str, Any]:
    """What identifies the bars of a ``DataConfig``: path, sha256 and loading options, or the synthetic recipe."""
    if getattr(data, "path", None):
        path = Path(data.path)
        digest = sha256_file(path) if path.is_file() else files_sha256(bars_files(path)) if is_many(path) else None
        return {"path": str(path), "sha256": digest,
                "tz": data.tz, "time_shift": data.time_shift, "market": data.market, "repair": data.repair}
    return {"path": None, "synthetic": {"days": data.synthetic_days, "seed": data.synthetic_seed,
                                        "edge": data.synthetic_edge, "market": data.market or "NQ"}}


def same_data(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two ``data_identity`` records are the same bars: the same file contents (sha256) loaded the
    same way, whatever path named the file; records without a checksum must be equal."""
    if a is None or b is None:
        return a is b
    if a.get("sha256") and b.get("sha256"):
        return all(a.get(k) == b.get(k) for k in ("sha256", "tz", "time_shift", "market", "repair"))
    return a == b


class RunDir:
    """A run directory (see the module docstring for its layout)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest = Manifest(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ---- paths -------------------------------------------------------------------------
    config_path = property(lambda self: self.path / CONFIG)
    split_path = property(lambda self: self.path / SPLIT)
    model_path = property(lambda self: self.path / MODEL)
    vecnormalize_path = property(lambda self: self.path / VECNORMALIZE)
    checkpoints_dir = property(lambda self: self.path / CHECKPOINTS)
    tb_dir = property(lambda self: self.path / TENSORBOARD)
    progress_path = property(lambda self: self.path / PROGRESS)
    validation_path = property(lambda self: self.path / VALIDATION)
    best_model_path = property(lambda self: self.path / BEST_MODEL)
    best_vecnormalize_path = property(lambda self: self.path / BEST_VECNORMALIZE)
    best_path = property(lambda self: self.path / BEST)
    status_path = property(lambda self: self.path / STATUS)
    llm_config_path = property(lambda self: self.path / LLM_CONFIG)
    journal_path = property(lambda self: self.path / JOURNAL)
    eval_root = property(lambda self: self.path / EVAL)
    ablation_path = property(lambda self: self.path / EVAL / ABLATION)
    lock_path = property(lambda self: self.path / LOCK)

    def exists(self) -> bool:
        return self.path.is_dir()

    def is_empty(self) -> bool:
        return not self.path.exists() or not any(self.path.iterdir())

    def require(self) -> RunDir:
        """Self, or a UserError when the folder is not a run directory."""
        if not self.path.is_dir():
            raise UserError(f"{self.path}: no such run directory", fix="pass a directory made by 'hybrid-trader train'")
        if not self.config_path.exists():
            raise UserError(f"{self.path} has no {CONFIG}",
                            fix="point at a run directory made by 'hybrid-trader train'")
        return self

    def lock(self, what: str = "train") -> FolderLock:
        """The writer lock of this run (a UserError naming the holder when another process has it)."""
        return FolderLock(self.path, what)

    # ---- config ------------------------------------------------------------------------
    def load_config(self, cls: type[T]) -> T:
        """The run's configuration as ``cls`` (``RunConfig``), checked against the manifest."""
        self.require()
        self.verified(self.config_path, fix=f"restore {self.config_path}; it holds the run's settings")
        return load_yaml_config(self.config_path, cls)

    def config_dict(self) -> dict[str, Any]:
        """The raw mapping of config.yaml ({} when absent)."""
        if not self.config_path.exists():
            return {}
        data = yaml.safe_load(self.config_path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    def save_config(self, config: Any, header: str) -> Path:
        tmp = self.path / f".{CONFIG}.new"
        save_config(config, tmp, header=header)
        text = tmp.read_text(encoding="utf-8")
        tmp.unlink()
        return self.manifest.write_text(self.config_path, text)

    def write_yaml_text(self, name: str, text: str) -> Path:
        return self.manifest.write_text(self.path / name, text)

    def write_json(self, name: str, data: Any) -> Path:
        return self.manifest.write_text(self.path / name, json.dumps(data, indent=2) + "\n")

    # ---- status ------------------------------------------------------------------------
    def read_status(self) -> dict[str, Any]:
        """status.json ({} when absent); a UserError naming it when it is not a JSON object."""
        if not self.status_path.exists():
            return {}
        try:
            status = json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UserError(f"status file is damaged ({err})", file=str(self.status_path),
                            fix="restore it; training rewrites it at every checkpoint") from None
        if not isinstance(status, dict):
            raise UserError("status file is not a JSON object", file=str(self.status_path))
        return status

    def write_status(self, **fields: Any) -> dict[str, Any]:
        """Update status.json (merged with what is there), atomically."""
        try:
            status = self.read_status()
        except UserError:
            status = {}
        status.update(fields)
        status["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        atomic_write_text(self.status_path, json.dumps(status, indent=2))
        return status

    # ---- logs --------------------------------------------------------------------------
    def progress_rows(self) -> list[dict]:
        """Rows of progress.jsonl (one per PPO update)."""
        return read_jsonl(self.progress_path)

    def validation_rows(self) -> list[dict]:
        """Rows of validation.jsonl (one per periodic validation)."""
        return read_jsonl(self.validation_path)

    def truncate_logs(self, step: int) -> int:
        """Drop log rows past ``step`` (and lines cut short); returns how many rows were dropped."""
        dropped = 0
        for path in (self.progress_path, self.validation_path):
            if not path.exists():
                continue
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            rows = read_jsonl(path)
            kept = [r for r in rows if not isinstance(r.get(STEP_KEY), (int, float)) or r[STEP_KEY] <= step]
            dropped += len(lines) - len(kept)
            if len(kept) != len(lines):
                atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
        return dropped

    # ---- models ------------------------------------------------------------------------
    def checkpoint(self, step: int) -> Checkpoint:
        stem = self.checkpoints_dir / f"step_{int(step):09d}"
        return Checkpoint(int(step), stem.with_suffix(".zip"), Path(f"{stem}_vecnormalize.pkl"))

    def checkpoints(self) -> list[Checkpoint]:
        """The checkpoints on disk, oldest first."""
        if not self.checkpoints_dir.is_dir():
            return []
        steps = sorted(int(m.group(1)) for p in self.checkpoints_dir.iterdir() if (m := _CHECKPOINT.match(p.name)))
        return [self.checkpoint(s) for s in steps]

    def verified(self, path: Path, *, fix: str) -> Path:
        """``path`` when it is present and matches the manifest; else a UserError naming it."""
        return self.manifest.verify(path, fix=fix)

    def damage(self, path: Path) -> str | None:
        """Why ``path`` is not the file that was written, or None."""
        return self.manifest.problem(path)

    def model_sha256(self) -> str | None:
        """sha256 of model.zip as recorded when written (None before the run finished)."""
        entry = self.manifest.expected(self.model_path)
        if entry is not None:
            return str(entry["sha256"])
        return sha256_file(self.model_path) if self.model_path.exists() else None

    # ---- evaluations -------------------------------------------------------------------
    def eval_dir(self, split: str, data: dict[str, Any] | None = None, advisor: str | None = None) -> Path:
        """Where an evaluation of ``split`` goes: eval/<split>, or eval/<stem>-<hash8>/<split> for other data;
        ``advisor`` (another advisor than the run's own, e.g. ``llm-transformers``): ``<split>-<advisor>``."""
        if advisor:
            split = f"{split}-{advisor}"
        if data is None:
            return self.eval_root / split
        digest = data.get("sha256") or hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        digest = digest[:8]
        stem = Path(data["path"]).stem if data.get("path") else "synthetic"
        return self.eval_root / f"{stem}-{digest}" / split

    def evaluations(self) -> Iterator[Path]:
        """Every evaluation folder (holding results.json) under eval/."""
        if self.eval_root.is_dir():
            yield from sorted(p.parent for p in self.eval_root.rglob(RESULTS))

    def stale_evaluations(self) -> list[Path]:
        """Evaluation folders whose recorded model is not the run's current model."""
        current = self.model_sha256()
        stale = []
        for folder in self.evaluations():
            try:
                info = json.loads((folder / RESULTS).read_text(encoding="utf-8")).get("info", {})
            except (OSError, json.JSONDecodeError, AttributeError):
                continue
            recorded = info.get("model_sha256")
            if recorded is not None and current is not None and recorded != current:
                stale.append(folder)
        return stale

    def mark_stale(self) -> list[Path]:
        """Write STALE.json into every evaluation of an older model; returns those folders."""
        folders = self.stale_evaluations()
        for folder in folders:
            atomic_write_text(folder / "STALE.json", json.dumps(
                {"reason": "the run's model changed after this evaluation (training was resumed)",
                 "model_sha256_now": self.model_sha256(), "marked": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))
        return folders

    def remove(self) -> None:
        """Delete the whole folder (only for a folder this process created and failed in early)."""
        shutil.rmtree(self.path, ignore_errors=True)


def is_stale(eval_dir: str | Path) -> bool:
    """Whether an evaluation folder was marked stale (its model was replaced)."""
    return (Path(eval_dir) / "STALE.json").exists()
