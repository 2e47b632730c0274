"""The advice dataset: what the LLM advised in each visited state, stored in the run directory.

Layout::

    RUN_DIR/advice/.lock                         one writer at a time (collect, a teacher, distill, repair)
    RUN_DIR/advice/<split>/part-000001-<id>.parquet  one chunk of answered states (train, val, test)
    RUN_DIR/advice/<split>/manifest.json         sha256 and size of every chunk written
    RUN_DIR/advice/student.pt                    the distilled student (advise distill)
    RUN_DIR/advice/student_metrics.json          its fidelity on held-out days

Storage choice: **one Parquet file per chunk, written to a temporary name and renamed**.
A rename is atomic, so a chunk is either wholly there or absent: Ctrl-C or kill -9
during a write leaves at most a ``.tmp`` file (ignored, removed on the next run), and
nothing already written can be damaged by a later write (files are never appended to
or rewritten). Parquet keeps the observations as fixed-size float32 lists that numpy
reads without parsing, and any tool (pandas, pyarrow, DuckDB) opens the chunks. SQLite
would give the same safety with transactions, but its rows hold observations as blobs.

Every chunk carries, in its schema metadata, the **advice identity** (hash of model id +
prompt template + prompt and answer config, see :func:`advice_identity`), the feature
layout hash and the version that wrote it; readers refuse chunks whose identity differs
from what they expect, naming both hashes and which parts differ.

Rows are keyed by ``(t, position, mask)``: the bar index, the position side and the
legal-action mask as bits. A state is asked once per key.

Integrity: one writer holds ``RUN_DIR/advice/.lock`` (:func:`advice_lock`); chunk names
carry a random part, so two writers can never replace each other's chunk; each chunk's
sha256 goes into the split's manifest and its pages carry CRC checksums. A reader refuses
a chunk that is damaged (a flipped bit included), missing from the disk though recorded
(lost rows), or on the disk though never recorded (a second writer's), and a split with
a key twice; :func:`check_split` lists every such problem and :func:`repair_split` keeps
one row per key (``hybrid-trader advise check RUN [--repair]``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hybrid_trader import __version__
from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.errors import UserError
from hybrid_trader.run.advice_identity import check_same_advice
from hybrid_trader.run.files import MANIFEST as MANIFEST_NAME
from hybrid_trader.run.files import Manifest, sha256_file
from hybrid_trader.run.lock import FolderLock
from hybrid_trader.run.rundir import ADVICE, STUDENT, STUDENT_METRICS

SPLITS = ("train", "val", "test")
FLAT_TOP_SHARE = "Flat top action share [%]"
"""A student's metric (``advise distill``): its most frequent top action in the flat states, as a share of them
(a constant student: near 100; ``diagnose`` names one above 90)."""
META_KEY = b"hybrid_trader.advice"
"""Schema-metadata key of a chunk's identity (JSON)."""
PART_GLOB = "part-*.parquet"


# ------------------------------------------------------------------------------- keys
def mask_bits(masks: np.ndarray) -> np.ndarray:
    """Legal-action masks ``(n, 6)`` as integers (bit a = action a legal)."""
    masks = np.asarray(masks, dtype=bool).reshape(-1, N_ACTIONS)
    return (masks.astype(np.int64) << np.arange(N_ACTIONS)).sum(axis=1)


def masks_from_bits(bits: np.ndarray) -> np.ndarray:
    return ((np.asarray(bits, dtype=np.int64)[:, None] >> np.arange(N_ACTIONS)) & 1).astype(bool)


def state_key(t: int, position: int, bits: int) -> tuple[int, int, int]:
    """The key of one state: bar index, position side, legal-action bits."""
    return int(t), int(position), int(bits)


def visited_key(t: int, position: float, legal: Sequence[bool] | np.ndarray) -> tuple[int, int, int]:
    """The key of a visited state from its bar, signed position and legal actions (3 or 6 of them).

    Plain Python (one state at a time, in the collection walk and in phase 3's training loop);
    the same bits as :func:`mask_bits`.
    """
    return int(t), (position > 0) - (position < 0), sum(1 << a for a, ok in enumerate(legal) if ok)


# ------------------------------------------------------------------------------- rows
@dataclass
class AdviceRows:
    """Answered states in column form (one entry per state)."""

    t: np.ndarray
    """Bar index (int64)."""
    time: np.ndarray
    """Bar start, ISO text US/Eastern."""
    session: np.ndarray
    """Session index (int32)."""
    position: np.ndarray
    """Position side -1/0/1 (int8)."""
    unrealized_pnl: np.ndarray
    """Open profit [$] (float32)."""
    mask: np.ndarray
    """Legal-action bits (int16)."""
    obs: np.ndarray
    """Raw observation (n, D) float32, unnormalised."""
    probs: np.ndarray
    """LLM distribution over the six actions (n, 6) float32, zero on illegal."""
    confidence: np.ndarray
    """LLM confidence (float32)."""
    abstained: np.ndarray
    """The LLM abstained (bool)."""
    abstain_reason: np.ndarray
    """Reason code or '' (text)."""
    context: np.ndarray
    """The rendered context the model read (text)."""
    rollout: np.ndarray
    """Which policy pass visited the state first: 0 deterministic, k >= 1 sampled; -1 a phase 3 teacher (int8)."""

    def __len__(self) -> int:
        return len(self.t)

    def masks(self) -> np.ndarray:
        return masks_from_bits(self.mask)

    def keys(self) -> set[tuple[int, int, int]]:
        return {state_key(a, b, c) for a, b, c in zip(self.t.tolist(), self.position.tolist(), self.mask.tolist())}

    def take(self, index: np.ndarray) -> AdviceRows:
        return AdviceRows(**{k: v[index] for k, v in self.__dict__.items()})

    @staticmethod
    def concat(parts: Sequence[AdviceRows]) -> AdviceRows:
        names = list(AdviceRows.__dataclass_fields__)
        return AdviceRows(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in names})

    def to_table(self, meta: dict) -> pa.Table:
        n, d = self.obs.shape
        cols = {
            "t": pa.array(self.t, pa.int64()), "time": pa.array(self.time.astype(str), pa.string()),
            "session": pa.array(self.session, pa.int32()), "position": pa.array(self.position, pa.int8()),
            "unrealized_pnl": pa.array(self.unrealized_pnl, pa.float32()), "mask": pa.array(self.mask, pa.int16()),
            "obs": pa.FixedSizeListArray.from_arrays(pa.array(self.obs.astype(np.float32).ravel()), d),
            "probs": pa.FixedSizeListArray.from_arrays(pa.array(self.probs.astype(np.float32).ravel()), N_ACTIONS),
            "confidence": pa.array(self.confidence, pa.float32()), "abstained": pa.array(self.abstained, pa.bool_()),
            "abstain_reason": pa.array(self.abstain_reason.astype(str), pa.string()),
            "context": pa.array(self.context.astype(str), pa.string()), "rollout": pa.array(self.rollout, pa.int8()),
        }
        table = pa.table(cols)
        return table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})

    @staticmethod
    def from_table(table: pa.Table) -> AdviceRows:
        def fixed(name: str) -> np.ndarray:
            col = table.column(name).combine_chunks()
            width = col.type.list_size
            return col.values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, width)

        def plain(name: str, dtype) -> np.ndarray:
            return table.column(name).to_numpy(zero_copy_only=False).astype(dtype)

        return AdviceRows(
            t=plain("t", np.int64), time=plain("time", object), session=plain("session", np.int32),
            position=plain("position", np.int8), unrealized_pnl=plain("unrealized_pnl", np.float32),
            mask=plain("mask", np.int16), obs=fixed("obs"), probs=fixed("probs"),
            confidence=plain("confidence", np.float32), abstained=plain("abstained", bool),
            abstain_reason=plain("abstain_reason", object), context=plain("context", object),
            rollout=plain("rollout", np.int8),
        )


# ------------------------------------------------------------------------------- files
def advice_dir(run_dir: Path) -> Path:
    return Path(run_dir) / ADVICE


def student_path(run_dir: Path) -> Path:
    """RUN_DIR/advice/student.pt: the student ``advise distill`` writes and phase 3 reads by default."""
    return advice_dir(run_dir) / STUDENT


def student_metrics_path(run_dir: Path) -> Path:
    return advice_dir(run_dir) / STUDENT_METRICS


def split_dir(run_dir: Path, split: str) -> Path:
    return advice_dir(run_dir) / split


def part_files(run_dir: Path, split: str) -> list[Path]:
    return sorted(split_dir(run_dir, split).glob(PART_GLOB))


def advice_lock(run_dir: Path, what: str) -> FolderLock:
    """The writer lock of ``RUN_DIR/advice`` (use as a context manager); a second writer gets a UserError."""
    folder = advice_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return FolderLock(folder, what)


def chunk_bytes(rows: AdviceRows, meta: dict, split: str) -> bytes:
    """One chunk's Parquet bytes, with its identity metadata and a CRC on every page."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows.to_table({**meta, "split": split, "created_by": f"hybrid-trader {__version__}"}), sink,
                   write_page_checksum=True)
    return sink.getvalue().to_pybytes()


def write_chunk(run_dir: Path, split: str, rows: AdviceRows, meta: dict) -> Path:
    """Write one chunk atomically as the next ``part-NNNNNN-<id>.parquet`` and record its sha256.

    The caller holds :func:`advice_lock`; the random ``<id>`` keeps even two writers without it
    from replacing each other's chunk (their extra chunks are then refused as unrecorded).
    """
    folder = split_dir(run_dir, split)
    folder.mkdir(parents=True, exist_ok=True)
    existing = part_files(run_dir, split)
    seq = int(existing[-1].stem.split("-")[1]) + 1 if existing else 1
    path = folder / f"part-{seq:06d}-{secrets.token_hex(4)}.parquet"
    return Manifest(folder).write(path, chunk_bytes(rows, meta, split))


def remove_temporaries(run_dir: Path, split: str) -> int:
    """Delete the temporary files an interrupted write left behind; returns how many."""
    n = 0
    for tmp in split_dir(run_dir, split).glob(".*.tmp*"):
        tmp.unlink(missing_ok=True)
        n += 1
    return n


def read_meta(path: Path) -> dict:
    """A chunk's identity metadata; a truncated or foreign file is a UserError naming it."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise _damaged(path, err) from None
    raw = (schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise UserError("not an advice chunk (no hybrid_trader.advice metadata)", file=str(path),
                        fix="remove the file from the advice folder; 'advise collect' recomputes only its rows")
    return json.loads(raw)


def _damaged(path: Path, err: Exception) -> UserError:
    return UserError(f"advice chunk is empty or truncated ({str(err)[:120]})", file=str(path),
                     fix="delete this file and run 'hybrid-trader advise collect' again: it asks only its rows again")


@overload
def read_split(run_dir: Path, split: str, *, expect: dict | None = None,
               required: Literal[True] = True) -> tuple[AdviceRows, dict]: ...
@overload
def read_split(run_dir: Path, split: str, *, expect: dict | None = None,
               required: bool) -> tuple[AdviceRows | None, dict | None]: ...
def read_split(run_dir: Path, split: str, *, expect: dict | None = None,
               required: bool = True) -> tuple[AdviceRows | None, dict | None]:
    """All chunks of a split and their common identity metadata.

    Every chunk must carry the same advice identity (and ``expect``'s, when given);
    a mismatch is refused naming both hashes. ``required``: no chunk, or no row, is a
    UserError naming the folder; otherwise ``(None, None)``.
    """
    files = part_files(run_dir, split)
    folder = split_dir(run_dir, split)
    if not files:
        if required:
            raise UserError(f"no advice collected for the {split} split", file=str(folder),
                            fix=f"run: hybrid-trader advise collect {run_dir} --split {split}")
        return None, None
    problems = chunk_problems(run_dir, split)
    if problems:
        path, problem = problems[0]
        raise UserError(f"advice chunk {problem}" + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1
                                                    else ""), file=str(path),
                        fix=f"run: hybrid-trader advise check {run_dir} --repair (keeps every good row once)")
    parts, meta = [], None
    for path in files:
        m = read_meta(path)
        ref = expect or meta
        if ref is not None:
            check_same_advice(ref["advice"], m["advice"], file=str(path),
                              fix="keep one model and prompt per advice folder: move the old folder away, "
                                  "or collect with the configuration that built it")
            if m.get("layout_hash") != ref.get("layout_hash"):
                raise UserError(f"advice chunk has another observation layout: {m.get('layout_hash')} vs "
                                f"{ref.get('layout_hash')}", file=str(path),
                                fix="collect each run's advice in its own run directory")
        meta = meta or m
        parts.append(_read_rows(path))
    rows = AdviceRows.concat(parts)
    twice = len(rows) - len(rows.keys())
    if twice:
        raise UserError(f"the {split} advice holds {twice} rows whose state is there already (a key twice)",
                        file=str(folder), fix=f"run: hybrid-trader advise check {run_dir} --repair")
    return rows, meta


def _read_rows(path: Path) -> AdviceRows:
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except (pa.ArrowInvalid, OSError) as err:
        raise _damaged(path, err) from None
    if table.num_rows == 0:
        raise _damaged(path, ValueError("0 rows"))
    return AdviceRows.from_table(table)


def dataset_digest(run_dir: Path, split: str) -> str:
    """One sha256 over a split's chunks (names and contents): what a student was distilled from."""
    h = hashlib.sha256()
    for path in part_files(run_dir, split):
        h.update(f"{path.name}\0{sha256_file(path)}\n".encode())
    return h.hexdigest()


def chunk_problems(run_dir: Path, split: str) -> list[tuple[Path, str]]:
    """Chunks whose bytes differ from their record, recorded chunks gone, and chunks never recorded.

    A split written before manifests (none there) has nothing to compare: ``[]``.
    """
    folder = split_dir(run_dir, split)
    manifest = Manifest(folder)
    recorded = manifest.entries()
    if not recorded:
        return []
    out: list[tuple[Path, str]] = []
    on_disk = {p.name: p for p in part_files(run_dir, split)}
    for name, entry in recorded.items():
        path = folder / name
        if name not in on_disk:
            out.append((path, "is recorded in the manifest but missing: its rows are lost"))
        elif path.stat().st_size != entry.get("size") or sha256_file(path) != entry.get("sha256"):
            out.append((path, "is damaged: its sha256 differs from the one recorded when it was written"))
    out += [(p, "was never recorded (written by a second writer?)") for n, p in on_disk.items() if n not in recorded]
    return out


@dataclass
class SplitCheck:
    """What :func:`check_split` found in one split."""

    split: str
    chunks: int
    rows: int
    """Rows in the readable chunks."""
    keys: int
    """Distinct states among them."""
    problems: list[tuple[str, str]]
    """``(file, problem)`` of damaged, lost and unrecorded chunks."""

    @property
    def duplicates(self) -> int:
        return self.rows - self.keys

    @property
    def ok(self) -> bool:
        return not self.problems and not self.duplicates


def _readable(run_dir: Path, split: str) -> tuple[list[AdviceRows], list[tuple[str, str]], dict | None]:
    problems = [(str(p), why) for p, why in chunk_problems(run_dir, split)]
    bad = {f for f, why in problems if "damaged" in why or "never recorded" in why}
    parts, meta = [], None
    for path in part_files(run_dir, split):
        if str(path) in bad:
            continue
        try:
            meta = meta or read_meta(path)
            parts.append(_read_rows(path))
        except UserError as err:
            problems.append((str(path), err.message))
    return parts, problems, meta


def check_split(run_dir: Path, split: str) -> SplitCheck:
    """Chunks, rows, distinct keys, and every damaged, lost, unrecorded or unreadable chunk of a split."""
    parts, problems, _ = _readable(run_dir, split)
    rows = AdviceRows.concat(parts) if parts else None
    n = len(rows) if rows is not None else 0
    return SplitCheck(split, len(part_files(run_dir, split)), n, len(rows.keys()) if rows is not None else 0,
                      problems)


def repair_split(run_dir: Path, split: str) -> SplitCheck:
    """Rewrite a split as one chunk holding every good row once (the first of each key); returns the new check.

    Damaged or unreadable chunks are left out (their states are asked again by the next collect); the
    caller holds :func:`advice_lock`.
    """
    parts, problems, meta = _readable(run_dir, split)
    folder = split_dir(run_dir, split)
    old = part_files(run_dir, split)
    if parts and meta is not None:
        rows = AdviceRows.concat(parts)
        keys = np.stack([rows.t.astype(np.int64), rows.position.astype(np.int64), rows.mask.astype(np.int64)], 1)
        _, first = np.unique(keys, axis=0, return_index=True)
        rows = rows.take(np.sort(first))
        (folder / MANIFEST_NAME).unlink(missing_ok=True)
        seq = int(old[-1].stem.split("-")[1]) + 1 if old else 1
        path = folder / f"part-{seq:06d}-{secrets.token_hex(4)}.parquet"
        Manifest(folder).write(path, chunk_bytes(rows, meta, split))
    else:
        (folder / MANIFEST_NAME).unlink(missing_ok=True)
    for p in old:
        p.unlink(missing_ok=True)
    return check_split(run_dir, split)
