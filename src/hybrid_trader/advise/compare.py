"""Teacher (the LLM) against student (the distilled network) on a collected split (``advise compare``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hybrid_trader.advise.distill import fidelity
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.student_backend import Student, layout_names, no_legal_fix
from hybrid_trader.run.advice_dataset import read_split
from hybrid_trader.run.advice_identity import check_same_advice, raw_advice


def compare_split(run_dir: Path, split: str, student: Student) -> dict:
    """Fidelity and the confusion counts (rows: LLM's top action, columns: student's) on one split."""
    rows, meta = read_split(run_dir, split)
    check_same_advice(student.advice_parts, meta["advice"], file=str(student.path),
                      fix="distil the student again on this dataset: hybrid-trader advise distill RUN_DIR")
    student.check_layout(layout_names(rows.obs.shape[1]), what=f"the {split} advice")
    usable = rows.take(np.flatnonzero(~rows.abstained))
    out = {"split": split, "rows": int(len(rows)), "abstained": int(rows.abstained.sum()), "raw": raw_advice(meta),
           # the baseline distill reported: the training split's majority action, on every split
           "fidelity": fidelity(student.net, rows, student.metrics.get("majority_action")),
           "confusion": np.zeros((6, 6), dtype=int).tolist()}
    if len(usable):
        masks = no_legal_fix(usable.masks())
        with torch.no_grad():
            logq, _ = student.net(torch.as_tensor(usable.obs), torch.as_tensor(masks))
        q = logq.exp().numpy()
        teacher = np.argmax(np.where(masks, usable.probs, -1.0), axis=1)
        mine = np.argmax(np.where(masks, q, -1.0), axis=1)
        conf = np.zeros((6, 6), dtype=int)
        np.add.at(conf, (teacher, mine), 1)
        out["confusion"] = conf.tolist()
        out["by_position"] = {
            name: float(100.0 * (teacher[sel] == mine[sel]).mean())
            for name, sel in (("flat", usable.position == 0), ("in position", usable.position != 0)) if sel.any()}
    return out


def confusion_table(confusion: list) -> str:
    """Text table: rows LLM's top action, columns the student's."""
    conf = np.asarray(confusion)
    used = [a for a in range(6) if conf[a].sum() or conf[:, a].sum()]
    w = max(len(ACTION_WORDS[a]) for a in used) + 2 if used else 8
    lines = ["LLM \\ student".ljust(w + 2) + "".join(ACTION_WORDS[a].rjust(w) for a in used)]
    for a in used:
        lines.append(ACTION_WORDS[a].ljust(w + 2) + "".join(f"{conf[a, b]:,}".rjust(w) for b in used))
    return "\n".join(lines)
