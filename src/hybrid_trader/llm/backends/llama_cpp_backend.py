"""llama-cpp-python on a GGUF file, in process (optional extra ``[llama]``).

Scoring evaluates, per query, only the tokens after the longest prefix it shares with
what the context already holds (the shared prompt prefix stays in llama.cpp's KV cache),
then reads the last position's logits over the whole vocabulary and sums the softmax at
each action name's first tokens (as the transformers back end does). llama.cpp runs one
sequence at a time here, so a batch is a loop; generation uses ``create_completion``
(which reuses the cached prefix the same way) and stops at a newline.

Some llama-cpp-python wheels crash (SIGSEGV inside ``llama_decode``) on some CPUs; a crash
would kill the whole training or evaluation process without a word. So before loading a
model in process, :func:`check_llama_cpp_runs` evaluates a few tokens of it in a child
process once per (library version, model file) and turns a crash into a
:class:`~hybrid_trader.errors.UserError` that names the version, the signal and the fix.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.base import Backend, BackendError
from hybrid_trader.llm.backends.transformers_backend import surface_forms
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.model_cache import check_gguf_file, gemma_gguf_path
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery

_PROBE = """
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_threads=1, logits_all=False, verbose=False)
llm.eval(llm.tokenize(b"Trading log", add_bos=True, special=False))
"""
PROBE_TIMEOUT_S = 180.0
"""Longest wait for the child process that evaluates a few tokens [s]."""


def run_probe(code: str, *args: str, what: str) -> None:
    """Run ``code`` in a child Python; a crash (killed by a signal) becomes a UserError naming ``what``."""
    try:
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"{what} did not evaluate a few tokens within {PROBE_TIMEOUT_S:.0f} s",
                        fix="use --llm transformers (the same Gemma model), or check the machine's load") from None
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        raise UserError(
            f"{what} crashed ({sig}) evaluating a few tokens on this machine: this llama-cpp-python "
            "version or build does not run the model here",
            fix="use --llm transformers (the same Gemma model), or install the version the project pins "
                "(0.3.36 crashes on Gemma 3 270M; 0.3.16 works): pip install -e '.[llama]' "
                "(it compiles llama.cpp, about 4 minutes)")
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["(no message)"]
        raise UserError(f"{what} failed to evaluate a few tokens: {tail[0]}",
                        fix="check that the file is a GGUF model llama.cpp supports")


@functools.cache
def _checked(version: str, model: str, mtime_ns: int) -> None:
    run_probe(_PROBE, model, what=f"llama-cpp-python {version} on {Path(model).name}")


def check_llama_cpp_runs(path: Path) -> None:
    """Raise UserError unless llama.cpp evaluates a few tokens of ``path`` (checked once per process)."""
    import llama_cpp

    _checked(getattr(llama_cpp, "__version__", "?"), str(path), path.stat().st_mtime_ns)


def _first_tokens(llm, case_variants: bool) -> list[list[int]]:
    owner: dict[int, set[int]] = {}
    for a, word in enumerate(ACTION_WORDS):
        for form in surface_forms(word, case_variants):
            ids = llm.tokenize(form.encode("utf-8"), add_bos=False, special=False)
            if ids:
                owner.setdefault(int(ids[0]), set()).add(a)
    out: list[list[int]] = [[] for _ in ACTION_WORDS]
    for tid, acts in owner.items():
        if len(acts) == 1:
            out[next(iter(acts))].append(tid)
    for a, ids in enumerate(out):
        if not ids:
            raise UserError(f"the model's tokenizer gives {ACTION_WORDS[a]} no token of its own",
                            fix="use llm.mode: generate with this model")
    return out


class LlamaCppBackend(Backend):
    """A GGUF model through llama-cpp-python."""

    name = "llama_cpp"

    def __init__(self, config: LLMConfig, prompts: PromptBuilder) -> None:
        try:
            import llama_cpp
        except ImportError:
            raise UserError("the llama_cpp back end needs llama-cpp-python",
                            fix="pip install -e '.[llama]' (it compiles llama.cpp: about 5-10 minutes)") from None
        self._lib = llama_cpp
        self.config = config
        self.prompts = prompts
        c = config.llama_cpp
        if c.model_path:
            path = Path(c.model_path).expanduser()
            if not path.is_file():
                raise UserError("GGUF model file not found", file=str(path), fix="check llm.llama_cpp.model_path")
            check_gguf_file(path)
        else:
            path = gemma_gguf_path(config.transformers.cache_dir)
        self.model_path = path
        check_llama_cpp_runs(path)
        try:
            self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=c.n_ctx, n_threads=c.n_threads or os.cpu_count(),
                                       n_gpu_layers=c.n_gpu_layers, logits_all=False, verbose=False)
        except (ValueError, RuntimeError, OSError) as err:
            raise UserError(f"llama.cpp cannot load the model: {err}", file=str(path),
                            fix="check that the file is a GGUF model llama.cpp supports") from None
        self.n_vocab = self.llm.n_vocab()
        self.action_ids = _first_tokens(self.llm, config.scoring.case_variants)
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"llama_cpp:{self.model_path}"

    def _tokens(self, q: RenderedQuery) -> list[int]:
        pre = self.llm.tokenize(q.prefix.encode("utf-8"), add_bos=True, special=False)
        suf = self.llm.tokenize(q.suffix.encode("utf-8"), add_bos=False, special=False)
        tokens = pre + suf
        if len(tokens) >= self.config.llama_cpp.n_ctx:
            raise BackendError(f"prompt of {len(tokens)} tokens exceeds llm.llama_cpp.n_ctx",
                               fix="raise llm.llama_cpp.n_ctx or shorten the prompt")
        return tokens

    def _last_logits(self, tokens: list[int]) -> np.ndarray:
        llm = self.llm
        have = llm.input_ids[: llm.n_tokens]
        n = 0
        limit = min(len(have), len(tokens) - 1)
        while n < limit and have[n] == tokens[n]:
            n += 1
        llm.n_tokens = n
        llm.eval(tokens[n:])
        ptr = self._lib.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        out = np.zeros((len(queries), len(ACTION_WORDS)))
        try:
            with self._lock:
                for i, q in enumerate(queries):
                    logits = self._last_logits(self._tokens(q))
                    p = np.exp(logits - logits.max())
                    p /= p.sum()
                    out[i] = [p[ids].sum() for ids in self.action_ids]
        except BackendError:
            raise
        except Exception as err:
            raise BackendError(f"llama.cpp evaluation failed: {err}") from err
        return out

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        texts = []
        stop = None if self.prompts.chain_of_thought else ["\n"]
        try:
            with self._lock:
                for q in queries:
                    r = self.llm.create_completion(q.text, max_tokens=max_new_tokens, temperature=temperature,
                                                   stop=stop)
                    # stream=False (the default) returns one response; the stubs also allow an iterator
                    texts.append(r["choices"][0]["text"])  # type: ignore[index]
        except Exception as err:
            raise BackendError(f"llama.cpp generation failed: {err}") from err
        return texts

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            with contextlib.suppress(Exception):
                llm.close()
            del self.llm
