"""Run a back end in a child process, so that the model never competes with training for the GIL.

A model called from the advisor's worker thread shares the training process: its
Python-level work holds the GIL and its tensor work shares the CPU threads, which
slows every training step (measured: phase 3 with Gemma in-process ran several times
slower than phase 2). ``ProcessBackend`` starts the real back end in a spawned child
process and forwards ``score``/``generate`` over a pipe; the worker thread waits on the
pipe with the GIL released, and the model gets its own interpreter and threads.

Failures keep their meaning: a ``BackendError``/``BackendTimeout`` raised in the child
is raised again here (a counted abstention in the advisor); a dead child is a
``BackendError`` saying so. ``close()`` stops and joins the child.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Sequence
from multiprocessing.context import SpawnProcess
from typing import Any

import numpy as np

from hybrid_trader.child_process import end_with_parent
from hybrid_trader.errors import UserError
from hybrid_trader.llm.backends import make_backend
from hybrid_trader.llm.backends.base import Backend, BackendError, BackendTimeout
from hybrid_trader.llm.prompt import PromptBuilder

START_TIMEOUT_S = 600.0
"""Longest wait for the child to load its model (a first GGUF conversion takes about a minute)."""


def _serve(conn: Any, config: Any, threads: int) -> None:  # pragma: no cover - runs in the child
    end_with_parent()  # Ctrl-C is the parent's to handle; kill -9 of the parent ends this child too
    try:
        import torch

        torch.set_num_threads(max(int(threads), 1))
    except ImportError:
        pass
    try:
        backend = make_backend(config, PromptBuilder(config))
        backend.check()
    except UserError as err:
        conn.send(("user_error", err.message, err.fix))
        return
    except Exception as err:
        conn.send(("error", f"{type(err).__name__}: {err}", None))
        return
    conn.send(("ready", backend.describe(), None))
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            break
        if op == "close":
            break
        try:
            conn.send(("ok", getattr(backend, op)(*args), None))
        except BackendTimeout as err:
            conn.send(("timeout", str(err), err.fix))
        except BackendError as err:
            conn.send(("error", str(err), err.fix))
        except Exception as err:
            conn.send(("error", f"{type(err).__name__}: {err}", None))
    backend.close()


class ProcessBackend(Backend):
    """The back end of ``config`` (``config.process`` ignored), served by a child process."""

    def __init__(self, config: Any, *, threads: int = 1) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        inner = config.replace(process=False) if hasattr(config, "replace") else config
        proc = ctx.Process(target=_serve, args=(child, inner, threads), daemon=True, name=f"llm-{config.backend}")
        self._proc: SpawnProcess | None = proc
        proc.start()
        child.close()
        self._lock = threading.Lock()
        self.name = f"{config.backend}"
        self._description = self.name
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise UserError(f"the {config.backend} model did not start within {START_TIMEOUT_S:.0f} s",
                            fix="check that it loads with 'hybrid-trader llm ask --backend " + config.backend + "'")
        try:
            status, message, fix = self._conn.recv()
        except (EOFError, OSError):
            proc.join(timeout=5)
            code = proc.exitcode
            self.close()
            raise UserError(f"the {config.backend} model process exited while starting (code {code})",
                            fix="run 'hybrid-trader llm ask --backend " + config.backend + "' to see why") from None
        if status != "ready":
            self.close()
            raise UserError(message, fix=fix)
        self._description = f"{message} (in a child process)"

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            proc = self._proc
            if proc is None or not proc.is_alive():
                code = "closed" if proc is None else f"code {proc.exitcode}"
                raise BackendError(f"the {self.name} model process has exited ({code})",
                                   fix="see its error above; the advisor abstains until it is rebuilt")
            try:
                self._conn.send((op, args))
                status, payload, fix = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as err:
                raise BackendError(f"lost the {self.name} model process: {err}") from None
        if status == "ok":
            return payload
        if status == "timeout":
            raise BackendTimeout(payload, fix=fix)
        raise BackendError(payload, fix=fix)

    def score(self, queries: Sequence[Any]) -> np.ndarray:
        return self._call("score", list(queries))

    def generate(self, queries: Sequence[Any], max_new_tokens: int, temperature: float) -> list[str]:
        return self._call("generate", list(queries), max_new_tokens, temperature)

    def describe(self) -> str:
        return self._description

    def close(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is None:
            return
        # A call in progress holds the lock; do not wait for it longer than a few seconds.
        if proc.is_alive() and self._lock.acquire(timeout=5):
            try:
                self._conn.send(("close", ()))
            except (OSError, BrokenPipeError, ValueError):
                pass
            finally:
                self._lock.release()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        self._conn.close()
        self._proc = None
