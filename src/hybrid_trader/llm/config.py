"""Configuration of the LLM advisor: the ``llm`` section of a run's config.

Every class here is a typed section built by the one generic builder,
:func:`hybrid_trader.config.from_dict`: types, choices (``Literal``) and ranges
(``check`` in ``__post_init__``) are checked like every other section, with the file,
the line and a did-you-mean in the error. The packaged ``hybrid_trader/configs/llm.yaml``
is a defaults layer beneath the user's values (:func:`packaged_llm_config`): a run's
``llm:`` section or a file given to ``llm ask --config`` names only what it changes.

API keys are read only from environment variables (``llm.openai.api_key_env`` names
the variable); a key written in a file or given with ``--set`` is refused.

This module imports no other module of the LLM package but the back-end registry
(numpy, torch, gymnasium and TA-Lib stay unloaded).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from hybrid_trader.config import ConfigError, check, from_dict, merge_overrides, read_yaml
from hybrid_trader.errors import UserError, did_you_mean
from hybrid_trader.llm.backend_config import (  # the sections live beside the registry rows
    COT_MAX_NEW_TOKENS,
    LlamaCppConfig,
    MockConfig,
    OpenAIConfig,
    StudentConfig,
    TransformersConfig,
)
from hybrid_trader.llm.backends import BACKEND_NAMES
from hybrid_trader.llm.backends import BACKENDS as REGISTRY
from hybrid_trader.llm.presets import PRESET_KEYS, PRESETS, PromptPreset, prompt_preset
from hybrid_trader.llm.retrieval_config import RetrievalConfig

BACKENDS = BACKEND_NAMES
"""The back-end names (from the registry ``hybrid_trader.llm.backends.BACKENDS``)."""
BackendName = Literal[BACKEND_NAMES]  # type: ignore[valid-type]  # the registry's names
Mode = Literal["score", "generate"]
QueryMode = Literal["selective", "always", "never"]
Trigger = Literal["uncertainty", "flat", "interval", "state_change"]
TRIGGERS: tuple[Trigger, ...] = ("uncertainty", "flat", "interval", "state_change")

TEMPLATE_FIELDS: dict[str, str] = {
    "market": "root symbol, e.g. NQ",
    "market_name": "contract name, e.g. E-mini Nasdaq-100",
    "date": "trading day of the bar, YYYY-MM-DD",
    "time": "bar start, HH:MM (US/Eastern)",
    "current_time": "same as time (seed name)",
    "price": "close of the bar [points]",
    "current_price": "same as price (seed name)",
    "adx": "ADX(14)",
    "vwap_distance": "(price - VWAP) / price [fraction; format with %]",
    "rsi": "RSI(14)",
    "momentum": "10-bar price change [points]",
    "atr": "ATR(14) [points]",
    "macd_hist": "MACD histogram [points]",
    "ret_20": "20-bar return [fraction]",
    "ret_60": "60-bar return [fraction]",
    "ret_5": "5-bar log return [fraction; format with %]",
    "session_high_atr": "distance below the session's highest high so far [ATR(14), >= 0]; session from 18:00 ET",
    "session_low_atr": "distance above the session's lowest low so far [ATR(14), >= 0]",
    "session_minutes": "minutes since the Globex session open (18:00 ET) [min]",
    "ret_5_bp": "ret_5 in basis points (one to three tokens where a % takes six)",
    "ret_20_bp": "ret_20 in basis points",
    "ret_60_bp": "ret_60 in basis points",
    "vwap_bp": "vwap_distance in basis points",
    "trend": "strong uptrend, uptrend, sideways, downtrend, strong downtrend",
    "trend_score": "-2..+2",
    "position": "-1, 0, +1",
    "position_status": "FLAT, LONG 1, SHORT 2",
    "entry_price": "entry price of the open position [points], n/a when flat",
    "unrealized_pnl": "open profit or loss [$]",
    "win_rate": "recent win rate [fraction; format with %], n/a before the first trade",
    "consecutive_losses": "losing trades in a row",
    "balance": "account balance [$]",
    "legal_actions": "the legal action names, space separated",
    "actions": "all six action names, comma separated",
}
"""Fields a prompt template may use (rendered by ``llm/prompt.py``)."""
SYSTEM_FIELDS = ("market", "market_name", "actions")
"""Fields the system text may use."""

_PROB = "use a probability in [0, 1]"


def template_roots(template: str) -> set[str]:
    """The root names of a format string's named fields (``{rsi:.1f}`` -> ``rsi``; a ValueError if unparsable)."""
    return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}


def _check_template(template: str, allowed: Mapping[str, str] | tuple[str, ...], option: str) -> None:
    """ConfigError for a positional or unknown field, or a format spec no value accepts."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as err:
        raise ConfigError(f"cannot be parsed: {err}", key=option,
                          fix="write {{ and }} for literal braces; name every field, e.g. {rsi:.0f}") from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        root = name.split(".")[0].split("[")[0]
        check(root != "" and not root.isdigit(), option, f"has a positional field '{{{name}}}'",
              fix="name every field, e.g. {rsi:.0f}; write {{ and }} for literal braces")
        check(root in allowed, option, f"uses unknown template field '{{{root}}}'", value=root,
              fix=f"use one of: {', '.join(allowed)}.{did_you_mean(root, allowed)}")
        if spec and "{" not in spec and not any(_formats(sample, spec) for sample in (1.5, 1, "text")):
            raise ConfigError(
                f"cannot be rendered: format spec ':{spec}' of '{{{name}}}' fits no value",
                key=option,
                fix="e.g. {rsi:.1f} for numbers, {vwap_distance:+.2%} for shares, {trend} for text",
            )


def _formats(value: Any, spec: str) -> bool:
    try:
        format(value, spec)
        return True
    except ValueError:
        return False


@functools.lru_cache(maxsize=1)
def _packaged_prompt() -> dict:
    """The ``prompt`` section of the packaged llm.yaml (the one source of the default prompt)."""
    data, _ = read_yaml(default_config_path())
    return dict((data or {}).get("prompt") or {})


def _prompt_default(key: str, fallback: Any) -> Any:
    return copy.deepcopy(_packaged_prompt().get(key, fallback))


@dataclass
class FewShotExample:
    """One worked example placed in the shared (cached) prompt prefix."""

    answer: str
    """The answer line the example shows, e.g. ``BUY | 0.70 | uptrend, RSI rising``."""
    context: dict[str, Any] = field(default_factory=dict)
    """Context fields of the example (any field of the template; missing ones are n/a)."""

    def __post_init__(self) -> None:
        unknown = [k for k in self.context if k not in TEMPLATE_FIELDS]
        check(not unknown, "context", f"has unknown field '{unknown[0] if unknown else ''}'",
              fix=f"use fields of the template: {', '.join(TEMPLATE_FIELDS)}."
                  + (did_you_mean(unknown[0], TEMPLATE_FIELDS) if unknown else ""))


@dataclass
class PromptConfig:
    """The prompt: a shared prefix (system text + examples) and a short per-query part."""

    system: str = field(default_factory=lambda: _prompt_default("system", ""))
    """System text at the start of the shared prefix; may use {market}, {market_name}, {actions}."""
    context_template: str = field(default_factory=lambda: _prompt_default("context_template", ""))
    """Per-query text, Python format syntax over the AdvisorContext fields (see docs/LLM.md)."""
    answer_prefix: str = "Answer:"
    """Text after the context that the model continues with an action name."""
    examples: list[FewShotExample] = field(default_factory=lambda: [
        FewShotExample(**e) if isinstance(e, Mapping) else e for e in _prompt_default("examples", [])])
    """Few-shot examples (answer + context fields) rendered with the template into the prefix."""
    example_separator: str = "\n\n"
    """Text between the system text, the examples and the query."""
    chat_template: bool = False
    """Wrap the prompt in the tokenizer's chat template (instruction-tuned models); base models: false."""
    chain_of_thought: bool = False
    """Generation mode only: ask for the 4-step reasoning (analyse, options, risks, decide) first."""
    example_orders: int = 1
    """Orders of the few-shot examples: order r moves the first r examples to the end; each state reads the
    order a hash of its market, bar time and position picks (reproducible); each order is one cached prefix."""
    preset: PromptPreset | None = None
    """A packaged prompt (system, context_template, examples): labels (trend words: the default's text)
    or numbers (numbers only, balanced examples; issue 21); null: the three as written. See docs/LLM.md."""
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    """Few-shot examples retrieved from labelled training-day states (k: 0 = off; docs/LLM.md, Retrieval)."""

    def __post_init__(self) -> None:
        check(1 <= self.example_orders <= 16, "example_orders", f"{self.example_orders} is not in 1..16",
              fix="use 1 (the order as written) or a few orders, e.g. 3")
        if self.preset is not None:
            self._apply_preset(self.preset)
        check(self.context_template.strip(), "context_template", "is empty",
              fix="give a template such as 'RSI {rsi:.0f}, trend {trend}'")
        _check_template(self.context_template, TEMPLATE_FIELDS, "context_template")
        _check_template(self.system, SYSTEM_FIELDS, "system")

    def _apply_preset(self, name: str) -> None:
        """Fill system, context_template and examples from the preset; a field holding text of no preset
        (written by the user) is refused, since the preset would silently replace it."""
        chosen = prompt_preset(name)
        for key in PRESET_KEYS:
            value = getattr(self, key)
            plain = [dataclasses.asdict(e) if isinstance(e, FewShotExample) else e for e in value] \
                if key == "examples" else value
            if not any(plain == prompt_preset(other)[key] for other in PRESETS):
                raise ConfigError(
                    f"is '{name}' but {key} is not the text of a packaged preset", key="preset", value=name,
                    fix=f"remove prompt.{key} to use the preset's, or set prompt.preset: null to keep yours")
        self.system = chosen["system"]
        self.context_template = chosen["context_template"]
        self.examples = [FewShotExample(**e) for e in chosen["examples"]]


@dataclass
class ScoringConfig:
    """Scoring mode: next-token probabilities of the legal action names."""

    min_coverage: float = 0.05
    """Abstain (LLM_LOW_COVERAGE) when the legal names' first tokens hold less probability than this [0-1]."""
    case_variants: bool = True
    """Also count ' Buy' and ' buy' (their first tokens) as the answer BUY."""
    calibrate: bool = False
    """Contextual calibration: divide by the model's answer to a content-free context, then renormalise."""

    def __post_init__(self) -> None:
        check(0.0 <= self.min_coverage <= 1.0, "min_coverage", f"{self.min_coverage} is not in [0, 1]", fix=_PROB)


@dataclass
class GenerationConfig:
    """Generation mode: the model writes ``ACTION | confidence | reason``."""

    max_new_tokens: int = 24
    """Most tokens generated per answer (the chain of thought needs ~200)."""
    temperature: float = 0.0
    """0 = greedy decoding (reproducible); > 0 samples."""
    default_confidence: float = 0.5
    """Confidence used when the answer names an action but no confidence [0-1]."""

    def __post_init__(self) -> None:
        check(self.max_new_tokens >= 1, "max_new_tokens", f"{self.max_new_tokens} must be >= 1", fix="use 1 or more")
        check(0.0 <= self.temperature < math.inf, "temperature", f"{self.temperature} must be >= 0 and finite",
              fix="use 0 (greedy) or a positive temperature, e.g. 0.7")
        check(0.0 <= self.default_confidence <= 1.0, "default_confidence",
              f"{self.default_confidence} is not in [0, 1]", fix=_PROB)


@dataclass
class QueryPolicyConfig:
    """When :meth:`Advisor.submit` actually asks the model (selective querying: triggers and a cooldown)."""

    mode: QueryMode = "selective"
    """selective: the triggers below; always: every submit; never: no queries (advice stays absent)."""
    triggers: list[Trigger] = field(default_factory=lambda: list(TRIGGERS))
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

    def __post_init__(self) -> None:
        check(0.0 <= self.uncertainty_threshold <= 1.0, "uncertainty_threshold",
              f"{self.uncertainty_threshold} is not in [0, 1]", fix=_PROB)
        check(self.interval >= 1, "interval", f"{self.interval} must be >= 1", fix="use 1 or more steps")
        check(self.cooldown >= 0, "cooldown", f"{self.cooldown} must be >= 0", fix="use 0 or more steps")
        check(not (self.mode == "selective" and self.cooldown >= self.interval and self.triggers == ["interval"]),
              "cooldown", f"{self.cooldown} is not shorter than query.interval {self.interval}: "
              "the interval trigger could never fire on time", fix="make the cooldown shorter than query.interval")
        check(self.balance_change >= 0, "balance_change", f"{self.balance_change} must be >= 0", fix="use 0 or more $")
        check(0.0 <= self.win_rate_change <= 1.0, "win_rate_change", f"{self.win_rate_change} is not in [0, 1]",
              fix=_PROB)


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

    def __post_init__(self) -> None:
        check(self.ttl_minutes >= 0, "ttl_minutes", f"{self.ttl_minutes} must be >= 0", fix="use 0 or more minutes")
        check(0.0 <= self.decay < 1.0, "decay", f"{self.decay} is not in [0, 1)", fix="use a share in [0, 1), e.g. 0.2")
        check(self.max_entries >= 1, "max_entries", f"{self.max_entries} must be >= 1", fix="use 1 or more")
        for name in ("rsi_step", "adx_step", "vwap_step", "momentum_atr_step", "pnl_step"):
            value = getattr(self, name)
            check(0 < value < math.inf, name, f"{value} must be > 0", fix="use a positive rounding step")


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
    """While the model is busy, a waiting query is replaced by a newer one of its environment only once it
    is this many steps old, and never while the model answers in more than max_age_steps, three batches in a
    row (1: every step; contexts a busy model never reads cost training time) [steps]."""
    timeout_s: float = 30.0
    """A query not answered within this long after submit counts as LLM_TIMEOUT and abstains [s]."""
    max_pending: int = 4096
    """Queued queries beyond this drop the oldest (counted in llm/dropped)."""
    close_timeout_s: float = 60.0
    """close() waits at most this long for the batch in progress [s]."""
    circuit_errors: int = 5
    """Consecutive failed back-end calls that open the circuit: no query is sent for circuit_cooldown_s,
    decisions are RL-only, and it is said loudly (0: never open)."""
    circuit_cooldown_s: float = 60.0
    """An open circuit sends no query for this long, then one probe query tries the back end again [s]."""
    stall_warn_s: float = 10.0
    """A back-end call unanswered this long is reported while it waits (again every 30 s), naming the server [s]."""

    def __post_init__(self) -> None:
        for name in ("max_batch", "refresh_steps", "max_pending"):
            check(getattr(self, name) >= 1, name, f"{getattr(self, name)} must be >= 1", fix="use 1 or more")
        check(self.max_age_steps >= 0, "max_age_steps", f"{self.max_age_steps} must be >= 0", fix="use 0 or more steps")
        check(
            self.max_wait_ms >= 0, "max_wait_ms", f"{self.max_wait_ms} must be >= 0", fix="use 0 or more milliseconds"
        )
        for name in ("timeout_s", "close_timeout_s", "circuit_cooldown_s", "stall_warn_s"):
            check(getattr(self, name) > 0, name, f"{getattr(self, name)} must be > 0",
                  fix="use a positive number of seconds")
        check(self.circuit_errors >= 0, "circuit_errors", f"{self.circuit_errors} must be >= 0",
              fix="use 0 (never open) or more failed calls, e.g. 5")


@dataclass
class LLMConfig:
    """Everything the LLM advisor needs: back end, prompt, answer mode, querying, cache, batching."""

    backend: BackendName = "transformers"
    """Back end: a name of the registry hybrid_trader.llm.backends.BACKENDS (`--llm` lists them)."""
    mode: Mode = "score"
    """score: next-token probabilities of the action names (one forward pass); generate: parse written answers."""
    check_on_start: bool = True
    """build_advisor() checks that the model loads / the server answers, raising a UserError if not."""
    journal: str | None = None
    """SQLite file recording every query and answer; None: no journal."""
    process: bool | None = None
    """Run a local model (transformers, llama_cpp) in a child process so it never competes with training for
    the GIL; null: yes in a run (training, evaluation), no in llm ask and bench llm."""
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
    student: StudentConfig = field(default_factory=StudentConfig)
    """student back end: the distilled advisor (hybrid-trader advise distill)."""

    def __post_init__(self) -> None:
        check(self.process_threads >= 1, "process_threads", f"{self.process_threads} must be >= 1", fix="use 1 or more")
        check(not (self.prompt.chain_of_thought and self.generation.max_new_tokens < 64), "generation.max_new_tokens",
              f"{self.generation.max_new_tokens} leaves no room for the chain of thought",
              fix=f"the chain of thought needs room: use {COT_MAX_NEW_TOKENS} or more, or set "
                  "prompt.chain_of_thought: false")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = "llm config") -> LLMConfig:
        """Build from a mapping (e.g. the ``llm:`` section of a file) over the packaged defaults."""
        return from_dict(cls, data, source=source, path="llm", base=packaged_llm_config())

    def to_dict(self) -> dict:
        """Plain mapping (YAML/JSON-ready) of every field."""
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> LLMConfig:
        """Copy with top-level fields replaced, e.g. ``cfg.replace(backend="mock")``."""
        return dataclasses.replace(self, **changes)

    def for_dataset(self, backend: str | None = None, overrides: dict[str, Any] | None = None,
                    source: str = "command line") -> LLMConfig:
        """This config as it asks states for an advice dataset (``advise collect``, a phase 3 teacher):
        ``backend`` over it, no answer cache (each state is asked once; the dataset is the record), no
        journal, then ``overrides`` (dotted keys). What decides the advice identity is left as it is."""
        over: dict[str, Any] = {"cache.enabled": False, "journal": None, **(overrides or {})}
        if backend:
            over["backend"] = backend
        return merge_overrides(self, over, source=source)

    def in_run(self) -> LLMConfig:
        """This config as a run uses it: ``process`` null becomes true for a local model (transformers, llama_cpp)."""
        if self.process is not None:
            return self
        return self.replace(process=REGISTRY[self.backend].local)


DEFAULT_CONFIG_RESOURCE = "llm.yaml"


def default_config_path() -> Path:
    """Path of the packaged default ``hybrid_trader/configs/llm.yaml``."""
    return Path(str(resources.files("hybrid_trader").joinpath("configs", DEFAULT_CONFIG_RESOURCE)))


def _read_llm_file(path: Path) -> tuple[Any, dict[str, int]]:
    """The options of an LLM config file and their lines keyed ``llm.<key>``.

    A file may hold the options at the top level or under an ``llm:`` key.
    """
    data, lines = read_yaml(path)
    if isinstance(data, Mapping) and isinstance(data.get("llm"), Mapping):
        return data["llm"], lines
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError("an LLM config must be a mapping of options", file=str(path), line=1,
                          fix="write one 'key: value' per line")
    return data, {f"llm.{k}": v for k, v in lines.items()}


@functools.lru_cache(maxsize=1)
def _packaged() -> LLMConfig:
    path = default_config_path()
    data, lines = _read_llm_file(path)
    return from_dict(LLMConfig, data, source=str(path), path="llm", lines=lines, base=LLMConfig())


def packaged_llm_config() -> LLMConfig:
    """The packaged defaults layer (``hybrid_trader/configs/llm.yaml``), a fresh copy each call."""
    return copy.deepcopy(_packaged())


def load_llm_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> LLMConfig:
    """Read an LLM config YAML merged over the packaged default, then apply ``overrides``.

    ``overrides`` is a nested mapping (``{"query": {"interval": 3}}``) or dotted keys
    (``{"query.interval": 3}``). A file may hold the options at the top level or under
    an ``llm:`` key; errors name that file and line.
    """
    cfg = packaged_llm_config()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise UserError("LLM config file not found", file=str(p),
                            fix="check the path, or leave it out to use the packaged default")
        data, lines = _read_llm_file(p)
        cfg = from_dict(LLMConfig, data, source=str(p), path="llm", lines=lines, base=cfg)
    if overrides:
        cfg = merge_overrides(cfg, dict(overrides), source="llm options", path="llm")
    return cfg
