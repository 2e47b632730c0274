"""The advice identity: which model, prompt and answer settings made a dataset's advice.

Every chunk of the advice dataset (``run.advice_dataset``), every student and every calibration
records it; readers refuse advice of another identity (:func:`check_same_advice`), naming both
hashes and the parts that differ. A placebo's identity names its teacher and seed
(:func:`placebo_identity`); raw advice of a leaning model is its own identity (:data:`RAW`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from hybrid_trader.errors import UserError
from hybrid_trader.llm.backends import BACKENDS, backend_spec
from hybrid_trader.llm.config import LLMConfig

RAW = "raw"
"""A leaning model's answers that no batch calibration divided (``--no-calibrate``): in the identity and metadata."""


def _short(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def model_id(config: LLMConfig) -> str:
    """What model answers: back end and the model it names (its registry row's ``identity``; not where a
    server runs)."""
    spec = backend_spec(config.backend)
    section = getattr(config, spec.section, None)
    return f"{spec.name}:{spec.identity(section) if spec.identity else _short(section)}"


def advice_identity(config: LLMConfig, retrieval: dict | None = None, raw: bool = False) -> dict[str, str]:
    """The parts that decide the advice, each a short string, plus ``hash`` over them all.

    ``model`` (back end and model), ``mode`` (score/generate), ``template`` (context
    template and answer prefix), ``prompt`` (the rest of the prompt: system text,
    examples, separators, example orders) and ``answer`` (scoring or generation options). The one
    function behind every identity check (collect, distill, the student). ``prompt.preset`` is left
    out (the text it fills in is hashed), and so is ``example_orders`` at 1, so prompts from before
    those options keep their identity. With ``prompt.retrieval`` on, ``retrieval`` hashes what decides the
    retrieved examples: ``retrieval`` (``Retriever.identity()``: k, mode, features, horizon and the training
    pool's digest; None: the settings alone, a pool not built yet); off, it is left out. ``raw``: a leaning
    model's answers that no batch calibration divided (``--no-calibrate``) add ``calibration: raw``, so raw
    advice is never mixed with, nor taken for, calibrated advice of the same model.
    """
    p = dataclasses.asdict(config.prompt)
    p.pop("preset", None)
    settings = p.pop("retrieval", None)
    if p.get("example_orders") == 1:
        p.pop("example_orders")
    template = {"context_template": p.get("context_template"), "answer_prefix": p.get("answer_prefix")}
    rest = {k: v for k, v in p.items() if k not in template}
    answer = dataclasses.asdict(config.scoring if config.mode == "score" else config.generation)
    parts = {
        "model": model_id(config),
        "mode": config.mode,
        "template": _short(template),
        "prompt": _short(rest),
        "answer": _short(answer),
    }
    if config.prompt.retrieval.enabled:
        parts["retrieval"] = _short(retrieval if retrieval is not None else {"settings": settings, "pool": None})
    if raw:
        parts["calibration"] = RAW
    parts["hash"] = _short(parts)
    return parts


PLACEBO_KIND = "shuffled"
"""The placebo advisor: a teacher's own answers permuted across states (``advise.placebo``)."""


def placebo_identity(teacher: dict, seed: int) -> dict[str, str]:
    """The advice identity of a teacher's answers shuffled with ``seed``: it names the teacher and the seed.

    ``model`` is ``shuffled:<teacher's model>``, the prompt parts are the teacher's (the rendered
    contexts stay with their states), ``teacher`` the teacher's ``hash`` and ``seed`` the
    permutation's seed; ``hash`` over them all, so another teacher or seed is another dataset.
    """
    parts = {k: str(v) for k, v in teacher.items() if k not in ("hash", "teacher", "seed")}
    parts.update(model=f"{PLACEBO_KIND}:{teacher.get('model')}", teacher=str(teacher.get("hash")), seed=str(int(seed)))
    parts["hash"] = _short(parts)
    return parts


def check_same_advice(stored: dict, current: dict, *, file: str, fix: str) -> None:
    """Refuse advice built with another model or prompt, naming both hashes and the parts that differ."""
    if stored.get("hash") == current.get("hash"):
        return
    parts = ("model", "mode", "template", "prompt", "answer", "retrieval", "calibration", "teacher", "seed")
    differ = [f"{k} {stored.get(k)!r} vs {current.get(k)!r}" for k in parts if stored.get(k) != current.get(k)]
    raise UserError(
        f"the advice was built with another model or prompt: dataset {stored.get('hash')} vs "
        f"{current.get('hash')} ({'; '.join(differ) or 'unknown parts'})", file=file, fix=fix)


def raw_advice(meta: dict) -> str | None:
    """Why a dataset's advice (its chunks' metadata) is a leaning model's raw answers; None: it is not.

    Marked raw by ``advise collect --no-calibrate``; a dataset of a leaning model in scoring mode that records
    no calibration (written before collect fitted one by default, or marked the raw and content-free cases)
    counts as raw too.
    """
    identity = meta.get("advice", {})
    if identity.get("calibration") == RAW or meta.get("calibration") == RAW:
        return "collected with --no-calibrate"
    name = str(identity.get("model", "")).partition(":")[0]
    if not meta.get("calibration") and name in BACKENDS and BACKENDS[name].leans and identity.get("mode") == "score":
        return "collected without a batch calibration (before advise collect fitted one by default)"
    return None
