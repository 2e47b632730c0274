"""Collect the LLM's advice on the states a trained policy visits (``hybrid-trader advise collect``).

1. **Roll the run's policy** over the chosen split's days, with the run's environment
   configuration and observation normaliser, as evaluation does (every day in order,
   the account carried over, no termination on a breach): one **deterministic** pass
   (the states the agent really reaches), then ``sampled`` passes that sample from the
   policy (seeded), which reach the positions and masks the deterministic agent avoids.
   Each state is keyed by ``(t, position, mask)``; the first pass to reach a key keeps it.
   States with a single legal action (only HOLD) are skipped: there is nothing to advise.
2. **Ask the LLM** (the configured back end, through the advisor's synchronous
   ``advise_now``; cache off) in batches, in this process or in ``workers`` processes
   that each load their own model. Back-end failures stop the collection with one
   message (what was answered is kept); abstentions (low coverage, parse failures) are
   stored as answers.
3. **Store** every answer in chunks (:mod:`hybrid_trader.run.advice_dataset`), flushed every
   ``chunk`` rows and on any interruption. A rerun rolls the policy again (seconds),
   skips every key already stored and asks only the rest.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pickle
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hybrid_trader.advise.calibrate import advice_calibration
from hybrid_trader.child_process import end_with_parent
from hybrid_trader.env import TradingEnv
from hybrid_trader.errors import UserError
from hybrid_trader.hindsight.retrieval_pool import attach_run_pool
from hybrid_trader.llm.async_advisor import build_advisor
from hybrid_trader.llm.backends import backend_spec
from hybrid_trader.llm.backends.student_backend import layout_hash, layout_names
from hybrid_trader.llm.batch_calibration import BatchCalibration
from hybrid_trader.llm.config import LLMConfig, load_llm_config
from hybrid_trader.llm.context import AdvisorContext, context_from_market
from hybrid_trader.llm.prompt import PromptBuilder
from hybrid_trader.llm.retrieval import RetrievalPool
from hybrid_trader.run.advice_dataset import (
    AdviceRows,
    advice_dir,
    advice_lock,
    read_split,
    remove_temporaries,
    visited_key,
    write_chunk,
)
from hybrid_trader.run.advice_identity import advice_identity, check_same_advice
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.files import check_writable
from hybrid_trader.run.market import Market, load_market, make_veto
from hybrid_trader.training.runner import find_model, load_run_config

DEFAULT_WORKERS = 2
"""Model processes for local models: 2 x 1 thread answered 7.3 contexts/s against 5.8 for 1 x 2 threads
(Gemma 3 270M, 2 cores, docs/ADVISE.md)."""


def default_workers(config: LLMConfig) -> int:
    """Worker processes when ``--workers`` is not given: DEFAULT_WORKERS for a model run in this machine's
    memory whose threads can be set (its registry row), else 1 (servers, the mock)."""
    spec = backend_spec(config.backend)
    return DEFAULT_WORKERS if spec.local and spec.threads_field else 1


def worker_count(requested: int | None, config: LLMConfig, say: Callable[[str], None] = print) -> int:
    """Worker processes: ``requested`` (default :func:`default_workers`), capped at the cores with a note."""
    n = requested or default_workers(config)
    cores = os.cpu_count() or 1
    if n > cores:
        say(f"note: --workers {n} capped at {cores}, the number of cores (each worker holds its own model)")
        n = cores
    return n


# ------------------------------------------------------------------------------ config
def collect_llm_config(run_config: RunConfig, config_path: str | None = None, backend: str | None = None,
                       batch: int | None = None, adapter: str | None = None) -> LLMConfig:
    """The LLM configuration to ask: the run's ``llm`` section (or ``config_path`` instead), ``backend`` over it.

    ``adapter``: a LoRA adapter folder for the transformers back end (``llm finetune``).

    The answer cache and journal are off (each state is asked once, the dataset is the
    record) and the model runs in the asking process (``workers`` give parallelism).
    """
    base = load_llm_config(config_path) if config_path else run_config.llm
    over: dict[str, Any] = {"process": False}
    if batch:
        over["batching.max_batch"] = int(batch)
    if adapter:
        if (backend or base.backend) != "transformers":
            raise UserError(f"--adapter is for the transformers back end, not {backend or base.backend}",
                            fix="add --llm transformers, or drop --adapter")
        if not Path(adapter).is_dir():
            raise UserError("adapter folder not found", file=str(adapter),
                            fix="give the folder hybrid-trader llm finetune wrote (RUN_DIR/llm_adapter)")
        over["transformers.adapter"] = str(Path(adapter).resolve())
    return base.for_dataset(backend, over, source=config_path or "the run's config.yaml (llm section)")


# ------------------------------------------------------------------------------ rollout
@dataclass
class VisitedStates:
    """States a policy visited, one per key, in visiting order."""

    t: list = field(default_factory=list)
    session: list = field(default_factory=list)
    position: list = field(default_factory=list)
    unrealized_pnl: list = field(default_factory=list)
    mask: list = field(default_factory=list)
    obs: list = field(default_factory=list)
    context: list = field(default_factory=list)
    rollout: list = field(default_factory=list)
    steps: int = 0
    """Decisions stepped over all passes (before de-duplication)."""
    single_legal: int = 0
    """Decisions skipped because only one action was legal."""

    def __len__(self) -> int:
        return len(self.t)


class RunPolicy:
    """The run's final policy on raw observations: normalised like in training, masked."""

    def __init__(self, run_dir: Path) -> None:
        from sb3_contrib import MaskablePPO

        path, vec_path = find_model(run_dir)
        self.model = MaskablePPO.load(path, device="cpu")
        self.vec = None
        if vec_path is not None:
            with open(vec_path, "rb") as f:
                self.vec = pickle.load(f)
        shape = self.model.observation_space.shape
        assert shape is not None  # the trading env's observation space is a Box
        self.model_dim = int(shape[0])

    def __call__(self, obs: np.ndarray, mask: np.ndarray, deterministic: bool) -> int:
        x = obs
        if self.model_dim > len(obs):  # phase 3: no advice while collecting it (the advice block's zeros)
            x = np.concatenate([obs, np.zeros(self.model_dim - len(obs), np.float32)])
        if self.vec is not None:
            x = self.vec.normalize_obs(x)
        action, _ = self.model.predict(x, action_masks=mask, deterministic=deterministic)
        return int(action)


def rollout_states(market: Market, run_config: RunConfig, policy: Callable, split: str, *, sampled: int = 1,
                   seed: int = 0, skip: set | None = None) -> VisitedStates:
    """Walk the split's days with the policy (1 deterministic + ``sampled`` sampled passes); unique new states.

    Each day is walked from a fresh account, as training's one-day episodes start: one
    account over the whole split would stay breached after its first bad day, leaving
    every later day with HOLD as the only legal action (nothing to ask).
    """
    import torch

    cfg = dataclasses.replace(run_config.env, episode_sessions=1, terminate_on_breach=True)
    sessions = list(market.sessions(split))
    if not sessions:
        raise UserError(f"the run's {split} split holds no trading day", fix="choose another --split")
    risk = run_config.risk if cfg.phase == 3 else None
    env = TradingEnv(market.bars, market.features, cfg, sessions=sessions, risk_veto=make_veto(risk))
    days = len(env.episode_windows)  # the usable days (TradingEnv refuses none): a holiday has no window
    out = VisitedStates()
    seen = set(skip or ())
    session_id = market.bars.session_id
    for k, day in itertools.product(range(sampled + 1), range(days)):
        if day == 0:
            torch.manual_seed(seed + k)
        obs, _ = env.reset(seed=seed + k if day == 0 else None, options={"start": day})
        while True:
            mask = env.action_masks()
            full = np.zeros(6, dtype=bool)
            full[:len(mask)] = mask
            out.steps += 1
            if full.sum() <= 1:
                out.single_legal += 1
            else:
                account = env.account_snapshot()
                t = env.current_index
                key = visited_key(t, account.position, mask)
                if key not in seen:
                    seen.add(key)
                    out.t.append(t)
                    out.session.append(int(session_id[t]))
                    out.position.append(key[1])
                    out.unrealized_pnl.append(float(account.unrealized_pnl))
                    out.mask.append(key[2])
                    out.obs.append(np.asarray(obs, dtype=np.float32).copy())
                    out.context.append(context_from_market(market.bars, market.features, t, account, full))
                    out.rollout.append(k)
            action = policy(obs, mask, k == 0)
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    return out


# ------------------------------------------------------------------------------ asking
Answer = tuple  # (probs (6,), confidence, abstained, reason)


def _answers(advices) -> list[Answer]:
    return [(np.asarray(a.probs, np.float32), float(a.confidence), bool(a.abstained), a.abstain_reason or "")
            for a in advices]


def calibrated_answer(calibration: BatchCalibration, answer: Answer, ctx: AdvisorContext) -> Answer:
    """An answer divided by the mean answer of its kind of state; abstentions stay as they are."""
    probs, confidence, abstained, reason = answer
    if abstained:
        return answer
    p = calibration.apply(probs, ctx.legal, ctx.market, ctx.position).astype(np.float32)
    return p, float(p.max()), abstained, reason


class LocalAsker:
    """The advisor in this process."""

    def __init__(self, config: LLMConfig, retrieval_pool: RetrievalPool | None = None) -> None:
        self.advisor = build_advisor(config, retrieval_pool=retrieval_pool)
        self.describe = self.advisor.backend.describe()
        self.workers = 1

    def ask(self, batches: Sequence[list[AdvisorContext]]):
        """Yield ``(batch index, answers)`` in order."""
        for i, batch in enumerate(batches):
            yield i, _answers(self.advisor.advise_now(batch, use_cache=False, raise_errors=True))

    def close(self) -> None:
        self.advisor.close()


_WORKER_ADVISOR = None


def _init_worker(config: dict, threads: int, retrieval_pool: RetrievalPool | None = None) -> None:
    global _WORKER_ADVISOR
    end_with_parent()  # Ctrl-C is the parent's (it flushes, then stops the pool); its kill -9 ends this worker
    import torch

    torch.set_num_threads(threads)
    cfg = LLMConfig.from_dict(config)
    spec = backend_spec(cfg.backend)
    if spec.threads_field:
        setattr(getattr(cfg, spec.section), spec.threads_field, threads)
    _WORKER_ADVISOR = build_advisor(cfg, retrieval_pool=retrieval_pool)


def _ask_in_worker(batch: list[AdvisorContext]) -> list[Answer]:
    assert _WORKER_ADVISOR is not None  # _init_worker built it in this pool process
    return _answers(_WORKER_ADVISOR.advise_now(batch, use_cache=False, raise_errors=True))


class PoolAsker:
    """``workers`` processes, each with its own model and ``threads`` torch threads; batches in flight."""

    def __init__(self, config: LLMConfig, workers: int, threads: int,
                 retrieval_pool: RetrievalPool | None = None) -> None:
        self.workers = workers
        self.describe = f"{config.backend} x {workers} processes x {threads} threads"
        self.pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                        initargs=(config.to_dict(), threads, retrieval_pool))

    def ask(self, batches: Sequence[list[AdvisorContext]]):
        """Yield ``(batch index, answers)`` as they complete (two batches queued per worker)."""
        pending: dict[Future, int] = {}
        nxt = 0
        while nxt < len(batches) or pending:
            while nxt < len(batches) and len(pending) < 2 * self.workers:
                pending[self.pool.submit(_ask_in_worker, batches[nxt])] = nxt
                nxt += 1
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                i = pending.pop(fut)
                yield i, fut.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------------------ collect
@dataclass
class CollectResult:
    """What one ``collect`` did for one split."""

    split: str
    steps: int
    visited: int
    stored_before: int
    asked: int
    abstained: int
    seconds: float
    contexts_per_s: float
    steady_contexts_per_s: float
    chunks: list = field(default_factory=list)
    backend: str = ""
    calibration: str = ""
    """What divided the answers (``AdviceCalibration.label``): ``batch (FILE)``, ``raw (...)``, or ''."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"chunks": [str(c) for c in self.chunks]}


@dataclass(frozen=True)
class CollectRequest:
    """How one split's advice is collected: what is already loaded, how many states, how asked and written."""

    market: Market | None = None
    """The run's market, already loaded; None: loaded from the run's data."""
    run_config: RunConfig | None = None
    """The run's configuration, already read; None: read from the run directory."""
    policy: Callable | None = None
    """The policy whose rollout visits the states; None: the run's own (:class:`RunPolicy`)."""
    workers: int | None = None
    """Processes asking the model; None: as many as the back end allows (:func:`worker_count`)."""
    max_states: int | None = None
    """At most this many states in the split's dataset (a seeded random subset, in time order); None: all."""
    sampled: int = 1
    """Sampled rollouts beside the deterministic one."""
    chunk: int = 256
    """Answers per written chunk."""
    progress: bool = True
    """A progress bar."""
    asker: Any = None
    """Who asks the model (tests); None: a local or pooled asker by ``workers``."""
    say: Callable[[str], None] = print
    """Where progress lines go."""
    calibrate: bool = True
    """Divide a leaning model's answers by the run's batch calibration; False: store them raw, marked so."""


def collect_split(run_dir: Path, split: str, llm_config: LLMConfig,
                  request: CollectRequest = CollectRequest()) -> CollectResult:
    """Collect (or continue collecting) one split's advice into ``RUN_DIR/advice/<split>/``, as ``request`` says.

    A leaning model's answers are divided by the run's batch calibration, fitted first on the training days
    when the run has none; ``request.calibrate=False`` stores them raw, marked so (:func:`advice_calibration`).
    Holds ``RUN_DIR/advice/.lock`` throughout: a second writer (another collect, a phase 3
    teacher, distill) is refused at once, naming the process that writes.
    """
    check_writable(advice_dir(Path(run_dir)), what="advise collect")
    with advice_lock(Path(run_dir), f"advise collect {split}"):
        return _collect_split(run_dir, split, llm_config, request)


def _collect_split(run_dir: Path, split: str, llm_config: LLMConfig, request: CollectRequest) -> CollectResult:
    """:func:`collect_split` without the lock."""
    run_dir = Path(run_dir)
    run_config = request.run_config or load_run_config(run_dir)
    market, max_states, sampled, say = request.market, request.max_states, request.sampled, request.say
    prompts = PromptBuilder(llm_config)
    if llm_config.prompt.retrieval.enabled:  # the training days' pool decides the examples and the identity
        market = market or load_market(run_config.data, run_config.split)
        attach_run_pool(prompts, market, run_config, source=run_dir)
    pool = prompts.retrieval.pool if prompts.retrieval is not None else None
    retrieval = prompts.retrieval.identity() if prompts.retrieval is not None else None
    market = market or load_market(run_config.data, run_config.split)
    choice = advice_calibration(run_dir, llm_config, calibrate=request.calibrate, run_config=run_config, market=market,
                                retrieval=retrieval, say=say)
    calibration, calibration_id = choice.calibration, choice.mark
    identity = advice_identity(llm_config, retrieval=retrieval, raw=choice.raw)
    remove_temporaries(run_dir, split)
    stored, stored_meta = read_split(run_dir, split, required=False)
    if stored_meta is not None:
        check_same_advice(stored_meta["advice"], identity, file=str(run_dir / "advice" / split),
                          fix="collect with the LLM configuration that built this dataset (see its chunks' metadata), "
                              "or move the folder away to start a new dataset")
    if stored_meta is not None and stored_meta.get("calibration", "") != calibration_id:
        was = stored_meta.get("calibration") or "no batch calibration"
        raise UserError(f"the stored advice was calibrated with {was}"
                        f", the run now with {calibration_id or 'none'}", file=str(run_dir / "advice" / split),
                        fix="collect with the calibration that built this dataset, or move the folder away to "
                            "start a new dataset")
    policy = request.policy or RunPolicy(run_dir)
    visited = rollout_states(market, run_config, policy, split, sampled=sampled, seed=run_config.ppo.seed,
                             skip=stored.keys() if stored is not None else None)
    n_stored = len(stored) if stored is not None else 0
    todo = list(range(len(visited)))
    if max_states is not None and len(todo) > max(int(max_states) - n_stored, 0):
        # a seeded random subset, in time order: spread over every day of the split, not its first days
        keep = np.random.default_rng(run_config.ppo.seed).permutation(len(todo))[:max(int(max_states) - n_stored, 0)]
        todo = sorted(int(i) for i in keep)
    obs_dim = len(visited.obs[0]) if len(visited) else (stored.obs.shape[1] if stored is not None else 0)
    meta = {"advice": identity, "obs_dim": obs_dim,
            "layout_hash": layout_hash(layout_names(obs_dim)) if obs_dim else "",
            "run": run_dir.name, "phase": run_config.env.phase, "calibration": calibration_id}
    if stored_meta is not None and meta["layout_hash"] and stored_meta.get("layout_hash") != meta["layout_hash"]:
        raise UserError(f"the stored advice has observation layout {stored_meta.get('layout_hash')}, this run "
                        f"{meta['layout_hash']}", file=str(run_dir / "advice" / split),
                        fix="collect each run's advice in its own run directory")
    say(f"{split}: {visited.steps:,} decisions over {sampled + 1} pass(es), {visited.single_legal:,} with one legal "
        f"action; {n_stored:,} states stored, {len(visited):,} new, asking {len(todo):,}")
    result = CollectResult(split, visited.steps, len(visited), n_stored, 0, 0, 0.0, 0.0, 0.0,
                           calibration=choice.label if calibration_id else "")
    if not todo:
        return result
    size = llm_config.batching.max_batch
    batches = [todo[i:i + size] for i in range(0, len(todo), size)]
    asker = request.asker
    if asker is None:
        n = worker_count(request.workers, llm_config, say)
        if n > 1:
            threads = max(1, (os.cpu_count() or 1) // n)
            asker = PoolAsker(llm_config, n, threads, pool)
        else:
            asker = LocalAsker(llm_config, pool)
    result.backend = asker.describe
    buffer: list[tuple[int, Answer]] = []

    def flush() -> None:
        if not buffer:
            return
        idx = np.array([i for i, _ in buffer])
        ans = [a for _, a in buffer]
        if calibration is not None:
            ans = [calibrated_answer(calibration, a, visited.context[i]) for i, a in buffer]
        rows = AdviceRows(
            t=np.array(visited.t, np.int64)[idx],
            time=np.array([visited.context[i].timestamp.isoformat() for i in idx], dtype=object),
            session=np.array(visited.session, np.int32)[idx], position=np.array(visited.position, np.int8)[idx],
            unrealized_pnl=np.array(visited.unrealized_pnl, np.float32)[idx],
            mask=np.array(visited.mask, np.int16)[idx], obs=np.stack([visited.obs[i] for i in idx]),
            probs=np.stack([a[0] for a in ans]), confidence=np.array([a[1] for a in ans], np.float32),
            abstained=np.array([a[2] for a in ans], bool), abstain_reason=np.array([a[3] for a in ans], dtype=object),
            context=np.array([prompts.render_context(visited.context[i]) for i in idx], dtype=object),
            rollout=np.array(visited.rollout, np.int8)[idx])
        result.chunks.append(write_chunk(run_dir, split, rows, {**meta, "model": asker.describe}))
        buffer.clear()

    start = time.perf_counter()
    first_done = None
    first_rows = 0
    bar = tqdm(total=len(todo), unit="ctx", desc=f"advice {split}", disable=not request.progress, smoothing=0.1)
    try:
        for b, answers in asker.ask([[visited.context[i] for i in batch] for batch in batches]):
            buffer.extend(zip(batches[b], answers))
            result.asked += len(answers)
            result.abstained += sum(1 for a in answers if a[2])
            if first_done is None:
                first_done, first_rows = time.perf_counter(), len(answers)
            bar.update(len(answers))
            if len(buffer) >= request.chunk:
                flush()
    finally:
        bar.close()
        flush()  # Ctrl-C, a failed back end: what was answered is written before the error goes on
        asker.close()
        result.seconds = time.perf_counter() - start
        result.contexts_per_s = result.asked / result.seconds if result.seconds > 0 else math.nan
        steady = time.perf_counter() - first_done if first_done is not None else 0.0
        result.steady_contexts_per_s = (result.asked - first_rows) / steady if steady > 0 else math.nan
    return result
