"""Configuration of the LLM advisor (the ``llm`` section of a run's config).

The packaged default is ``hybrid_trader/configs/llm.yaml``; :func:`load_llm_config`
reads it (or a user's file) and :meth:`LLMConfig.from_dict` turns a mapping into the
dataclasses below, rejecting unknown keys with a did-you-mean hint.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from hybrid_trader.errors import UserError, did_you_mean

BACKENDS = ("transformers", "openai", "llama_cpp", "mock")
MODES = ("score", "generate")
QUERY_MODES = ("selective", "always", "never")
TRIGGERS = ("uncertainty", "flat", "interval", "state_change")


@dataclass
class FewShotExample:
    """One worked example placed in the shared (cached) prompt prefix."""

    answer: str
    """The answer line the example shows, e.g. ``BUY | 0.70 | uptrend, RSI rising``."""
    context: dict = field(default_factory=dict)
    """Context fields of the example (any field of the template; missing ones are n/a)."""


@functools.lru_cache(maxsize=1)
def _packaged_prompt() -> dict:
    """The ``prompt`` section of the packaged llm.yaml (the one source of the default prompt)."""
    try:
        data = yaml.safe_load(default_config_path().read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):  # pragma: no cover - broken installation
        return {}
    return dict(data.get("prompt") or {})


def _prompt_default(key: str, fallback: Any) -> Any:
    return copy.deepcopy(_packaged_prompt().get(key, fallback))


@dataclass
class PromptConfig:
    """The prompt: a shared prefix (system text + examples) and a short per-query part."""

    system: str = field(default_factory=lambda: _prompt_default("system", ""))
    """System text at the start of the shared prefix; may use {market}, {market_name}, {actions}."""
    context_template: str = field(default_factory=lambda: _prompt_default("context_template", ""))
    """Per-query text, Python format syntax over the AdvisorContext fields (see docs/LLM.md)."""
    answer_prefix: str = "Answer:"
    """Text after the context that the model continues with an action name."""
    examples: list = field(default_factory=lambda: [
        FewShotExample(**e) if isinstance(e, Mapping) else e for e in _prompt_default("examples", [])])
    """Few-shot examples (answer + context fields) rendered with the template into the prefix."""
    example_separator: str = "\n\n"
    """Text between the system text, the examples and the query."""
    chat_template: bool = False
    """Wrap the prompt in the tokenizer's chat template (instruction-tuned models); base models: false."""
    chain_of_thought: bool = False
    """Generation mode only: ask for the 4-step reasoning (analyse, options, risks, decide) first."""


@dataclass
class ScoringConfig:
    """Scoring mode: next-token probabilities of the legal action names."""

    min_coverage: float = 0.05
    """Abstain (LLM_LOW_COVERAGE) when the legal names' first tokens hold less probability than this [0-1]."""
    case_variants: bool = True
    """Also count ' Buy' and ' buy' (their first tokens) as the answer BUY."""
    calibrate: bool = False
    """Contextual calibration: divide by the model's answer to a content-free context, then renormalise."""


@dataclass
class GenerationConfig:
    """Generation mode: the model writes ``ACTION | confidence | reason``."""

    max_new_tokens: int = 24
    """Most tokens generated per answer (the chain of thought needs ~200)."""
    temperature: float = 0.0
    """0 = greedy decoding (reproducible); > 0 samples."""
    default_confidence: float = 0.5
    """Confidence used when the answer names an action but no confidence [0-1]."""


@dataclass
class QueryPolicyConfig:
    """When :meth:`Advisor.submit` actually asks the model (seed 001's selective querying)."""

    mode: str = "selective"
    """selective: the triggers below; always: every submit; never: no queries (advice stays absent)."""
    triggers: list = field(default_factory=lambda: list(TRIGGERS))
    """Any of: uncertainty (RL confidence below threshold), flat (no position), interval, state_change."""
    uncertainty_threshold: float = 0.6
    """Query when the RL policy's probability of its chosen action is below this [0-1]."""
    interval: int = 5
    """Query at least every this many steps of an environment [steps]."""
    cooldown: int = 2
    """No new query within this many steps after the previous one of the same environment [steps]."""
    balance_change: float = 100.0
    """A balance move this large since the last query is a state change [$]."""
    win_rate_change: float = 0.1
    """A recent win-rate move this large since the last query is a state change [0-1]."""


@dataclass
class CacheConfig:
    """Reuse of answers for nearly identical contexts."""

    enabled: bool = True
    """Look answers up in the cache before asking the model."""
    ttl_minutes: float = 5.0
    """An answer is reused only within this many market minutes after the bar it was computed for [min]."""
    decay: float = 0.2
    """Share of confidence lost per reuse (the distribution flattens toward uniform likewise) [0-1)."""
    max_entries: int = 4096
    """Entries kept (least recently used dropped first)."""
    rsi_step: float = 5.0
    """RSI rounding step of the cache key [RSI points]."""
    adx_step: float = 5.0
    """ADX rounding step of the cache key [ADX points]."""
    vwap_step: float = 0.001
    """Price-vs-VWAP rounding step of the cache key [fraction of price]."""
    momentum_atr_step: float = 0.5
    """10-bar momentum rounding step of the cache key [ATR]."""
    pnl_step: float = 100.0
    """Unrealised P&L and balance rounding step of the cache key [$]."""


@dataclass
class AsyncConfig:
    """The worker thread that batches queries across environments."""

    max_batch: int = 16
    """Most queries answered by one forward pass."""
    max_wait_ms: float = 20.0
    """After the first query arrives, wait at most this long for more before running a batch [ms]."""
    max_age_steps: int = 10
    """poll() no longer returns advice older than this many steps of its environment (stale) [steps]."""
    refresh_steps: int = 4
    """While the model is busy, a waiting query is replaced by a newer one of its environment only once it is this many steps old, and never while the model answers in more than max_age_steps, three batches in a row (1: every step; contexts a busy model never reads cost training time) [steps]."""
    timeout_s: float = 30.0
    """A query not answered within this long after submit counts as LLM_TIMEOUT and abstains [s]."""
    max_pending: int = 4096
    """Queued queries beyond this drop the oldest (counted in llm/dropped)."""
    close_timeout_s: float = 60.0
    """close() waits at most this long for the batch in progress [s]."""
    circuit_errors: int = 5
    """Consecutive failed back-end calls that open the circuit: no query is sent for circuit_cooldown_s, decisions are RL-only, and it is said loudly (0: never open)."""
    circuit_cooldown_s: float = 60.0
    """An open circuit sends no query for this long, then one probe query tries the back end again [s]."""
    stall_warn_s: float = 10.0
    """A back-end call unanswered this long is reported while it waits (again every 30 s), naming the server [s]."""


@dataclass
class TransformersConfig:
    """Local model through Hugging Face transformers (the default back end)."""

    model: str = "gemma-3-270m"
    """'gemma-3-270m' (the packaged GGUF, converted once into the cache), a local model directory, or a .gguf file."""
    cache_dir: Optional[str] = None
    """Where converted models live; None: $HYBRID_TRADER_CACHE/models or ~/.cache/hybrid_trader/models."""
    device: str = "cpu"
    """Torch device: cpu, cuda, cuda:0, mps."""
    dtype: str = "float32"
    """float32 (fast on CPU), bfloat16 or float16 (GPUs)."""
    threads: Optional[int] = None
    """torch.set_num_threads for the process; None leaves torch's default (it is process-wide)."""
    prefix_cache: bool = True
    """Compute the shared prefix's key/value cache once and reuse it for every batch."""


@dataclass
class OpenAIConfig:
    """Any OpenAI-compatible server: vLLM, llama.cpp server, Ollama, LM Studio."""

    base_url: str = "http://127.0.0.1:8080/v1"
    """Server URL including /v1."""
    model: str = ""
    """Model name the server knows ('' lets the server pick its only model)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (unset: no key is sent)."""
    request_timeout_s: float = 30.0
    """Timeout of one HTTP request [s]."""
    retries: int = 1
    """Retries after a failed request (connection errors and 5xx only)."""
    top_logprobs: int = 20
    """Alternatives per token requested in scoring mode (servers cap it, OpenAI at 20)."""
    scoring_endpoint: str = "completions"
    """completions (raw prompt, logprobs) or chat (chat/completions with logprobs, for chat-only servers)."""
    generation_endpoint: str = "chat"
    """chat (chat/completions, system + user messages) or completions (raw prompt)."""
    parallel_requests: int = 4
    """Requests of one batch sent concurrently."""


@dataclass
class LlamaCppConfig:
    """llama-cpp-python on a GGUF file (extra ``[llama]``)."""

    model_path: str = ""
    """GGUF file; '' uses the packaged Gemma 3 270M GGUF (assembled into the cache)."""
    n_ctx: int = 1024
    """Context window [tokens]."""
    n_threads: Optional[int] = None
    """CPU threads; None: all CPUs (os.cpu_count())."""
    n_gpu_layers: int = 0
    """Layers offloaded to a GPU (-1: all)."""


@dataclass
class MockConfig:
    """Deterministic rule-based advice over the context (tests, fast training runs)."""

    latency_ms: float = 0.0
    """Simulated time per batch [ms]."""
    coverage: float = 0.9
    """Probability mass the mock puts on action names (the rest is 'other text') [0-1]."""


@dataclass
class LLMConfig:
    """Everything the LLM advisor needs: back end, prompt, answer mode, querying, cache, batching."""

    backend: str = "transformers"
    """transformers, openai, llama_cpp or mock."""
    mode: str = "score"
    """score: next-token probabilities of the action names (one forward pass); generate: parse written answers."""
    check_on_start: bool = True
    """build_advisor() checks that the model loads / the server answers, raising a UserError if not."""
    journal: Optional[str] = None
    """SQLite file recording every query and answer; None: no journal."""
    process: bool = False
    """Run the model (transformers, llama_cpp) in a child process so it never competes with training for the GIL (phase 3 training turns it on)."""
    process_threads: int = 1
    """Torch threads of that child process."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    """The prompt."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    """Scoring mode options."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Generation mode options."""
    query: QueryPolicyConfig = field(default_factory=QueryPolicyConfig)
    """Selective querying and cooldown."""
    cache: CacheConfig = field(default_factory=CacheConfig)
    """Answer cache."""
    batching: AsyncConfig = field(default_factory=AsyncConfig)
    """Asynchronous batching worker."""
    transformers: TransformersConfig = field(default_factory=TransformersConfig)
    """transformers back end."""
    openai: OpenAIConfig = field(default_factory=OpenAIConfig)
    """openai back end."""
    llama_cpp: LlamaCppConfig = field(default_factory=LlamaCppConfig)
    """llama_cpp back end."""
    mock: MockConfig = field(default_factory=MockConfig)
    """mock back end."""

    # ------------------------------------------------------------------ building
    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = "llm config") -> "LLMConfig":
        """Build from a mapping (e.g. the ``llm:`` section of a YAML file); missing keys keep defaults."""
        cfg = _build(cls, data or {}, "llm", source)
        cfg.validate(source)
        return cfg

    def to_dict(self) -> dict:
        """Plain mapping (YAML/JSON-ready) of every field."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> "LLMConfig":
        """Copy with top-level fields replaced, e.g. ``cfg.replace(backend="mock")``."""
        return dataclasses.replace(self, **changes)

    # ---------------------------------------------------------------- validation
    def validate(self, source: str = "llm config") -> None:
        """Raise a UserError naming the option and the fix for any value out of range."""

        def bad(option: str, value: Any, fix: str) -> UserError:
            return UserError(f"llm.{option} is invalid", file=source, value=value, fix=fix)

        if self.backend not in BACKENDS:
            raise bad("backend", self.backend, f"use one of {', '.join(BACKENDS)}.{did_you_mean(self.backend, BACKENDS)}")
        if self.mode not in MODES:
            raise bad("mode", self.mode, f"use 'score' or 'generate'.{did_you_mean(self.mode, MODES)}")
        q = self.query
        if q.mode not in QUERY_MODES:
            raise bad("query.mode", q.mode, f"use one of {', '.join(QUERY_MODES)}.{did_you_mean(q.mode, QUERY_MODES)}")
        for t in q.triggers:
            if t not in TRIGGERS:
                raise bad("query.triggers", t, f"use any of {', '.join(TRIGGERS)}.{did_you_mean(t, TRIGGERS)}")
        if q.interval < 1:
            raise bad("query.interval", q.interval, "use 1 or more steps")
        if q.cooldown < 0:
            raise bad("query.cooldown", q.cooldown, "use 0 or more steps")
        if q.mode == "selective" and q.cooldown >= q.interval and q.triggers == ["interval"]:
            raise bad("query.cooldown", q.cooldown, "make the cooldown shorter than query.interval")
        if not 0.0 <= q.uncertainty_threshold <= 1.0:
            raise bad("query.uncertainty_threshold", q.uncertainty_threshold, "use a probability in [0, 1]")
        if not 0.0 <= self.cache.decay < 1.0:
            raise bad("cache.decay", self.cache.decay, "use a share in [0, 1), e.g. 0.2")
        if self.cache.ttl_minutes < 0:
            raise bad("cache.ttl_minutes", self.cache.ttl_minutes, "use 0 or more minutes")
        if self.cache.max_entries < 1:
            raise bad("cache.max_entries", self.cache.max_entries, "use 1 or more")
        for name in ("rsi_step", "adx_step", "vwap_step", "momentum_atr_step", "pnl_step"):
            if getattr(self.cache, name) <= 0:
                raise bad(f"cache.{name}", getattr(self.cache, name), "use a positive rounding step")
        if not 0.0 <= self.scoring.min_coverage <= 1.0:
            raise bad("scoring.min_coverage", self.scoring.min_coverage, "use a probability in [0, 1]")
        if self.generation.max_new_tokens < 1:
            raise bad("generation.max_new_tokens", self.generation.max_new_tokens, "use 1 or more")
        if not 0.0 <= self.generation.default_confidence <= 1.0:
            raise bad("generation.default_confidence", self.generation.default_confidence, "use [0, 1]")
        b = self.batching
        if b.max_batch < 1:
            raise bad("batching.max_batch", b.max_batch, "use 1 or more")
        if b.max_wait_ms < 0:
            raise bad("batching.max_wait_ms", b.max_wait_ms, "use 0 or more milliseconds")
        if b.max_age_steps < 0:
            raise bad("batching.max_age_steps", b.max_age_steps, "use 0 or more steps")
        if b.refresh_steps < 1:
            raise bad("batching.refresh_steps", b.refresh_steps, "use 1 or more steps")
        if b.timeout_s <= 0:
            raise bad("batching.timeout_s", b.timeout_s, "use a positive number of seconds")
        if b.max_pending < 1:
            raise bad("batching.max_pending", b.max_pending, "use 1 or more")
        if b.circuit_errors < 0:
            raise bad("batching.circuit_errors", b.circuit_errors, "use 0 (never open) or more failed calls, e.g. 5")
        if b.circuit_cooldown_s <= 0:
            raise bad("batching.circuit_cooldown_s", b.circuit_cooldown_s, "use a positive number of seconds")
        if b.stall_warn_s <= 0:
            raise bad("batching.stall_warn_s", b.stall_warn_s, "use a positive number of seconds")
        if self.openai.scoring_endpoint not in ("completions", "chat"):
            raise bad("openai.scoring_endpoint", self.openai.scoring_endpoint, "use completions or chat")
        if self.openai.generation_endpoint not in ("completions", "chat"):
            raise bad("openai.generation_endpoint", self.openai.generation_endpoint, "use chat or completions")
        if self.openai.retries < 0:
            raise bad("openai.retries", self.openai.retries, "use 0 or more")
        if not 0.0 <= self.mock.coverage <= 1.0:
            raise bad("mock.coverage", self.mock.coverage, "use [0, 1]")
        if self.prompt.chain_of_thought and self.generation.max_new_tokens < 64:
            raise bad(
                "generation.max_new_tokens",
                self.generation.max_new_tokens,
                "the chain of thought needs room: use 200 or more, or set prompt.chain_of_thought: false",
            )


def _build(cls: type, data: Any, path: str, source: str) -> Any:
    """Recursively build dataclass ``cls`` from a mapping, rejecting unknown keys."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise UserError(f"{path} must be a mapping of options", file=source, value=data,
                        fix=f"write {path} as 'key: value' lines")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            raise UserError(
                f"unknown option '{path}.{key}'", file=source,
                fix=f"remove it or use one of: {', '.join(fields)}.{did_you_mean(key, fields)}",
            )
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, f"{path}.{key}", source)
        elif key == "examples" and cls is PromptConfig:
            kwargs[key] = [_build(FewShotExample, v, f"{path}.examples[{i}]", source) for i, v in enumerate(value or [])]
        else:
            kwargs[key] = _coerce(value, hint, f"{path}.{key}", source)
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, path: str, source: str) -> Any:
    """Check/convert a scalar against its annotation (int/float/str/bool/Optional/list/dict)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
    if value is None:
        raise UserError(f"{path} may not be empty", file=source, fix="give it a value or remove the line")
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            raise ValueError
        if hint is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if hint is str:
            if not isinstance(value, (str, int, float)):
                raise ValueError
            return str(value)
        if hint is list or typing.get_origin(hint) is list:
            if isinstance(value, str):
                return [value]
            return list(value)
        if hint is dict:
            return dict(value)
    except (TypeError, ValueError):
        name = getattr(hint, "__name__", str(hint))
        raise UserError(f"{path} must be a {name}", file=source, value=value, fix=f"write a {name} value") from None
    return value


DEFAULT_CONFIG_RESOURCE = "llm.yaml"


def default_config_path() -> Path:
    """Path of the packaged default ``hybrid_trader/configs/llm.yaml``."""
    return Path(str(resources.files("hybrid_trader").joinpath("configs", DEFAULT_CONFIG_RESOURCE)))


def load_llm_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> LLMConfig:
    """Read an LLM config YAML (default: the packaged one), apply ``overrides`` (nested mapping).

    A file may hold the options at top level or under an ``llm:`` key. The user's file is
    merged over the packaged default, so it need only name what it changes. The prompt's
    templates are checked here, so an unknown template field fails at once.
    """
    base = _read_yaml(default_config_path())
    data = base
    source = str(default_config_path())
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError("LLM config file not found", file=str(p),
                            fix="check the path, or leave it out to use the packaged default")
        data = _merge(base, _read_yaml(p))
        source = str(p)
    if overrides:
        data = _merge(data, dict(overrides))
    cfg = LLMConfig.from_dict(data, source)
    from hybrid_trader.llm.prompt import PromptBuilder  # late import: prompt imports config

    PromptBuilder(cfg, source=source)  # validates the templates
    return cfg


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise UserError(f"not valid YAML: {err}", file=str(path), fix="fix the YAML syntax") from None
    if isinstance(data, Mapping) and "llm" in data and isinstance(data["llm"], Mapping):
        data = data["llm"]
    if not isinstance(data, Mapping):
        raise UserError("an LLM config must be a mapping of options", file=str(path))
    return dict(data)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out
