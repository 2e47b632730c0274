"""Prompt rendering: a shared prefix (system text + few-shot examples) and a short per-query suffix.

prompt = prefix(market) + suffix(context)

- ``prefix`` is identical for every query of a market, so back ends compute it once
  (transformers: its key/value cache; llama.cpp: its evaluated tokens; servers: their
  own prompt cache).
- ``suffix`` = the context template rendered from an :class:`AdvisorContext`, a newline
  and the answer prefix (``Answer:``); the model continues with an action name.

Template fields (Python format syntax, e.g. ``{rsi:.0f}``, ``{vwap_distance:+.2%}``) are
listed in :data:`~hybrid_trader.llm.config.TEMPLATE_FIELDS`; a NaN number prints as ``n/a`` whatever its format.
An unknown field is a :class:`~hybrid_trader.errors.UserError` when the builder is made.
"""

from __future__ import annotations

import math
import string
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hybrid_trader.errors import UserError, did_you_mean
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.config import SYSTEM_FIELDS, TEMPLATE_FIELDS, LLMConfig
from hybrid_trader.llm.context import AdvisorContext
from hybrid_trader.llm.retrieval import RetrievalPool, Retriever, template_features
from hybrid_trader.markets import CONTRACTS

COT_INSTRUCTION = (
    "Think in four short steps, one line each: 1. Market: the analysis. 2. Options: the legal actions. "
    "3. Risks: what could go wrong. 4. Decision: ACTION | confidence | reason."
)
COT_START = "1. Market:"
"""How a chain-of-thought suffix ends: the model continues the first step (``llm/parsing.py`` reads the steps)."""


def cot_example_answer(values: Mapping[str, Any], answer: str) -> str:
    """A four-step worked answer for a few-shot example, written from its context values and its answer."""
    rsi = values.get("rsi")
    losses = values.get("consecutive_losses")
    if isinstance(losses, int) and losses >= 2:
        risk = f"{losses} losses in a row; stand aside unless the setup is clear"
    elif isinstance(rsi, float) and not math.isnan(rsi) and (rsi >= 70 or rsi <= 30):
        risk = "RSI is extreme: chasing risks a reversal"
    else:
        risk = "the stop is 1.5 ATR away; a fading move would hit it"
    if str(values.get("trend", "n/a")) == "n/a":  # a prompt without trend words: the numbers it shows
        market = (f"returns {format(values.get('ret_5_bp'), '+.0f')} {format(values.get('ret_20_bp'), '+.0f')} "
                  f"{format(values.get('ret_60_bp'), '+.0f')} bp, vwap {format(values.get('vwap_bp'), '+.0f')} bp")
    else:
        market = (f"{values.get('trend')}, RSI {format(rsi, '.0f')}, "
                  f"momentum {format(values.get('momentum'), '+.0f')}")
    return (f"{COT_START} {market}.\n2. Options: {values.get('legal_actions')}.\n3. Risks: {risk}.\n"
            f"4. Decision: {answer.strip()}")


class _Num(float):
    """A float that formats as ``n/a`` when NaN, whatever the format spec."""

    def __format__(self, spec: str) -> str:
        if math.isnan(self):
            return "n/a"
        return float.__format__(float(self), spec)


class _Text(str):
    """A string that ignores numeric format specs (so ``{x:.1f}`` on 'n/a' does not fail)."""

    def __format__(self, spec: str) -> str:
        try:
            return str.__format__(str(self), spec)
        except ValueError:
            return str(self)


def _market_name(market: str) -> str:
    contract = CONTRACTS.get(market)
    return contract.name if contract is not None else market


def context_fields(ctx: AdvisorContext) -> dict[str, Any]:
    """The template values of a context."""
    ts = ctx.timestamp
    hhmm = ts.strftime("%H:%M") if ts is not None else "n/a"
    legal = " ".join(w for w, ok in zip(ACTION_WORDS, ctx.legal) if ok)
    return {
        "market": _Text(ctx.market),
        "market_name": _Text(_market_name(ctx.market)),
        "date": _Text(ts.strftime("%Y-%m-%d") if ts is not None else "n/a"),
        "time": _Text(hhmm),
        "current_time": _Text(hhmm),
        "price": _Num(ctx.price),
        "current_price": _Num(ctx.price),
        "adx": _Num(ctx.adx),
        "vwap_distance": _Num(ctx.vwap_distance),
        "rsi": _Num(ctx.rsi),
        "momentum": _Num(ctx.momentum),
        "atr": _Num(ctx.atr),
        "macd_hist": _Num(ctx.macd_hist),
        "ret_20": _Num(ctx.ret_20),
        "ret_60": _Num(ctx.ret_60),
        "ret_5": _Num(ctx.ret_5),
        "session_high_atr": _Num(ctx.session_high_atr),
        "session_low_atr": _Num(ctx.session_low_atr),
        "session_minutes": _Num(ctx.session_minutes),
        "ret_5_bp": _Num(1e4 * ctx.ret_5),
        "ret_20_bp": _Num(1e4 * ctx.ret_20),
        "ret_60_bp": _Num(1e4 * ctx.ret_60),
        "vwap_bp": _Num(1e4 * ctx.vwap_distance),
        "trend": _Text(ctx.trend),
        "trend_score": ctx.trend_score,
        "position": ctx.position,
        "position_status": _Text(ctx.position_status),
        "entry_price": _Num(ctx.entry_price),
        "unrealized_pnl": _Num(ctx.unrealized_pnl),
        "win_rate": _Num(ctx.win_rate),
        "consecutive_losses": ctx.consecutive_losses,
        "balance": _Num(ctx.balance),
        "legal_actions": _Text(legal),
        "actions": _Text(", ".join(ACTION_WORDS)),
    }


def content_free_fields(legal: np.ndarray | None = None) -> dict[str, Any]:
    """Template values of a content-free context: every number NaN (n/a), every text n/a."""
    nan = _Num(math.nan)
    out: dict[str, Any] = {k: nan for k in TEMPLATE_FIELDS}
    for k in ("market", "market_name", "date", "time", "current_time", "trend", "position_status"):
        out[k] = _Text("n/a")
    out["trend_score"] = _Text("n/a")
    out["position"] = _Text("n/a")
    out["consecutive_losses"] = _Text("n/a")
    mask = np.ones(len(ACTION_WORDS), bool) if legal is None else np.asarray(legal, bool)
    out["legal_actions"] = _Text(" ".join(w for w, ok in zip(ACTION_WORDS, mask) if ok))
    out["actions"] = _Text(", ".join(ACTION_WORDS))
    return out


def sample_context() -> AdvisorContext:
    """A plausible context used to check templates and for ``llm ask`` without data."""
    import datetime as _dt
    from zoneinfo import ZoneInfo

    return AdvisorContext(
        market="NQ", timestamp=_dt.datetime(2024, 1, 3, 10, 31, tzinfo=ZoneInfo("America/New_York")),
        price=16850.25, adx=27.4, vwap_distance=0.0015, rsi=61.2, momentum=12.5, atr=14.0, macd_hist=1.2,
        ret_20=0.002, ret_60=0.004, ret_5=0.0008, session_high_atr=0.4, session_low_atr=3.1, session_minutes=991.0,
        trend_score=2, trend="strong uptrend", position=0, position_status="FLAT",
        unrealized_pnl=0.0, win_rate=0.55, consecutive_losses=0, balance=50_000.0,
        legal=np.array([True, True, True, False, False, False]),
    )


def _fields_in(template: str) -> list[str]:
    names = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None:
            names.append(name)
    return names


def _check_template(template: str, allowed: tuple[str, ...] | dict, option: str, source: str) -> None:
    for name in _fields_in(template):
        root = name.split(".")[0].split("[")[0]
        if root == "" or root.isdigit():
            raise UserError(
                f"llm.prompt.{option} has a positional field '{{{name}}}'", file=source,
                fix="name every field, e.g. {rsi:.0f}; write {{ and }} for literal braces",
            )
        if root not in allowed:
            raise UserError(
                f"llm.prompt.{option} uses unknown template field '{{{root}}}'", file=source, value=root,
                fix=f"use one of: {', '.join(allowed)}.{did_you_mean(root, allowed)}",
            )


def _format(template: str, values: Mapping[str, Any], option: str, source: str) -> str:
    try:
        return template.format_map(values)
    except KeyError as err:  # pragma: no cover - caught by _check_template first
        raise UserError(f"llm.prompt.{option} uses unknown template field {err}", file=source) from None
    except (ValueError, IndexError, AttributeError, TypeError) as err:
        raise UserError(
            f"llm.prompt.{option} cannot be rendered: {err}", file=source,
            fix="check the format specs, e.g. {rsi:.1f} for numbers, {trend} for text; {{ }} for literal braces",
        ) from None


@dataclass(frozen=True)
class RenderedQuery:
    """What a back end gets for one context."""

    context: AdvisorContext
    prefix: str
    """The shared prefix of this market (system text + examples)."""
    suffix: str
    """The per-query text: rendered context + newline + answer prefix."""

    @property
    def text(self) -> str:
        return self.prefix + self.suffix


class PromptBuilder:
    """Renders prefixes and suffixes from the ``prompt`` config; checks the templates when made."""

    def __init__(self, config: LLMConfig, source: str = "llm config") -> None:
        p = config.prompt
        self.config = config
        self.source = source
        self.template = p.context_template.strip("\n")
        self.answer_prefix = p.answer_prefix
        self.separator = p.example_separator
        self.chain_of_thought = bool(p.chain_of_thought and config.mode == "generate")
        if not self.template.strip():
            raise UserError("llm.prompt.context_template is empty", file=source,
                            fix="give a template such as 'RSI {rsi:.0f}, trend {trend}'")
        _check_template(self.template, TEMPLATE_FIELDS, "context_template", source)
        _check_template(p.system, SYSTEM_FIELDS, "system", source)
        for i, ex in enumerate(p.examples):
            unknown = [k for k in ex.context if k not in TEMPLATE_FIELDS]
            if unknown:
                raise UserError(
                    f"llm.prompt.examples[{i}].context has unknown field '{unknown[0]}'", file=source,
                    fix=f"use fields of the template: {', '.join(TEMPLATE_FIELDS)}."
                        f"{did_you_mean(unknown[0], TEMPLATE_FIELDS)}",
                )
        self.orders = max(1, int(p.example_orders))
        self._prefixes: dict[tuple[str, int], str] = {}
        self.retrieval: Retriever | None = None
        self.retrieval_features: tuple[str, ...] = ()
        self._last_retrieved: tuple[AdvisorContext | None, list[str]] = (None, [])
        """The latest context's retrieved examples: the answer cache's key and the query read them in turn."""
        if p.retrieval.enabled:  # a template that shows none of the configured numbers fails here, at start
            self.retrieval_features = template_features(self.template, p.retrieval, source)
            if self.chain_of_thought:
                raise UserError("llm.prompt.retrieval and llm.prompt.chain_of_thought are both on", file=source,
                                fix="retrieved examples answer with an action name only: turn one of them off")
        # render once now so that bad format specs fail at start, not in the worker thread
        self.suffix(sample_context())
        self.content_free_suffix()
        self.prefix("NQ")

    # ---------------------------------------------------------------- rendering
    def _render_example(self, ex: Any, i: int, market: str) -> str:
        values = content_free_fields()
        values["market"] = _Text(market)  # an example without its own market speaks of the prompt's market
        values["market_name"] = _Text(_market_name(market))
        for k, v in ex.context.items():
            values[k] = _Num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in (
                "trend_score", "position", "consecutive_losses") else (_Text(v) if isinstance(v, str) else v)
        body = _format(self.template, values, f"examples[{i}]", self.source)
        if self.chain_of_thought:
            return f"{body}\n{cot_example_answer(values, ex.answer)}"
        return f"{body}\n{self.answer_prefix} {ex.answer.strip()}"

    def order_of(self, ctx: AdvisorContext) -> int:
        """Which of the ``prompt.example_orders`` orders a context gets: a CRC32 of its market, bar time and
        position, so the same state always reads the same prefix (0 with one order)."""
        if self.orders == 1:
            return 0
        ts = ctx.timestamp.isoformat() if ctx.timestamp is not None else ""
        return zlib.crc32(f"{ctx.market}|{ts}|{ctx.position}".encode()) % self.orders

    def prefix(self, market: str, order: int = 0) -> str:
        """The shared prefix for a market: system text, then the examples, then a separator.

        Order ``r`` (0 <= r < ``prompt.example_orders``) moves the first ``r`` examples to the end;
        each order is its own cached prefix.
        """
        order = -1 if order == -1 else int(order) % self.orders  # -1: the system text alone (retrieval)
        cached = self._prefixes.get((market, order))
        if cached is not None:
            return cached
        system = _format(self.config.prompt.system, {"market": market, "market_name": _market_name(market),
                                                     "actions": ", ".join(ACTION_WORDS)}, "system", self.source)
        system = system.strip("\n")
        if self.chain_of_thought:
            system = f"{system}\n{COT_INSTRUCTION}" if system else COT_INSTRUCTION
        examples = [self._render_example(ex, i, market) for i, ex in enumerate(self.config.prompt.examples)]
        examples = [] if order == -1 else examples[order:] + examples[:order]
        parts = [s for s in [system, *examples] if s]
        text = self.separator.join(parts) + self.separator if parts else ""
        self._prefixes[(market, order)] = text
        return text

    def attach_retrieval(self, pool: RetrievalPool) -> None:
        """Retrieve the few-shot examples of flat states from ``pool`` (``llm.prompt.retrieval`` must be on)."""
        if pool.features != self.retrieval_features:
            raise UserError(f"the retrieval pool compares {', '.join(pool.features)} but the prompt needs "
                            f"{', '.join(self.retrieval_features)}", file=self.source,
                            fix="build the pool with this prompt's config (hindsight.retrieval_pool.build_pool)")
        self.retrieval = Retriever(pool, self.config.prompt.retrieval)

    def _retrieved(self, ctx: AdvisorContext) -> list[str]:
        if not self.config.prompt.retrieval.enabled:
            return []
        if self.retrieval is None:
            raise UserError("llm.prompt.retrieval is on but no pool of labelled training states is attached",
                            file=self.source, fix="use it where a run gives the pool (llm eval, bench llm "
                                                  "--retrieval-run RUN), or set llm.prompt.retrieval.k: 0")
        last, examples = self._last_retrieved  # one tuple, read at once: threads may replace it
        if last is ctx:
            return examples
        r = self.retrieval
        examples = [r.example_text(int(i), self.render_context, self.answer_prefix) for i in r.neighbours(ctx)]
        self._last_retrieved = (ctx, examples)
        return examples

    def examples_key(self, ctx: AdvisorContext) -> str:
        """The retrieved examples' text of ``ctx`` ('' without retrieval): part of the answer cache's key."""
        return self.separator.join(self._retrieved(ctx))

    def render_context(self, ctx: AdvisorContext) -> str:
        return _format(self.template, context_fields(ctx), "context_template", self.source)

    def suffix(self, ctx: AdvisorContext) -> str:
        """Per-query text: the rendered context, a newline and the answer prefix (no trailing space).

        With a chain of thought the suffix ends with the first step's header instead
        (:data:`COT_START`): the model writes the four steps, the decision last.
        """
        return f"{self.render_context(ctx)}\n{COT_START if self.chain_of_thought else self.answer_prefix}"

    def content_free_suffix(self, legal: np.ndarray | None = None) -> str:
        """The suffix of a content-free context (every value n/a), for contextual calibration."""
        body = _format(self.template, content_free_fields(legal), "context_template", self.source)
        return f"{body}\n{self.answer_prefix}"

    def query(self, ctx: AdvisorContext) -> RenderedQuery:
        examples = self._retrieved(ctx)
        if not examples:
            return RenderedQuery(context=ctx, prefix=self.prefix(ctx.market, self.order_of(ctx)),
                                 suffix=self.suffix(ctx))
        system = self.prefix(ctx.market, -1)
        if self.config.prompt.retrieval.mode == "clusters":  # the group's examples: a cached prefix of their own
            return RenderedQuery(context=ctx, prefix=system + self.separator.join(examples) + self.separator,
                                 suffix=self.suffix(ctx))
        return RenderedQuery(context=ctx, prefix=system,
                             suffix=self.separator.join(examples) + self.separator + self.suffix(ctx))

    def content_free_query(self, market: str = "NQ") -> RenderedQuery:
        ctx = sample_context()
        ctx.legal = np.ones(len(ACTION_WORDS), bool)
        return RenderedQuery(context=ctx, prefix=self.prefix(market), suffix=self.content_free_suffix())
