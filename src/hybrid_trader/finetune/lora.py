"""LoRA fine-tuning of the local LLM on hindsight labels (``hybrid-trader llm finetune``).

The loss is what scoring mode reads: the cross-entropy of the next token after the
answer prefix against the first token of the label's action name (``" BUY"``), over
the whole vocabulary. Each step:

1. runs the shared prefix (system text + few-shot examples) once, without gradients,
   with the current adapter, and keeps its key/value cache;
2. runs the batch's suffixes on that cache with gradients (the prefix is context, as
   in inference; only the suffix positions are differentiated, which makes a step
   several times cheaper than back-propagating through ~350 prefix tokens);
3. steps AdamW on the LoRA weights (peft; attention projections).

Batches are **class balanced**: each example's class is drawn uniformly among the
classes present, then an example of that class uniformly, so a HOLD-heavy label set
cannot collapse the model to HOLD. Every ``eval_every`` steps the loss on the
validation split's examples (later days) is measured; the best adapter is kept and
training stops after ``patience`` evaluations without improvement. Every
``checkpoint_every`` steps (and on Ctrl-C) a checkpoint holds the adapter, the
optimiser, the sampler's random state and the history; ``resume`` continues from the
newest one, refusing one made on other data or another base model.

Layout::

    RUN_DIR/llm_adapter/adapter_model.safetensors, adapter_config.json   best adapter (peft)
    RUN_DIR/llm_adapter/hybrid_trader_adapter.json                        base model, hashes, metrics
    RUN_DIR/llm_adapter/checkpoints/step-000040/                          adapter + state.pt
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hybrid_trader import __version__
from hybrid_trader.errors import UserError
from hybrid_trader.finetune.examples import ExampleSet
from hybrid_trader.llm.backends.transformers_backend import batch_cache_view, full_inputs, quiet_peft, suffix_inputs
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.model_cache import ADAPTER_META, model_fingerprint, quiet_load_progress, resolve_model_dir
from hybrid_trader.run.files import staged_dir
from hybrid_trader.run.rundir import ADAPTER

"""Folder of the fine-tuned adapter inside a run directory."""
CHECKPOINTS = "checkpoints"
STATE_FILE = "state.pt"


@dataclass
class FinetuneConfig:
    """Budget and hyper-parameters of one fine-tuning run."""

    steps: int = 200
    """Optimiser steps (the budget)."""
    lr: float = 2e-4
    """AdamW learning rate."""
    rank: int = 8
    """LoRA rank."""
    alpha: int | None = None
    """LoRA scaling alpha; None: 2 x rank."""
    batch: int = 8
    """Examples per step (class balanced)."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Linear layers that get an adapter."""
    eval_every: int = 20
    """Steps between validation losses (and early-stopping checks)."""
    patience: int = 3
    """Validation checks without improvement before stopping."""
    val_examples: int = 64
    """Validation examples (evenly spread over the later days)."""
    checkpoint_every: int = 20
    """Steps between checkpoints."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept."""
    seed: int = 0
    """Seed of the adapter's initialisation and of the batch sampler."""
    threads: int | None = None
    """torch.set_num_threads; None: torch's default."""
    device: str = "auto"
    """Torch device: auto (cuda when a GPU is present, else cpu), cpu, cuda, cuda:1, mps."""

    def __post_init__(self) -> None:
        for name in ("steps", "rank", "batch", "eval_every", "checkpoint_every", "patience", "val_examples",
                     "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise UserError(f"finetune {name} {getattr(self, name)!r} must be >= 1", value=getattr(self, name))
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise UserError(f"finetune lr {self.lr!r} must be a finite number > 0", value=self.lr, fix="use e.g. 2e-4")


@dataclass
class FinetuneResult:
    """What a fine-tuning run did."""

    adapter_dir: Path
    start_step: int
    """Step the run started from (> 0 after --resume)."""
    step: int
    """Last step done."""
    best_step: int
    best_val_loss: float
    base_val_loss: float
    """Validation loss of the base model (step 0)."""
    seconds: float
    """Wall time of the steps of this invocation (model load excluded) [s]."""
    steps_per_s: float
    stopped_early: bool
    interrupted: bool
    history: list[dict] = field(default_factory=list)


class Trainer:
    """The model with its LoRA adapter, the tokenised examples and the optimiser."""

    def __init__(self, llm_config: LLMConfig, config: FinetuneConfig, train: ExampleSet, val: ExampleSet) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.config = config
        t = llm_config.transformers
        if llm_config.backend != "transformers":
            raise UserError(f"fine-tuning needs the transformers back end, not {llm_config.backend!r}",
                            fix="set llm.backend: transformers (a local model)")
        if t.adapter:
            raise UserError("llm.transformers.adapter is set: fine-tuning starts from the base model",
                            value=t.adapter, fix="remove llm.transformers.adapter from the run's llm config")
        if config.threads:
            torch.set_num_threads(int(config.threads))
        self.model_name = t.model
        self.model_dir = resolve_model_dir(t.model, t.cache_dir)
        self.fingerprint = model_fingerprint(self.model_dir)
        auto = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(auto if config.device == "auto" else config.device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
        torch.manual_seed(config.seed)
        with quiet_load_progress():
            base = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=torch.float32,
                                                        local_files_only=True)
        base.to(self.device)  # type: ignore[arg-type]  # transformers types .to() oddly (a decorated method)
        alpha = int(config.alpha or 2 * config.rank)
        lora = LoraConfig(r=config.rank, lora_alpha=alpha, lora_dropout=0.0,
                          target_modules=list(config.target_modules), task_type="CAUSAL_LM")
        with quiet_peft():
            self.model = get_peft_model(base, lora)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.sliding_window = getattr(base.config, "sliding_window", None)
        self.train = self._encode(train)
        self.val = self._encode(val, limit=config.val_examples)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=config.lr)

    # ------------------------------------------------------------------ data
    def _target_id(self, answer: str) -> int:
        return int(self.tokenizer(answer, add_special_tokens=False).input_ids[0])

    def _encode(self, examples: ExampleSet, limit: int | None = None) -> dict[str, Any]:
        n = len(examples)
        pick = np.arange(n) if limit is None or n <= limit else np.unique(
            np.linspace(0, n - 1, limit).round().astype(np.int64))
        prefix = examples.queries[0].prefix
        if any(q.prefix != prefix for q in examples.queries):
            raise UserError("the examples mix prompt prefixes (several markets)", fix="fine-tune one market per run")
        tok = self.tokenizer
        has_bos = tok.bos_token is not None and prefix.startswith(tok.bos_token)
        answers = examples.answers
        return {
            "prefix": tok(prefix, add_special_tokens=not has_bos).input_ids,
            "suffix": [tok(examples.queries[i].suffix, add_special_tokens=False).input_ids for i in pick],
            "target": np.array([self._target_id(answers[i]) for i in pick], dtype=np.int64),
            "label": examples.labels.label[pick].astype(np.int64),
        }

    # ------------------------------------------------------------------ loss
    def logits(self, data: dict[str, Any], rows: np.ndarray, grad: bool):
        """Next-token logits after each chosen row's prompt, (B, V)."""
        torch = self.torch
        p_ids = data["prefix"]
        s_ids = [data["suffix"][i] for i in rows]
        if self.sliding_window and self.sliding_window - 1 <= len(p_ids):
            kwargs = full_inputs(torch, self.pad_id, p_ids, s_ids, self.device)
        else:
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([p_ids], device=self.device), use_cache=True,
                                 logits_to_keep=1)
            kwargs = suffix_inputs(torch, self.pad_id, len(p_ids), s_ids, self.device)
            kwargs.update(past_key_values=batch_cache_view(out.past_key_values, len(rows)), use_cache=True)
        with torch.set_grad_enabled(grad):
            return self.model(**kwargs, logits_to_keep=1).logits[:, -1, :].float()

    def loss(self, data: dict[str, Any], rows: np.ndarray, grad: bool):
        target = self.torch.tensor(data["target"][rows], device=self.device)
        return self.torch.nn.functional.cross_entropy(self.logits(data, rows, grad), target)

    def val_loss(self) -> float:
        self.model.eval()
        n = len(self.val["target"])
        total = 0.0
        for start in range(0, n, 16):
            rows = np.arange(start, min(n, start + 16))
            total += float(self.loss(self.val, rows, grad=False)) * len(rows)
        return total / n

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """A class-balanced batch of training rows."""
        labels = self.train["label"]
        classes = np.unique(labels)
        drawn = rng.choice(classes, size=self.config.batch)
        return np.array([rng.choice(np.flatnonzero(labels == c)) for c in drawn], dtype=np.int64)

    def step(self, rows: np.ndarray) -> float:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.train, rows, grad=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    # ------------------------------------------------------------------ files
    def save_adapter(self, folder: Path, meta: dict) -> None:
        """The adapter (peft files) and its metadata, written whole (``run.files.staged_dir``); checkpoints stay."""
        with staged_dir(folder, keep=(CHECKPOINTS,)) as tmp:
            self.model.save_pretrained(str(tmp))
            (tmp / ADAPTER_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def checkpoint_dirs(adapter_dir: Path) -> list[Path]:
    return sorted((adapter_dir / CHECKPOINTS).glob("step-*"))


@dataclass(frozen=True)
class FinetuneData:
    """The labelled examples an adapter learns from, and the label settings they were built with."""

    train: ExampleSet
    """The training days' examples (the gradient steps)."""
    val: ExampleSet
    """The validation days' examples (the validation loss, early stopping)."""
    labels: dict = field(default_factory=dict)
    """The hindsight label settings (``LabelConfig`` as a dict): part of the adapter's identity."""


def finetune(run_dir: Path, llm_config: LLMConfig, data: FinetuneData, config: FinetuneConfig, *,
             resume: bool = False, progress: bool = True, on_step: Callable[[int], None] | None = None
             ) -> FinetuneResult:
    """Train (or, with ``resume``, continue) the run's LoRA adapter on ``data``; returns what happened.

    ``on_step(step)`` is called after each step (tests use it to interrupt). Ctrl-C
    saves a checkpoint of the last finished step and returns ``interrupted=True``.
    """
    adapter_dir = Path(run_dir) / ADAPTER
    checkpoints = checkpoint_dirs(adapter_dir)
    if not resume and (adapter_dir / ADAPTER_META).exists():
        raise UserError("this run already has a fine-tuned adapter", file=str(adapter_dir),
                        fix="add --resume to continue it, or move the folder away to start again")
    trainer = Trainer(llm_config, config, data.train, data.val)
    digests = {"train": data.train.digest(), "val": data.val.digest()}
    identity = {"base_model": trainer.model_name, "base_model_dir": str(trainer.model_dir),
                "base_fingerprint": trainer.fingerprint, "data": digests, "labels": data.labels,
                "lora": {"rank": config.rank, "alpha": config.alpha or 2 * config.rank,
                         "target_modules": list(config.target_modules)}}
    torch = trainer.torch
    rng = np.random.default_rng(config.seed)
    step, history = 0, []
    best: dict[str, Any] = {"step": 0, "val_loss": float("inf")}
    base_val = float("nan")
    bad_evals = 0
    if resume and checkpoints:  # without a checkpoint, --resume starts from step 0
        step, history, best, base_val, bad_evals = _load_checkpoint(trainer, checkpoints[-1], identity, rng)
    start_step = step
    if step == 0:
        base_val = trainer.val_loss()
        best = {"step": 0, "val_loss": base_val}
        history.append({"step": 0, "val_loss": base_val})
        trainer.save_adapter(adapter_dir, {**identity, **_meta(best, base_val, history, config)})

    def checkpoint(at: int) -> None:
        with staged_dir(adapter_dir / CHECKPOINTS / f"step-{at:06d}") as tmp:
            trainer.model.save_pretrained(str(tmp))
            torch.save({"step": at, "optimizer": trainer.optimizer.state_dict(), "rng": rng.bit_generator.state,
                        "history": history, "best": best, "base_val": base_val, "bad_evals": bad_evals,
                        "identity": identity}, tmp / STATE_FILE)
        for old in checkpoint_dirs(adapter_dir)[:-config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    stopped_early = interrupted = False
    t0 = time.perf_counter()
    bar = tqdm(total=config.steps, initial=step, desc="finetune", unit="step", disable=not progress, leave=False)
    ctrl_c = _DeferredInterrupt()  # Ctrl-C ends the step in progress first: the checkpoint is that of a whole step
    try:
        while step < config.steps:
            loss = _finite(trainer.step(trainer.sample(rng)), step + 1)
            step += 1
            bar.update(1)
            row: dict[str, Any] = {"step": step, "train_loss": loss}
            if step % config.eval_every == 0 or step == config.steps:
                row["val_loss"] = v = trainer.val_loss()
                if v < best["val_loss"]:
                    best = {"step": step, "val_loss": v}
                    bad_evals = 0
                    history.append(row)
                    trainer.save_adapter(adapter_dir, {**identity, **_meta(best, base_val, history, config)})
                else:
                    bad_evals += 1
                    history.append(row)
                bar.set_postfix(loss=f"{loss:.3f}", val=f"{v:.3f}", best=f"{best['val_loss']:.3f}")
            else:
                history.append(row)
            if step % config.checkpoint_every == 0:
                checkpoint(step)
            if on_step is not None:
                on_step(step)
            if bad_evals >= config.patience:
                stopped_early = True
                break
            if ctrl_c.hit:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
        if step > start_step and not (adapter_dir / CHECKPOINTS / f"step-{step:06d}").is_dir():
            checkpoint(step)
    finally:
        ctrl_c.restore()
        bar.close()
    seconds = time.perf_counter() - t0
    done = step - start_step
    meta_path = adapter_dir / ADAPTER_META
    stored = json.loads(meta_path.read_text(encoding="utf-8"))
    stored.update(history=history, steps_done=step, stopped_early=stopped_early, finished=not interrupted)
    meta_path.write_text(json.dumps(stored, indent=2) + "\n", encoding="utf-8")
    return FinetuneResult(adapter_dir=adapter_dir, start_step=start_step, step=step, best_step=best["step"],
                          best_val_loss=best["val_loss"], base_val_loss=base_val, seconds=seconds,
                          steps_per_s=done / seconds if seconds > 0 else 0.0, stopped_early=stopped_early,
                          interrupted=interrupted, history=history)


def _finite(loss: float, step: int) -> float:
    """The step's loss, or a UserError naming the step where training diverged (NaN or infinite)."""
    if not math.isfinite(loss):
        raise UserError(f"llm finetune: the training loss is {loss} at step {step}: training diverged",
                        fix="lower --lr (e.g. 2e-4) and resume from the last checkpoint with --resume, or start again")
    return loss


class _DeferredInterrupt:
    """SIGINT (Ctrl-C) recorded instead of raised, so the step in progress ends whole (main thread only).

    A KeyboardInterrupt in the middle of a step would leave the optimiser stepped, or the
    sampler advanced, with the step not counted: the checkpoint would not be that of any
    step, and a resumed run would differ from an uninterrupted one (kill -9 resumes from a
    periodic checkpoint and was exact).
    """

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.hit:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.hit = True

    def restore(self) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None


def _meta(best: dict, base_val: float, history: list, config: FinetuneConfig) -> dict:
    return {"best_step": best["step"], "best_val_loss": best["val_loss"], "base_val_loss": base_val,
            "config": asdict(config), "history": history, "created_by": f"hybrid-trader {__version__}"}


def _load_checkpoint(trainer: Trainer, folder: Path, identity: dict, rng: np.random.Generator):
    """Restore adapter weights, optimiser and sampler from ``folder``; refuse another base model or data."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    torch = trainer.torch
    try:
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=False)
        weights = load_file(str(folder / "adapter_model.safetensors"))
    except (OSError, RuntimeError, EOFError) as err:
        raise UserError(f"checkpoint is damaged ({str(err)[:120]})", file=str(folder),
                        fix="delete this checkpoint folder; --resume then takes the previous one") from None
    saved = state["identity"]
    for key, what in (("base_fingerprint", "base model"), ("data", "training or validation data")):
        if saved.get(key) != identity.get(key):
            raise UserError(f"the checkpoint was made with another {what}: {saved.get(key)} vs {identity.get(key)}",
                            file=str(folder), fix="resume with the run's original configuration, or start again "
                            "without --resume after moving RUN_DIR/llm_adapter away")
    set_peft_model_state_dict(trainer.model, weights)
    trainer.optimizer.load_state_dict(state["optimizer"])
    rng.bit_generator.state = state["rng"]
    return state["step"], state["history"], state["best"], state["base_val"], state["bad_evals"]
