"""The placebo advisor (``hybrid-trader advise shuffle``): a teacher's own advice permuted across states.

It answers "does any prior help PPO, or does the advice's information?". The placebo
dataset holds the teacher's states (observations, masks, rendered contexts) unchanged,
and to each state gives the answer (probabilities, confidence, abstention) the teacher
gave to another state, drawn by a seeded permutation:

- **Within each legal-action mask**, so every answer stays legal (a flat state's
  HOLD/BUY/SELL answer never lands on a state in a position), and the marginal
  distribution of the answers is the teacher's exactly, per mask and overall.
- **Across the whole split**, not within a day: a day's answers share its trend, so a
  permutation inside a day would keep that information.
- Each split (train, val, test) is permuted apart with its own stream of the seed.

The result is an ordinary advice dataset (``run.advice_dataset``) in another folder, whose
advice identity (:func:`~hybrid_trader.run.advice_dataset.placebo_identity`) names the
teacher's hash and the seed; ``advise distill`` makes its student the same way as any
other's. ``advice/placebo.json`` records the teacher (folder, identity, each split's
sha256) and the permutation itself: the answer of the placebo's row ``i`` is the teacher's
row ``permutation[split][i]`` (the teacher split's rows in chunk order).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.run.advice_dataset import (
    SPLITS,
    AdviceRows,
    advice_dir,
    advice_lock,
    dataset_digest,
    part_files,
    read_split,
    write_chunk,
)
from hybrid_trader.run.advice_identity import PLACEBO_KIND, placebo_identity
from hybrid_trader.run.files import atomic_write_text, check_writable
from hybrid_trader.run.rundir import PLACEBO

CHUNK_ROWS = 4096
"""Rows per chunk of a placebo dataset (written at once, so larger than collect's)."""


def shuffle_answers(rows: AdviceRows, rng: np.random.Generator) -> tuple[AdviceRows, np.ndarray]:
    """The rows with their answers permuted within each legal-action mask; ``(rows, permutation)``.

    The state columns stay; row ``i`` gets the answer of row ``permutation[i]``.
    """
    perm = np.arange(len(rows))
    for bits in np.unique(rows.mask):
        idx = np.flatnonzero(rows.mask == bits)
        perm[idx] = idx[rng.permutation(len(idx))]
    answers = {k: getattr(rows, k)[perm] for k in ("probs", "confidence", "abstained", "abstain_reason")}
    return dataclasses.replace(rows, **answers), perm


def placebo_path(out_dir: Path) -> Path:
    """``OUT/advice/placebo.json``: the teacher, the seed and the permutation of a placebo dataset."""
    return advice_dir(Path(out_dir)) / PLACEBO


def shuffle_advice(teacher_dir: Path, out_dir: Path, *, seed: int = 0, chunk: int = CHUNK_ROWS,
                   say: Callable[[str], None] = print) -> dict:
    """Write the ``shuffled`` placebo of ``teacher_dir``'s advice into ``out_dir/advice``; return its record.

    Every split the teacher collected is shuffled. Holds both folders' advice locks (the
    teacher's dataset cannot grow under it). Refused: a teacher without train advice, the
    teacher's own folder as the output, an output that already holds advice.
    """
    teacher_dir, out_dir = Path(teacher_dir), Path(out_dir)
    if not part_files(teacher_dir, "train"):
        raise UserError("the shuffled placebo needs its teacher's advice: this folder has no train advice",
                        file=str(advice_dir(teacher_dir) / "train"),
                        fix=f"collect the teacher's advice first: hybrid-trader advise collect {teacher_dir} "
                            "--split train (and --split val), then shuffle it")
    if out_dir.resolve() == teacher_dir.resolve():
        raise UserError("the placebo cannot be written into its teacher's folder (one dataset per folder)",
                        file=str(out_dir), fix="give another folder, e.g. RUN-shuffled")
    held = [s for s in SPLITS if part_files(out_dir, s)]
    if held:
        raise UserError(f"the output already holds advice ({', '.join(held)})", file=str(advice_dir(out_dir)),
                        fix="give a new folder, or move this one's advice folder away")
    check_writable(advice_dir(out_dir), what="advise shuffle")
    with advice_lock(teacher_dir, "advise shuffle (reading the teacher)"), advice_lock(out_dir, "advise shuffle"):
        teacher, meta = read_split(teacher_dir, "train")
        identity = placebo_identity(meta["advice"], seed)
        record: dict = {"kind": PLACEBO_KIND, "seed": int(seed), "teacher_dir": str(teacher_dir.resolve()),
                        "teacher_advice": meta["advice"], "advice": identity, "teacher_sha256": {}, "rows": {},
                        "permutation": {}}
        out_meta = {**{k: v for k, v in meta.items() if k not in ("split", "created_by")}, "advice": identity,
                    "model": f"{PLACEBO_KIND} (seed {int(seed)}) of {meta.get('model', meta['advice']['model'])}",
                    "placebo": {"kind": PLACEBO_KIND, "seed": int(seed), "teacher": meta["advice"]["hash"]}}
        for k, split in enumerate(SPLITS):
            rows, _ = (teacher, meta) if split == "train" else read_split(teacher_dir, split, expect=meta,
                                                                          required=False)
            if rows is None:
                continue
            shuffled, perm = shuffle_answers(rows, np.random.default_rng([int(seed), k]))
            for s in range(0, len(shuffled), chunk):
                write_chunk(out_dir, split, shuffled.take(np.arange(s, min(s + chunk, len(shuffled)))), out_meta)
            record["teacher_sha256"][split] = dataset_digest(teacher_dir, split)
            record["rows"][split] = len(shuffled)
            record["permutation"][split] = perm.tolist()
            say(f"{split}: {len(shuffled):,} answers of {meta['advice']['hash']} shuffled within "
                f"{len(np.unique(rows.mask))} legal-action mask(s), seed {int(seed)}")
        atomic_write_text(placebo_path(out_dir), json.dumps(record))
    return record
