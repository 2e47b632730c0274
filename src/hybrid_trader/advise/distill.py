"""Distil the LLM's advice into a small network (``hybrid-trader advise distill``), and measure its fidelity.

Training rows: the **train** split's non-abstained answers; validation (early stopping,
the best epoch is kept): the **val** split's, i.e. later days (by time, never shuffled
across days). When no val advice was collected, the last 15% of the training days hold
out instead (said in the output). Loss: ``KL(teacher || student)`` over the legal
actions (the student's masked log-softmax) plus ``conf_weight`` x binary cross-entropy
of the confidence head against the teacher's confidence. Inputs are normalised with the
mean and standard deviation of the training rows (stored in the student).

Fidelity on held-out rows (:func:`fidelity`), labelled with units:
``Top-1 agreement [%]`` (student's most probable legal action = the LLM's),
``Mean KL [nats]``, ``Confidence MAE`` (|student head - LLM confidence|),
``Confidence ECE`` (10 bins of the student's confidence, against how often its top
action agrees with the LLM's) and ``Majority baseline [%]`` (agreement of always
answering the LLM's most frequent top action: what agreement is worth), ``Flat states`` and
``Flat top action share [%]`` (the student's own most frequent top action in the flat states, as a share
of them: a student that says the same in nearly every flat state copies a constant into phase 3).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hybrid_trader import __version__
from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.student_backend import (
    Student,
    StudentNet,
    layout_names,
    load_student,
    no_legal_fix,
    student_bytes,
)
from hybrid_trader.run.advice_dataset import (
    FLAT_TOP_SHARE,
    SPLITS,
    AdviceRows,
    advice_dir,
    advice_lock,
    dataset_digest,
    part_files,
    read_split,
    student_metrics_path,
    student_path,
)
from hybrid_trader.run.advice_identity import raw_advice
from hybrid_trader.run.files import atomic_write_bytes, atomic_write_text, check_writable

EPS = 1e-8
METRIC_LABELS = ("Rows", "Top-1 agreement [%]", "Mean KL [nats]", "Confidence MAE", "Confidence ECE",
                 "Majority baseline [%]", "Flat states", FLAT_TOP_SHARE)



@dataclass
class DistillConfig:
    """Options of ``advise distill``."""

    epochs: int = 40
    """Passes over the training rows (the epoch with the lowest validation KL is kept)."""
    hidden: tuple = (64, 64)
    """Hidden layer sizes of the student (64,64: the fidelity to Gemma of 256,256 on the ES sample, 1/8 the weights)."""
    batch_size: int = 256
    """Rows per gradient step."""
    learning_rate: float = 1e-3
    """Adam learning rate."""
    weight_decay: float = 1e-5
    """Adam weight decay."""
    conf_weight: float = 0.5
    """Weight of the confidence head's loss."""
    seed: int = 0
    """Seed of the initialisation and the shuffling."""
    threads: int = 1
    """Torch CPU threads."""


def _usable(rows: AdviceRows) -> AdviceRows:
    return rows.take(np.flatnonzero(~rows.abstained))


def _tensors(rows: AdviceRows):
    masks = no_legal_fix(rows.masks())
    p = np.where(masks, rows.probs, 0.0).astype(np.float32)
    p /= np.maximum(p.sum(axis=1, keepdims=True), EPS)
    return (torch.as_tensor(rows.obs), torch.as_tensor(masks), torch.as_tensor(p),
            torch.as_tensor(rows.confidence.astype(np.float32)))


def _kl(p: torch.Tensor, logq: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Per-row KL(p || q) over the legal actions [nats]."""
    logp = torch.log(p.clamp_min(EPS))
    terms = torch.where(masks & (p > 0), p * (logp - logq.clamp_min(-1e4)), torch.zeros_like(p))
    return terms.sum(dim=1)


def fidelity(student: StudentNet, rows: AdviceRows, majority: int | None = None) -> dict:
    """Fidelity of the student on non-abstained rows (see the module docstring)."""
    rows = _usable(rows)
    n = len(rows)
    if n == 0:
        return {"Rows": 0}
    obs, masks, p, conf = _tensors(rows)
    with torch.no_grad():
        logq, c = student(obs, masks)
        kl = _kl(p, logq, masks).numpy()
        q = logq.exp().numpy()
        cpred = torch.sigmoid(c).numpy()
    pn = p.numpy()
    teacher = np.argmax(np.where(masks.numpy(), pn, -1.0), axis=1)
    mine = np.argmax(np.where(masks.numpy(), q, -1.0), axis=1)
    agree = mine == teacher
    ece = 0.0
    bins = np.clip((cpred * 10).astype(int), 0, 9)
    for b in range(10):
        sel = bins == b
        if sel.any():
            ece += sel.mean() * abs(cpred[sel].mean() - agree[sel].mean())
    if majority is None:
        majority = int(np.bincount(teacher, minlength=N_ACTIONS).argmax())
    flat = rows.position == 0
    return {
        "Rows": int(n),
        "Top-1 agreement [%]": float(100.0 * agree.mean()),
        "Mean KL [nats]": float(kl.mean()),
        "Confidence MAE": float(np.abs(cpred - conf.numpy()).mean()),
        "Confidence ECE": float(ece),
        "Majority baseline [%]": float(100.0 * (teacher == majority).mean()),
        "Flat states": int(flat.sum()),
        FLAT_TOP_SHARE: float(100.0 * np.bincount(mine[flat], minlength=N_ACTIONS).max() / flat.sum())
        if flat.any() else math.nan,
    }


def flat_top_action(student: StudentNet, rows: AdviceRows) -> str | None:
    """The student's most frequent top action in the flat states of ``rows`` (None: no flat state)."""
    rows = _usable(rows)
    flat = rows.take(np.flatnonzero(rows.position == 0))
    if not len(flat):
        return None
    obs, masks, _, _ = _tensors(flat)
    with torch.no_grad():
        logq, _ = student(obs, masks)
    mine = np.argmax(np.where(masks.numpy(), logq.exp().numpy(), -1.0), axis=1)
    return ACTION_WORDS[int(np.bincount(mine, minlength=N_ACTIONS).argmax())]


MIN_TRAIN_ROWS = 20
"""Fewest usable (answered) training rows a student is distilled from."""


def _holdout_by_days(rows: AdviceRows, share: float = 0.15) -> tuple[AdviceRows, AdviceRows]:
    days = np.unique(rows.session)
    k = max(1, int(math.ceil(len(days) * share)))
    if len(days) <= k:
        raise UserError("the train advice spans too few days to hold any out for validation",
                        fix="collect the val split too: hybrid-trader advise collect RUN_DIR --split val")
    late = np.isin(rows.session, days[-k:])
    return rows.take(np.flatnonzero(~late)), rows.take(np.flatnonzero(late))


def distill(run_dir: Path, config: DistillConfig | None = None, *, say: Callable[[str], None] = print,
            allow_raw: bool = False) -> dict:
    """Train the student on RUN_DIR's advice; write ``student.pt`` and ``student_metrics.json``; return the metrics.

    Advice a leaning model gave raw (:func:`~hybrid_trader.run.advice_identity.raw_advice`) is refused unless
    ``allow_raw``: the student would copy the model's constant lean into every phase 3 decision.
    Holds ``RUN_DIR/advice/.lock``: the dataset cannot change under it, nor the student under a collect.
    """
    check_writable(advice_dir(Path(run_dir)), what="advise distill")
    with advice_lock(Path(run_dir), "advise distill"):
        return _distill(run_dir, config, say=say, allow_raw=allow_raw)


def _distill(run_dir: Path, config: DistillConfig | None = None, *, say: Callable[[str], None] = print,
             allow_raw: bool = False) -> dict:
    config = config or DistillConfig()
    run_dir = Path(run_dir)
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    train_all, meta = read_split(run_dir, "train")
    raw = raw_advice(meta)
    if raw and not allow_raw:
        raise UserError(f"the advice is the model's raw answers ({raw}): {meta['advice'].get('model')} answers with "
                        "a constant lean, and a student distilled from it copies that lean into every decision",
                        file=str(advice_dir(run_dir) / "train"),
                        fix=f"collect it calibrated: move {advice_dir(run_dir)} away, then hybrid-trader advise "
                            f"collect {run_dir} --split all (fits the batch calibration first); or add --allow-raw "
                            "to distil the raw advice anyway")
    if raw:
        say(f"note: distilling RAW advice ({raw}, --allow-raw): the student learns the model's constant lean too")
    data = {"train": train_all}
    for split in ("val", "test"):
        rows, _ = read_split(run_dir, split, expect=meta, required=False)
        if rows is not None:
            data[split] = rows
    train = _usable(train_all)
    if len(train) == 0:
        raise UserError("every train row of the advice dataset is an abstention: nothing to learn from",
                        file=str(advice_dir(run_dir) / "train"),
                        fix="check the LLM configuration (scoring.min_coverage, the model) and collect again")
    if len(train) < MIN_TRAIN_ROWS:
        raise UserError(f"{len(train)} usable train rows: too few to distil a student whose fidelity means anything "
                        f"(at least {MIN_TRAIN_ROWS})", file=str(advice_dir(run_dir) / "train"),
                        fix=f"collect more states: hybrid-trader advise collect {run_dir} --split train")
    if "val" in data and len(_usable(data["val"])):
        val, val_name = data["val"], "val"
    else:
        train, val = _holdout_by_days(train)
        val_name = "last 15% of the train days"
        say("no val advice collected: validating on the last 15% of the training days")
    obs_dim = train.obs.shape[1]
    layout_names(obs_dim)
    net = StudentNet(obs_dim, config.hidden)
    mean = train.obs.mean(axis=0)
    std = train.obs.std(axis=0)
    net.mean.copy_(torch.as_tensor(mean))
    net.std.copy_(torch.as_tensor(np.where(std > 1e-6, std, 1.0).astype(np.float32)))
    obs, masks, p, conf = _tensors(train)
    opt = torch.optim.Adam(net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    bce = torch.nn.BCEWithLogitsLoss()
    gen = torch.Generator().manual_seed(config.seed)
    best: tuple[float, dict[str, torch.Tensor] | None, int] = (math.inf, None, -1)
    started = time.perf_counter()
    majority = int(np.bincount(np.argmax(np.where(masks.numpy(), p.numpy(), -1), axis=1), minlength=N_ACTIONS).argmax())
    for epoch in range(config.epochs):
        net.train()
        order = torch.randperm(len(obs), generator=gen)
        for s in range(0, len(order), config.batch_size):
            i = order[s:s + config.batch_size]
            logq, c = net(obs[i], masks[i])
            loss = _kl(p[i], logq, masks[i]).mean() + config.conf_weight * bce(c, conf[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        v = fidelity(net, val, majority)
        if v.get("Mean KL [nats]", math.inf) < best[0]:
            best = (v["Mean KL [nats]"], {k: t.clone() for k, t in net.state_dict().items()}, epoch)
    if best[1] is not None:
        net.load_state_dict(best[1])
    net.eval()
    metrics: dict = {"train": fidelity(net, train, majority), "val": fidelity(net, val, majority)}
    if "test" in data:
        metrics["test"] = fidelity(net, data["test"], majority)
    info = {"validation": val_name, "best_epoch": best[2] + 1, "epochs": config.epochs,
            "hidden": list(config.hidden), "seconds": round(time.perf_counter() - started, 1),
            "advice_hash": meta["advice"]["hash"], "layout_hash": meta.get("layout_hash"),
            "train_rows": int(len(train)), "abstained_train_rows": int(train_all.abstained.sum()),
            "raw_advice": raw,
            "flat_top_action": {s: flat_top_action(net, r) for s, r in
                                (("train", train), ("val", val), ("test", data.get("test"))) if r is not None},
            # the dataset pinned by content: a phase 3 run pins this student, so the chain is pinned
            "dataset_sha256": {s: dataset_digest(run_dir, s) for s in ("train", "val", "test")
                               if part_files(run_dir, s)}}
    out = {"metrics": metrics, "info": info}
    atomic_write_bytes(student_path(run_dir), student_bytes(
        net, config.hidden, advice_hash=meta["advice"]["hash"], advice_parts=meta["advice"],
        # compare's baseline is the same training majority; the dataset it learned from, by content
        metrics={**metrics, "majority_action": majority, "dataset_sha256": info["dataset_sha256"]},
        created_by=f"hybrid-trader {__version__}"))
    atomic_write_text(student_metrics_path(run_dir), json.dumps(out, indent=2))
    return out


def fidelity_table(metrics: dict) -> str:
    """The fidelity metrics as a labelled text table (one column per split)."""
    splits = [s for s in (*SPLITS,) if s in metrics]
    width = max(len(x) for x in METRIC_LABELS) + 2
    lines = ["".ljust(width) + "".join(s.rjust(10) for s in splits)]
    for label in METRIC_LABELS:
        cells = []
        for s in splits:
            v = metrics[s].get(label)
            if v is None:
                cell = "n/a"
            elif label in ("Rows", "Flat states"):
                cell = f"{v:,}"
            elif isinstance(v, float) and math.isnan(v):
                cell = "n/a"
            elif "KL" in label or "Confidence" in label:
                cell = f"{v:.3f}"
            else:
                cell = f"{v:.1f}"
            cells.append(cell.rjust(10))
        lines.append(label.ljust(width) + "".join(cells))
    return "\n".join(lines)


def load_run_student(run_dir: Path) -> Student:
    """RUN_DIR/advice/student.pt."""
    return load_student(student_path(run_dir))
