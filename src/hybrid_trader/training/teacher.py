"""The teacher beside the student: the real LLM answers a share of phase 3's training decisions.

With ``llm.backend: student`` and ``llm.student.teacher: transformers`` (or another
language-model back end), phase 3 still advises every decision with the student, in one
batched forward per step. The teacher runs beside it, in its own worker (a thread; a
local model in its own child process, ``llm.process``), and answers, as fast as it can,
the decisions the query policy ``llm.query`` picks among states it has not answered yet.
Training never waits for it: a decision is offered, and the answer is recorded whenever
it arrives, however late. The offers wait in ``llm.batching.max_batch`` slots (not one
per environment), so the model answers full batches; when every slot waits, the oldest
offer gives its place to the new one.

Each answer is a row of the run's advice dataset, ``RUN_DIR/advice/train``, in the format
and with the advice identity ``advise collect`` writes (the teacher's model, prompt and
answer settings; its rows' ``rollout`` is :data:`TRAINING_PASS`). So the states phase 3's
own policy visits extend the dataset of the next distillation round:
``hybrid-trader advise collect RUN_DIR --llm transformers`` asks the states not answered
yet (it skips the teacher's rows by key), ``--split val`` the held-out ones, and
``hybrid-trader advise distill RUN_DIR`` trains a student on all of them.

Rows are written in chunks of ``chunk`` answers and when training ends or is
interrupted (the runner closes the environments): an answer already written is never
lost, and a resumed run continues the same dataset (a dataset of another model or
prompt is refused, naming both).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_trader.account_state import AccountState
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.advice import Advice
from hybrid_trader.llm.backends.student_backend import layout_hash, layout_names
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.context import AdvisorContext, context_from_market
from hybrid_trader.run.advice_dataset import (
    AdviceRows,
    advice_lock,
    read_split,
    remove_temporaries,
    visited_key,
    write_chunk,
)
from hybrid_trader.run.advice_identity import advice_identity, check_same_advice
from hybrid_trader.run.lock import FolderLock

TRAINING_PASS = -1
"""The ``rollout`` of a row the teacher answered during phase 3 training (``advise collect``'s passes are >= 0)."""
SPLIT = "train"
"""The teacher answers training decisions: its rows go to the training split's dataset."""
SLOT_BASE = 1_000_000
"""The advisor's index of slot 0: apart from the environments' indices, which the query policy keys its memory by."""
MAX_WAITING = 4096
"""Offered states kept while their answers are due; older ones (queries replaced in the queue) are forgotten."""


def teacher_config(llm: LLMConfig) -> LLMConfig:
    """The teacher's LLM configuration: the run's ``llm`` section with ``llm.student.teacher`` as the back end.

    No answer cache (each state is asked once; the dataset is the record) and no
    journal; everything that makes the advice identity (model, prompt, answer settings)
    is the run's, as ``advise collect --llm TEACHER`` on the run would ask it.
    """
    teacher = llm.student.teacher
    if teacher is None:
        raise ValueError("llm.student.teacher is not set")
    return llm.for_dataset(teacher).in_run()


@dataclass
class _Offered:
    """A state offered to the teacher, kept until its answer arrives."""

    key: tuple[int, int, int]
    obs: np.ndarray
    account: AccountState
    context: AdvisorContext


class TeacherLog:
    """Offers training decisions to the teacher and writes its answers as rows of the advice dataset.

    ``advisor``: an :class:`~hybrid_trader.llm.async_advisor.Advisor` over the teacher's
    back end (``teacher_config``); ``market``: the run's bars and features. Call
    :meth:`bind` once the run's folder exists, :meth:`offer` once per vector step and
    :meth:`close` at the end.
    """

    def __init__(self, advisor: Any, market: Any, *, phase: int, chunk: int = 256) -> None:
        self.advisor = advisor
        self.market = market
        self.phase = int(phase)
        self.chunk = int(chunk)
        self.identity = advice_identity(advisor.config)
        self.run_dir: Path | None = None
        self._lock: FolderLock | None = None
        """RUN_DIR/advice's writer lock, from :meth:`bind` to :meth:`close`."""
        self.queued = 0
        """Offers queued for the model (an environment's newer offer replaces one still waiting in the queue)."""
        self.answered = 0
        """Answers recorded (abstentions included)."""
        self.written = 0
        """Rows written to the dataset."""
        self.slots = int(advisor.config.batching.max_batch)
        """Offers waiting at once: the advisor's "environments" are these slots, so a batch can be full."""
        self._keys: set[tuple[int, int, int]] = set()
        self._waiting: dict[tuple[int, int], _Offered] = {}
        """(slot, step) -> the offer, until its answer arrives or a later answer of its slot shows it replaced."""
        self._slot_step: dict[int, int] = {}
        """Slot -> step of its newest offer still waiting (free slots are absent)."""
        self._answers: deque[tuple[int, int, Advice]] = deque()
        self._rows: list[tuple[_Offered, Advice]] = []
        self._meta: dict[str, Any] = {}
        advisor.on_answer = self._answered
        advisor.expect_envs(self.slots)  # a batch is complete once every slot has a query waiting

    def describe(self) -> str:
        return str(self.advisor.backend.describe())

    def bind(self, run_dir: Path) -> None:
        """Write to ``run_dir``'s training dataset; a resumed run continues it (same identity and layout only)."""
        run_dir = Path(run_dir)
        self._lock = advice_lock(run_dir, "train (phase 3 teacher)").acquire()  # released by close()
        try:
            remove_temporaries(run_dir, SPLIT)
            stored, meta = read_split(run_dir, SPLIT, required=False)
            fix = ("set llm.student.teacher to the back end that built it (see its chunks' metadata), or move "
                   f"{run_dir / 'advice' / SPLIT} away to start a new dataset")
            obs_dim = len(FEATURE_NAMES)  # phase 3's raw features, as advise collect stores them
            self._meta = {"advice": self.identity, "obs_dim": obs_dim,
                          "layout_hash": layout_hash(layout_names(obs_dim)),
                          "run": run_dir.name, "phase": self.phase, "model": self.describe()}
            if meta is not None:
                check_same_advice(meta["advice"], self.identity, file=str(run_dir / "advice" / SPLIT), fix=fix)
                if meta.get("layout_hash") != self._meta["layout_hash"]:
                    raise UserError(f"the stored advice has observation layout {meta.get('layout_hash')}, the "
                                    f"teacher's {self._meta['layout_hash']}", file=str(run_dir / "advice" / SPLIT),
                                    fix=fix)
        except BaseException:
            self._lock.release()
            raise
        self._keys = stored.keys() if stored is not None else set()
        self.run_dir = run_dir

    # ---------------------------------------------------------------------------- per step
    def offer(self, obs: np.ndarray, accounts: Sequence[AccountState | None], steps: Sequence[int],
              confidence: Callable[[int], Any] | None = None) -> None:
        """Offer each environment's decision (raw ``obs`` rows, their account snapshots, the advisor's clock).

        The query policy decides which to ask; states answered before (stored or offered in
        this run) and states with one legal action are never asked. Records the answers
        that arrived since the last call. ``confidence(i)``: environment i's RL confidence
        for the query policy's uncertainty trigger (None: no trigger).
        """
        if self.run_dir is None:
            return
        advisor = self.advisor
        bars, features = self.market.bars, self.market.features
        for i, account in enumerate(accounts):
            if account is None or sum(account.mask) <= 1:
                continue
            mask = account.mask
            key = visited_key(account.t, account.position, mask)
            step = int(steps[i])
            if key in self._keys or not advisor.should_query(i, step, account,
                                                             confidence(i) if confidence is not None else None):
                continue
            context = context_from_market(bars, features, account.t, account, mask)
            slot = self._slot()
            if advisor.submit(slot, step, context, force=True):
                advisor.policy.mark(i, step, account)  # the query policy's memory is per environment, not slot
                self._keys.add(key)
                self._waiting[(slot, step)] = _Offered(key, np.array(obs[i], dtype=np.float32), account, context)
                self._slot_step[slot] = step
                self.queued += 1
        self._collect()

    def _slot(self) -> int:
        """A free slot, else the one whose offer has waited longest (the new offer replaces it in the queue)."""
        for slot in range(SLOT_BASE, SLOT_BASE + self.slots):
            if slot not in self._slot_step:
                return slot
        return min(self._slot_step, key=self._slot_step.__getitem__)

    def _answered(self, env_index: int, step: int, advice: Advice) -> None:
        """The advisor's worker: queue the answer for the training thread (a deque append is atomic)."""
        self._answers.append((env_index, step, advice))

    def _collect(self) -> None:
        while self._answers:
            slot, step, advice = self._answers.popleft()
            offered = self._waiting.pop((slot, step), None)
            if offered is not None:
                self._rows.append((offered, advice))
                self.answered += 1
            if self._slot_step.get(slot) == step:
                del self._slot_step[slot]
            # a slot's answers come in step order (one query per slot and batch): an earlier offer
            # still waiting was replaced in the queue, and its state may be offered again
            for k in [k for k in self._waiting if k[0] == slot and k[1] < step]:
                self._keys.discard(self._waiting.pop(k).key)
        if len(self._waiting) > MAX_WAITING:  # a safety net: never more than this many offers kept
            for k in sorted(self._waiting, key=lambda k: k[1])[:len(self._waiting) - MAX_WAITING]:
                self._keys.discard(self._waiting.pop(k).key)
        if len(self._rows) >= self.chunk:
            self.flush()

    def flush(self) -> Path | None:
        """Write the recorded answers as one chunk (nothing when there are none)."""
        if not self._rows or self.run_dir is None:
            return None
        rows, self._rows = self._rows, []
        offered = [o for o, _ in rows]
        answers = [a for _, a in rows]
        session_id = self.market.bars.session_id
        render = self.advisor.prompts.render_context
        data = AdviceRows(
            t=np.array([o.key[0] for o in offered], np.int64),
            time=np.array([o.context.timestamp.isoformat() for o in offered], dtype=object),
            session=np.array([session_id[o.key[0]] for o in offered], np.int32),
            position=np.array([o.key[1] for o in offered], np.int8),
            unrealized_pnl=np.array([o.account.unrealized_pnl for o in offered], np.float32),
            mask=np.array([o.key[2] for o in offered], np.int16),
            obs=np.stack([o.obs for o in offered]),
            probs=np.stack([np.asarray(a.probs, np.float32) for a in answers]),
            confidence=np.array([a.confidence for a in answers], np.float32),
            abstained=np.array([a.abstained for a in answers], bool),
            abstain_reason=np.array([a.abstain_reason or "" for a in answers], dtype=object),
            context=np.array([render(o.context) for o in offered], dtype=object),
            rollout=np.full(len(rows), TRAINING_PASS, np.int8))
        path = write_chunk(self.run_dir, SPLIT, data, self._meta)
        self.written += len(rows)
        return path

    def stats(self) -> dict[str, float]:
        """``llm/teacher_*`` figures for the training log."""
        out = {"llm/teacher_queued": float(self.queued), "llm/teacher_answered": float(self.answered),
               "llm/teacher_rows_written": float(self.written)}
        advisor = self.advisor.stats()
        for key in ("avg_latency_ms", "batch_size_avg"):
            if advisor.get(f"llm/{key}") is not None:
                out[f"llm/teacher_{key.removeprefix('avg_')}"] = float(advisor[f"llm/{key}"])
        return out

    def close(self) -> None:
        """Stop the teacher (after the batch in progress), then write every answer recorded."""
        try:
            self.advisor.close()
        finally:
            try:
                self._collect()
                self.flush()
            finally:
                if self._lock is not None:
                    self._lock.release()

