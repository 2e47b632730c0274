"""Any OpenAI-compatible server: llama.cpp server, vLLM, Ollama, LM Studio, OpenAI itself.

- Scoring (``openai.scoring_endpoint: completions``): ``POST /completions`` with the raw
  prompt, ``max_tokens: 1``, ``logprobs: top_logprobs``; the returned alternatives for
  the first token are mapped to actions. The server's tokenizer is unknown here, so a
  token counts for action ``a`` when its text (stripped, upper-cased) is a non-empty
  prefix of exactly one action name (``" BUY"``, ``" Buy"``, or ``" B"`` from a
  Llama-style tokenizer that splits the word). Only the top alternatives come back, so
  ``coverage`` is a lower bound. ``scoring_endpoint: chat`` uses ``/chat/completions``
  with ``logprobs: true, top_logprobs`` for chat-only servers.
- Generation (``generation_endpoint: chat``): ``POST /chat/completions`` with the shared
  prefix as the system message and the per-query text as the user message;
  ``completions`` sends the raw prompt with ``stop: ["\\n"]``.

A batch is sent as up to ``parallel_requests`` concurrent HTTP requests. Connection
failures and 5xx answers are retried ``retries`` times; a timeout raises
:class:`BackendTimeout` (LLM_TIMEOUT), anything else :class:`BackendError` (LLM_ERROR)
with its ``kind`` (auth, connection, http_5xx, http_4xx, garbage). HTTP 401/403 name the
key variable (``llm.openai.api_key_env``) and how to set it. Server answers quoted in
messages pass through :func:`~hybrid_trader.llm.redact.redact` (a server that echoes the
key does not put it on the console or in the journal). Only the standard library is used
(urllib), so no extra package is needed.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.backends.base import (
    ERROR_AUTH,
    ERROR_CONNECTION,
    ERROR_GARBAGE,
    ERROR_HTTP_4XX,
    ERROR_HTTP_5XX,
    Backend,
    BackendError,
    BackendTimeout,
)
from hybrid_trader.llm.config import LLMConfig
from hybrid_trader.llm.prompt import PromptBuilder, RenderedQuery
from hybrid_trader.llm.redact import redact
from hybrid_trader.llm.redact import register_key_env as _register_key_env


def token_action(token: str) -> int | None:
    """The action whose name this token begins (case-insensitive), or None if none or several."""
    t = token.strip().upper().replace(" ", "_")
    if not t:
        return None
    hits = [a for a, w in enumerate(ACTION_WORDS) if w.startswith(t)]
    return hits[0] if len(hits) == 1 else None


def mass_from_top_logprobs(top: dict[str, float] | list[tuple[str, float]]) -> np.ndarray:
    """Per-action probability mass from a token -> logprob mapping (first answer token)."""
    items = top.items() if isinstance(top, dict) else top
    mass = np.zeros(len(ACTION_WORDS))
    for tok, lp in items:
        a = token_action(tok)
        if a is not None and lp is not None and math.isfinite(lp):
            mass[a] += math.exp(lp)
    return mass


class OpenAIBackend(Backend):
    """HTTP client of an OpenAI-compatible server."""

    name = "openai"

    def __init__(self, config: LLMConfig, prompts: PromptBuilder) -> None:
        self.config = config
        self.prompts = prompts
        c = config.openai
        self.base_url = c.base_url.rstrip("/")
        self.model = c.model
        self.api_key_env = c.api_key_env
        self.api_key = os.environ.get(c.api_key_env) if c.api_key_env else None
        _register_key_env(c.api_key_env)
        self._pool = ThreadPoolExecutor(max_workers=max(1, c.parallel_requests), thread_name_prefix="llm-http")
        self._closed = False

    def describe(self) -> str:
        return f"openai:{self.base_url} model={self.model or '(server default)'}"

    # ------------------------------------------------------------------ HTTP
    def _request(self, path: str, payload: dict | None, timeout: float | None = None) -> Any:
        c = self.config.openai
        url = f"{self.base_url}/{path.lstrip('/')}"
        data = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(c.retries + 1):
            req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
            try:
                with urllib.request.urlopen(req, timeout=timeout or c.request_timeout_s) as resp:
                    return json.loads(resp.read().decode("utf-8"))
            except urllib.error.HTTPError as err:
                body = redact(err.read().decode("utf-8", "replace")[:300])
                if err.code >= 500 and attempt < c.retries:
                    last = err
                    time.sleep(0.2 * (attempt + 1))
                    continue
                if err.code in (401, 403):
                    raise BackendError(f"{url} refused the credentials (HTTP {err.code}): {body}",
                                       fix=self.auth_fix(), kind=ERROR_AUTH) from None
                raise BackendError(f"{url} answered HTTP {err.code}: {body}",
                                   fix="check llm.openai.model and the server's log",
                                   kind=ERROR_HTTP_5XX if err.code >= 500 else ERROR_HTTP_4XX) from None
            except TimeoutError as err:
                raise BackendTimeout(f"{url} did not answer within {timeout or c.request_timeout_s} s",
                                     fix="raise llm.openai.request_timeout_s or use a faster model") from err
            except urllib.error.URLError as err:
                if isinstance(err.reason, (socket.timeout, TimeoutError)):
                    raise BackendTimeout(f"{url} timed out", fix="raise llm.openai.request_timeout_s") from err
                last = err
                if attempt < c.retries:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise BackendError(f"cannot reach the LLM server at {self.base_url}: {redact(err.reason)}",
                                   fix="start the server (e.g. python -m llama_cpp.server --model M.gguf) "
                                       "or fix llm.openai.base_url", kind=ERROR_CONNECTION) from None
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise BackendError(f"{url} did not answer JSON: {err}", fix="check llm.openai.base_url "
                                   "(it must end with /v1)", kind=ERROR_GARBAGE) from None
            except (ConnectionError, OSError) as err:
                last = err
                if attempt < c.retries:
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise BackendError(f"connection to {self.base_url} failed: {redact(err)}",
                                   fix="check that the server is running", kind=ERROR_CONNECTION) from None
        raise BackendError(f"request to {url} failed: {redact(last)}", kind=ERROR_CONNECTION)  # pragma: no cover

    def auth_fix(self) -> str:
        """How to give the server a key it accepts (names the variable, never the key)."""
        var = self.api_key_env
        if not var:
            return ("the server wants an API key: set llm.openai.api_key_env to the name of an environment "
                    "variable and export it, e.g. export OPENAI_API_KEY=<your key>")
        if not self.api_key:
            return (f"the key is read from the environment variable {var}, which is not set: "
                    f"export {var}=<your key> (or set llm.openai.api_key_env to the variable that holds it)")
        return (f"the key in the environment variable {var} was refused: export {var}=<a valid key> "
                f"(or set llm.openai.api_key_env to the variable that holds the right one)")

    def check(self) -> None:
        """The server answers /models (a UserError otherwise); picks its model when none is configured."""
        try:
            data = self._request("models", None, timeout=min(10.0, self.config.openai.request_timeout_s))
        except BackendError as err:
            raise UserError(redact(err), fix=err.fix) from None
        if not isinstance(data, dict):
            raise UserError(f"the server at {self.base_url} answered /models with {type(data).__name__}, "
                            "not an OpenAI model list", fix="check llm.openai.base_url (it must end with /v1)")
        items = data.get("data", [])
        ids = [str(m["id"]) for m in (items if isinstance(items, list) else [])
               if isinstance(m, dict) and m.get("id") is not None]
        if not self.model:
            if not ids:
                raise UserError(f"the server at {self.base_url} lists no model",
                                fix="set llm.openai.model to the model name the server knows")
            self.model = ids[0]
        elif ids and self.model not in ids:
            raise UserError(f"the server at {self.base_url} has no model '{self.model}'", value=self.model,
                            fix=f"use one of: {', '.join(map(str, ids))}")
        self._check_credentials()

    def _check_credentials(self) -> None:
        """One 1-token request on the endpoint queries use: servers such as llama.cpp list /models without a key.

        Only a refused key (HTTP 401/403) is an error here; anything else shows at query time.
        """
        c = self.config.openai
        chat = (c.scoring_endpoint if self.config.mode == "score" else c.generation_endpoint) == "chat"
        payload = {**self._model(), "max_tokens": 1, "temperature": 0.0}
        payload.update({"messages": [{"role": "user", "content": "OK"}]} if chat else {"prompt": "OK"})
        try:
            self._request("chat/completions" if chat else "completions", payload,
                          timeout=min(10.0, c.request_timeout_s))
        except BackendError as err:
            if err.kind == ERROR_AUTH:
                raise UserError(redact(err), fix=err.fix) from None

    def _model(self) -> dict:
        return {"model": self.model} if self.model else {}

    # --------------------------------------------------------------- scoring
    def _score_one(self, q: RenderedQuery) -> np.ndarray:
        c = self.config.openai
        k = max(1, int(c.top_logprobs))
        if c.scoring_endpoint == "completions":
            data = self._request("completions", {**self._model(), "prompt": q.text, "max_tokens": 1,
                                                 "temperature": 0.0, "logprobs": k})
            try:
                top = data["choices"][0]["logprobs"]["top_logprobs"][0]
            except (KeyError, IndexError, TypeError):
                raise BackendError("the server returned no logprobs for /completions",
                                   fix="use a server that supports logprobs (llama.cpp, vLLM), or "
                                       "llm.openai.scoring_endpoint: chat, or llm.mode: generate",
                                   kind=ERROR_GARBAGE) from None
            return mass_from_top_logprobs(top or {})
        data = self._request("chat/completions", {
            **self._model(), "messages": self._messages(q), "max_tokens": 1, "temperature": 0.0,
            "logprobs": True, "top_logprobs": min(k, 20)})
        try:
            top = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise BackendError("the server returned no logprobs for /chat/completions",
                               fix="use llm.mode: generate with this server", kind=ERROR_GARBAGE) from None
        return mass_from_top_logprobs([(t.get("token", ""), t.get("logprob")) for t in top])

    def score(self, queries: Sequence[RenderedQuery]) -> np.ndarray:
        return np.stack(list(self._pool.map(self._score_one, queries))) if queries else np.zeros((0, 6))

    # ------------------------------------------------------------ generation
    def _messages(self, q: RenderedQuery) -> list[dict]:
        return [{"role": "system", "content": q.prefix.strip()}, {"role": "user", "content": q.suffix.strip()}]

    def _generate_one(self, q: RenderedQuery, max_new_tokens: int, temperature: float) -> str:
        c = self.config.openai
        if c.generation_endpoint == "chat":
            data = self._request("chat/completions", {**self._model(), "messages": self._messages(q),
                                                      "max_tokens": max_new_tokens, "temperature": temperature})
            try:
                return str(data["choices"][0]["message"]["content"] or "")
            except (KeyError, IndexError, TypeError):
                raise BackendError("malformed /chat/completions answer", fix="check the server",
                                   kind=ERROR_GARBAGE) from None
        stop = None if self.prompts.chain_of_thought else ["\n"]
        data = self._request("completions", {**self._model(), "prompt": q.text, "max_tokens": max_new_tokens,
                                             "temperature": temperature, **({"stop": stop} if stop else {})})
        try:
            return str(data["choices"][0]["text"] or "")
        except (KeyError, IndexError, TypeError):
            raise BackendError("malformed /completions answer", fix="check the server", kind=ERROR_GARBAGE) from None

    def generate(self, queries: Sequence[RenderedQuery], max_new_tokens: int, temperature: float) -> list[str]:
        return list(self._pool.map(lambda q: self._generate_one(q, max_new_tokens, temperature), queries))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
