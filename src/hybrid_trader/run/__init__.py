"""The run layer: the run's objects (its configuration and its market) and its directory's layout and files.

- :mod:`.config`  ``RunConfig``: one dataclass per section of a run's configuration
- :mod:`.market`  ``Market``: the run's bars, their features and the split by time, loaded once
- :mod:`.splits`  ``Split``: time splits, walk-forward folds, month folds
- :mod:`.advisor` ``run_advisor``: a phase 3 run's advisor and its calibration (training, evaluation, the executor)
- :mod:`.rundir`  ``RunDir`` (file names, config, status, logs, checkpoints, evaluations);
  its docstring is the one description of the layout
- :mod:`.files`   atomic writes and the sha256 ``manifest.json``
- :mod:`.lock`    one writer per folder (``flock`` on ``.lock``, naming the holder's PID)
- :mod:`.models`  saving and loading the model and normaliser, checked (imports SB3)
"""

from __future__ import annotations

from hybrid_trader.run.files import Manifest, atomic_write_bytes, atomic_write_text, sha256_file
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.run.rundir import Checkpoint, RunDir, data_identity, is_stale, read_jsonl, same_data

__all__ = ["Checkpoint", "FolderLock", "Manifest", "RunDir", "atomic_write_bytes", "atomic_write_text",
           "data_identity", "is_stale", "read_jsonl", "same_data", "sha256_file"]
