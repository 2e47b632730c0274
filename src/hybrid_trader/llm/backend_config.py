"""The back ends' configuration sections (``llm.transformers``, ``llm.openai``, ``llm.llama_cpp``,
``llm.student``, ``llm.mock``): one dataclass per back end, each field with its docstring.

:class:`~hybrid_trader.llm.config.LLMConfig` holds one of each; a back end's registry row
(``llm.backends.BACKENDS``) names its section.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from hybrid_trader.config import check, secret_hint
from hybrid_trader.llm.backends import TEACHER_NAMES

_ENV_VAR = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_PROB = "use a probability in [0, 1]"
Endpoint = Literal["completions", "chat"]


@dataclass
class TransformersConfig:
    """Local model through Hugging Face transformers (the default back end)."""

    model: str = "gemma-3-270m"
    """'gemma-3-270m' (the packaged GGUF, converted once into the cache), a local model directory, or a .gguf file."""
    cache_dir: str | None = None
    """Where converted models live; None: $HYBRID_TRADER_CACHE/models or ~/.cache/hybrid_trader/models."""
    device: str = "cpu"
    """Torch device: cpu, cuda, cuda:0, mps."""
    dtype: str = "float32"
    """float32 (fast on CPU), bfloat16 or float16 (GPUs)."""
    threads: int | None = None
    """torch.set_num_threads for the process; None leaves torch's default (it is process-wide)."""
    prefix_cache: bool = True
    """Compute the shared prefix's key/value cache once and reuse it for every batch."""
    adapter: str | None = None
    """LoRA adapter folder made by 'llm finetune' (e.g. runs/x/llm_adapter), merged into the model; None: the base."""

    def __post_init__(self) -> None:
        check(self.threads is None or self.threads >= 1, "threads", f"{self.threads} must be >= 1 or null",
              fix="use 1 or more, or null for torch's default")


@dataclass
class OpenAIConfig:
    """Any OpenAI-compatible server: vLLM, llama.cpp server, Ollama, LM Studio."""

    base_url: str = "http://127.0.0.1:8080/v1"
    """Server URL including /v1."""
    model: str = ""
    """Model name the server knows ('' lets the server pick its only model)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (unset: no key is sent); never the key itself."""
    request_timeout_s: float = 30.0
    """Timeout of one HTTP request [s]."""
    retries: int = 1
    """Retries after a failed request (connection errors and 5xx only)."""
    top_logprobs: int = 20
    """Alternatives per token requested in scoring mode (servers cap it, OpenAI at 20)."""
    scoring_endpoint: Endpoint = "completions"
    """completions (raw prompt, logprobs) or chat (chat/completions with logprobs, for chat-only servers)."""
    generation_endpoint: Endpoint = "chat"
    """chat (chat/completions, system + user messages) or completions (raw prompt)."""
    parallel_requests: int = 4
    """Requests of one batch sent concurrently."""

    REFUSED_KEYS: ClassVar[Mapping[str, str]] = {
        key: "export OPENAI_API_KEY=... (llm.openai.api_key_env names the variable); keys are read from the "
             "environment only, never from a config file or --set"
        for key in ("api_key", "key", "token", "api_token")
    }
    """Secrets are never written into a config (it is saved in the run directory)."""

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(str(self.base_url))
        check(url.scheme in ("http", "https") and bool(url.netloc), "base_url",
              f"{self.base_url!r} is not a server URL (it needs http:// or https://, a host and /v1)",
              fix="give the server's address, e.g. --base-url http://127.0.0.1:8080/v1 (llm.openai.base_url)")
        env = self.api_key_env
        looks_like_key = env.startswith("sk-") or not _ENV_VAR.match(env)
        check(not looks_like_key, "api_key_env",
              f"{secret_hint(env)} is not the name of an environment variable (it looks like a key itself)",
              fix="put the key in a variable: export OPENAI_API_KEY=... and set api_key_env: OPENAI_API_KEY "
                  "(names are upper-case letters, digits and _)")
        check(self.request_timeout_s > 0, "request_timeout_s", f"{self.request_timeout_s} must be > 0",
              fix="use a positive number of seconds")
        check(self.retries >= 0, "retries", f"{self.retries} must be >= 0", fix="use 0 or more")
        check(self.top_logprobs >= 1, "top_logprobs", f"{self.top_logprobs} must be >= 1", fix="use 1 to 20")
        check(self.parallel_requests >= 1, "parallel_requests", f"{self.parallel_requests} must be >= 1",
              fix="use 1 or more")


@dataclass
class LlamaCppConfig:
    """llama-cpp-python on a GGUF file (extra ``[llama]``)."""

    model_path: str = ""
    """GGUF file; '' uses the packaged Gemma 3 270M GGUF (assembled into the cache)."""
    n_ctx: int = 1024
    """Context window [tokens]."""
    n_threads: int | None = None
    """CPU threads; None: all CPUs (os.cpu_count())."""
    n_gpu_layers: int = 0
    """Layers offloaded to a GPU (-1: all)."""

    def __post_init__(self) -> None:
        check(self.n_ctx >= 1, "n_ctx", f"{self.n_ctx} must be >= 1", fix="use e.g. 1024")
        check(self.n_threads is None or self.n_threads >= 1, "n_threads", f"{self.n_threads} must be >= 1 or null",
              fix="use 1 or more, or null for all CPUs")
        check(self.n_gpu_layers >= -1, "n_gpu_layers", f"{self.n_gpu_layers} must be >= -1", fix="use -1 (all) or more")


@dataclass
class StudentConfig:
    """The ``llm.student`` section: where the distilled advisor lives."""

    path: str = ""
    """student.pt written by 'hybrid-trader advise distill' (RUN_DIR/advice/student.pt)."""
    device: str = "cpu"
    """Torch device of the student network."""
    threads: int | None = None
    """torch.set_num_threads for the process; None leaves torch's default."""
    teacher: str | None = None
    """Phase 3: a language-model back end (transformers, llama_cpp, openai, mock) that also answers, in its own
    worker, the training decisions llm.query picks; its answers become rows of RUN_DIR/advice/train."""

    def __post_init__(self) -> None:
        check(self.threads is None or self.threads >= 1, "threads", f"{self.threads} must be >= 1 or null",
              fix="use 1 or more, or null (torch's default)")
        if self.teacher is not None:
            check(self.teacher in TEACHER_NAMES, "teacher", f"{self.teacher!r} is not a language-model back end",
                  fix=f"use one of: {', '.join(TEACHER_NAMES)}, or null (no teacher)")


COT_MAX_NEW_TOKENS = 200
"""Generation budget a chain of thought gets when the configuration leaves less (four steps and a decision)."""


@dataclass
class MockConfig:
    """Deterministic rule-based advice over the context (tests, fast training runs)."""

    latency_ms: float = 0.0
    """Simulated time per batch [ms]."""
    coverage: float = 0.9
    """Probability mass the mock puts on action names (the rest is 'other text') [0-1]."""

    def __post_init__(self) -> None:
        check(self.latency_ms >= 0, "latency_ms", f"{self.latency_ms} must be >= 0", fix="use 0 or more ms")
        check(0.0 <= self.coverage <= 1.0, "coverage", f"{self.coverage} is not in [0, 1]", fix=_PROB)
