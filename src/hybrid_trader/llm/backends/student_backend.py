"""The distilled advisor: a small MLP trained to reproduce the LLM's advice from the observation.

``hybrid-trader advise distill RUN_DIR`` writes ``RUN_DIR/advice/student.pt``; this module
holds the network, its file format and the back end that serves it.

Back ends receive rendered prompts, the student needs the observation (the raw 228 or
261 features). Two ways in:

- :meth:`StudentBackend.advise_batch` ``(obs, masks) -> (probs, confidence)``: one
  batched forward, for the always-on path (every decision of every environment), and
  :meth:`StudentBackend.block_writer`, the same answers written straight into the phase 3
  observations (training's one call a vector step, :mod:`.student_kernel` on the CPU);
- :meth:`StudentBackend.score`: the Backend interface; each query's context must carry
  the raw observation as ``context.observation`` (float32, the student's layout). A
  context without it fails loudly (``BackendError``, kind ``garbage``), never silently.

The student file holds the feature layout (names and hash), the advice identity (hash
of model + prompt) of the dataset it learnt from, the normalisation statistics fitted on
the training rows and its fidelity metrics. A student built for another observation
layout is refused (:class:`~hybrid_trader.errors.UserError` naming both layouts).
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hybrid_trader.actions import N_ACTIONS
from hybrid_trader.errors import UserError
from hybrid_trader.features.names import FEATURE_NAMES
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.base import ERROR_GARBAGE, Backend, BackendError
from hybrid_trader.llm.backends.student_kernel import CLIP, PackedStudent, block_writer, forward_into, pack_student
from hybrid_trader.llm.config import StudentConfig
from hybrid_trader.llm.prompt import RenderedQuery

STUDENT_FORMAT = 1
"""Version of the student file format."""


def layout_names(obs_dim: int) -> list[str]:
    """The feature names of an observation of ``obs_dim`` values (228: phases 1-2, 261: phase 3)."""
    if not 0 < obs_dim <= len(FEATURE_NAMES):
        raise UserError(f"an observation of {obs_dim} values matches no feature layout",
                        fix=f"use observations of 228 (phases 1-2) or {len(FEATURE_NAMES)} (phase 3) features")
    return list(FEATURE_NAMES[:obs_dim])


def layout_hash(names: Sequence[str]) -> str:
    """Short hash of an ordered list of feature names (what a student's inputs mean)."""
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


class StudentNet(nn.Module):
    """Normalise, clip, MLP body; heads: action logits (masked softmax) and confidence (sigmoid)."""

    mean: torch.Tensor
    """Per-feature mean of the training inputs (a registered buffer)."""
    std: torch.Tensor
    """Per-feature standard deviation of the training inputs (a registered buffer)."""

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (128, 128)) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))
        layers: list[nn.Module] = []
        width = obs_dim
        for h in hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU()]
            width = int(h)
        self.body = nn.Sequential(*layers)
        self.logits = nn.Linear(width, N_ACTIONS)
        self.confidence = nn.Linear(width, 1)

    def forward(self, obs: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log-probabilities over legal actions (-inf on illegal), confidence logit)``."""
        x = ((obs - self.mean) / self.std).clamp(-CLIP, CLIP)
        z = self.body(x)
        logits = self.logits(z).masked_fill(~masks, float("-inf"))
        return torch.log_softmax(logits, dim=-1), self.confidence(z).squeeze(-1)


def no_legal_fix(masks: np.ndarray) -> np.ndarray:
    """Masks with HOLD made legal where no action is (a masked softmax needs one legal action).

    The masks themselves (not a copy) when every row has a legal action, the usual case.
    The torch forward uses it; the CPU kernel makes HOLD legal itself.
    """
    masks = np.asarray(masks, dtype=bool)
    if all(masks[:, 0].tolist()):  # HOLD legal in every row (the environments' rule): nothing to fix, no reduction
        return masks
    empty = ~masks.any(axis=1)
    if empty.any():
        masks = masks.copy()
        masks[empty, 0] = True
    return masks


def student_bytes(net: StudentNet, hidden: Sequence[int], *, advice_hash: str, advice_parts: dict, metrics: dict,
                  created_by: str) -> bytes:
    """The student file's bytes (the run layer writes them: ``run.files.atomic_write_bytes``)."""
    obs_dim = int(net.mean.shape[0])
    names = layout_names(obs_dim)
    payload = {
        "format": STUDENT_FORMAT, "obs_dim": obs_dim, "hidden": [int(h) for h in hidden],
        "feature_names": names, "layout_hash": layout_hash(names), "advice_hash": advice_hash,
        "advice_parts": dict(advice_parts), "metrics": metrics, "created_by": created_by,
        "state_dict": net.state_dict(),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


@dataclass
class Student:
    """A loaded student: the network and what it was trained for."""

    net: StudentNet
    obs_dim: int
    feature_names: list
    layout_hash: str
    advice_hash: str
    advice_parts: dict
    metrics: dict
    path: Path
    _packed: PackedStudent | None = None
    _cpu: bool | None = None

    @property
    def device(self) -> torch.device:
        """Where the network's weights are."""
        return next(self.net.parameters()).device

    def check_layout(self, names: Sequence[str], what: str = "the observation") -> None:
        """Refuse observations laid out otherwise than the student's inputs."""
        theirs = layout_hash(names)
        if theirs != self.layout_hash:
            first = next((i for i, (a, b) in enumerate(zip(self.feature_names, names)) if a != b),
                         min(len(self.feature_names), len(names)))
            raise UserError(
                f"the student was trained on another observation layout: {self.obs_dim} features (layout "
                f"{self.layout_hash}), {what} has {len(names)} (layout {theirs}); first difference at index {first}",
                file=str(self.path),
                fix="distil a student on this run's advice dataset: hybrid-trader advise distill RUN_DIR",
            )

    @property
    def packed(self) -> PackedStudent:
        """The weights as the CPU kernel reads them (flattened once, on first use)."""
        if self._packed is None:
            self._packed = pack_student(self.net.state_dict())
        return self._packed

    def advise(self, obs: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(probs (n, 6) float32, zero on illegal; confidence (n,) float32)`` in one forward.

        On the CPU the forward is one compiled call (:mod:`.student_kernel`): for the few rows
        of one decision torch's per-call overhead dominates (measured 150 us per call for a
        228-64-64 net); elsewhere (a GPU) it runs in torch.
        """
        obs = np.asarray(obs, dtype=np.float32)
        if obs.ndim != 2 or obs.shape[1] != self.obs_dim:
            raise UserError(f"the student expects observations of {self.obs_dim} features, got shape {obs.shape}",
                            file=str(self.path), fix="distil a student on observations of this layout")
        if not self._on_cpu:
            return self.advise_torch(obs, masks)
        out = np.zeros((len(obs), N_ACTIONS + 1), dtype=np.float32)
        forward_into(self.packed, obs, masks, out)
        return out[:, :N_ACTIONS], out[:, N_ACTIONS]

    def block_writer(self, *, probs_col: int, conf_col: int, present_col: int,
                     copy: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
        """Always-on training's one call a vector step: ``write(obs, masks, out)`` writes, into row ``r`` of
        ``out`` (float32), ``obs[r, :copy]``, the probabilities at ``probs_col``, the confidence at ``conf_col``
        and 1.0 at ``present_col``.

        ``obs`` (float32, C order) holds at least the student's ``obs_dim`` values a row, ``masks`` is bool
        (:func:`~hybrid_trader.llm.backends.student_kernel.block_writer` on the CPU). No checks a call: the
        caller checked the layout once (:meth:`check_layout`).
        """
        if self._on_cpu:
            return block_writer(self.packed, probs_col=probs_col, conf_col=conf_col, present_col=present_col,
                                copy=copy)

        def write(obs: np.ndarray, masks: np.ndarray, out: np.ndarray) -> None:
            probs, conf = self.advise_torch(obs[:, :self.obs_dim], masks)
            out[:, :copy] = obs[:, :copy]
            out[:, probs_col:probs_col + N_ACTIONS] = probs
            out[:, conf_col] = conf
            out[:, present_col] = 1.0

        return write

    @property
    def _on_cpu(self) -> bool:
        """Whether the network's weights are on the CPU (looked up once: a walk over the parameters)."""
        if self._cpu is None:
            self._cpu = self.device.type == "cpu"
        return self._cpu

    @torch.no_grad()
    def advise_torch(self, obs: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`advise` through the torch network (the reference the CPU kernel is tested against)."""
        device = self.device
        m = torch.as_tensor(no_legal_fix(masks), device=device)
        logp, conf = self.net(torch.as_tensor(np.asarray(obs, dtype=np.float32), device=device), m)
        return logp.exp().cpu().numpy().astype(np.float32), torch.sigmoid(conf).cpu().numpy().astype(np.float32)


def load_student(path: str | Path, device: str = "cpu") -> Student:
    """Load a student file; a missing, truncated or foreign file is a UserError naming it."""
    path = Path(path)
    fix = "write it with: hybrid-trader advise distill RUN_DIR (it lands in RUN_DIR/advice/student.pt)"
    if not path.is_file():
        raise UserError("student file not found", file=str(path), fix=fix)
    try:
        data = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:
        raise UserError(f"not a readable student file ({type(err).__name__}: {str(err)[:120]})", file=str(path),
                        fix=f"the file is truncated or not a student; {fix}") from None
    if not isinstance(data, dict) or data.get("format") != STUDENT_FORMAT or "state_dict" not in data:
        raise UserError(f"not a student file of format {STUDENT_FORMAT}", file=str(path), fix=fix)
    obs_dim = int(data["obs_dim"])
    names = list(data["feature_names"])
    if layout_hash(names) != data["layout_hash"] or len(names) != obs_dim:
        raise UserError("the student file's feature layout is inconsistent (damaged file)", file=str(path), fix=fix)
    net = StudentNet(obs_dim, data["hidden"]).to(device)
    net.load_state_dict(data["state_dict"])
    net.eval()
    return Student(net=net, obs_dim=obs_dim, feature_names=names, layout_hash=data["layout_hash"],
                   advice_hash=str(data["advice_hash"]), advice_parts=dict(data["advice_parts"]),
                   metrics=dict(data["metrics"]), path=path)


class StudentBackend(Backend):
    """The distilled advisor as a back end: microseconds per decision, no prompt."""

    name = "student"

    def __init__(self, config: StudentConfig) -> None:
        if not config.path:
            raise UserError("llm.student.path is empty", fix="set llm.student.path to RUN_DIR/advice/student.pt")
        if config.threads:
            torch.set_num_threads(int(config.threads))
        self.config = config
        self.student = load_student(config.path, config.device)

    def advise_batch(self, obs: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Probabilities over the legal actions and the confidence head, for a batch of raw observations."""
        return self.student.advise(obs, masks)

    def block_writer(self, **columns: int) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
        """:meth:`Student.block_writer`: always-on training's one call a vector step."""
        return self.student.block_writer(**columns)

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        """The student's distribution for each query; its context must carry ``observation``."""
        if not queries:
            return np.zeros((0, N_ACTIONS))
        probs, _ = self.student.advise(self._observations(queries), np.stack([q.context.legal for q in queries]))
        return probs.astype(np.float64)

    def _observations(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        """The raw observations the queries' contexts carry (``context.observation``), stacked."""
        obs = []
        for i, q in enumerate(queries):
            o = getattr(q.context, "observation", None)
            if o is None:
                raise BackendError(
                    f"query {i} has no observation: the student back end reads context.observation, not the prompt",
                    fix="pass the raw observation on the context (context.observation = obs) or call advise_batch",
                    kind=ERROR_GARBAGE)
            obs.append(np.asarray(o, dtype=np.float32).ravel())
        sizes = {len(o) for o in obs}
        if sizes != {self.student.obs_dim}:
            raise BackendError(f"observations of {sorted(sizes)} features; the student expects {self.student.obs_dim}",
                               fix="distil a student on this layout", kind=ERROR_GARBAGE)
        return np.stack(obs)

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        """``ACTION | confidence | student`` from the student's distribution and confidence head."""
        obs = self._observations(queries)
        probs, conf = self.student.advise(obs, np.stack([q.context.legal for q in queries]))
        return [f" {ACTION_WORDS[int(np.argmax(p))]} | {c:.2f} | distilled student" for p, c in zip(probs, conf)]

    def describe(self) -> str:
        m = self.student.metrics.get("val", {}) if isinstance(self.student.metrics, dict) else {}
        agree = m.get("Top-1 agreement [%]")
        tail = f", {agree:.1f}% top-1 agreement on validation" if isinstance(agree, (int, float)) else ""
        s = self.student
        return f"student ({s.path}, {s.obs_dim} features, advice {s.advice_hash}{tail})"


def student_from_options(options: Any) -> StudentBackend:
    """The back end from a mapping or a :class:`StudentConfig` (a run's ``llm.student`` goes through the registry)."""
    if isinstance(options, StudentConfig):
        return StudentBackend(options)
    return StudentBackend(StudentConfig(**dict(options or {})))
