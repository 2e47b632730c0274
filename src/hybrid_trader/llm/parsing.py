"""Robust parsing of written answers ``ACTION | confidence | reason`` (generation mode).

Accepted: any case and spacing, markdown around the word, text before and after the
answer, synonyms (LONG/SHORT/FLAT/WAIT/BREAKEVEN/TRAIL...), confidence as ``0.8``,
``.8``, ``80%`` or ``80``, ``confidence: 0.8`` without pipes, a negated word skipped
("do not BUY, WAIT"). With a chain of thought, the text after the last "Decision" is read.
An answer naming no action raises :class:`ParseError`.

A chain of thought is four numbered steps (``1. Market: ... 2. Options: ... 3. Risks:
... 4. Decision: ACTION | confidence | reason``); :func:`parse_cot_steps` splits it into
its steps whatever the numbering, markdown or case, and tolerates missing steps and a
first step whose header was part of the prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hybrid_trader.actions import Action

SYNONYMS: dict[int, tuple[str, ...]] = {
    Action.HOLD: ("HOLD", "WAIT", "FLAT", "STAY", "STAND ASIDE", "NO TRADE", "NEUTRAL", "DO NOTHING", "PASS", "SKIP"),
    Action.BUY: ("BUY", "LONG", "GO LONG"),
    Action.SELL: ("SELL", "SHORT", "GO SHORT"),
    Action.MOVE_SL_TO_BE: (
        "MOVE_TO_BE", "MOVE_SL_TO_BE", "MOVE STOP TO BREAKEVEN", "MOVE STOP TO BREAK EVEN", "MOVE SL TO BREAKEVEN",
        "MOVE TO BREAKEVEN", "MOVE TO BREAK EVEN", "BREAKEVEN", "BREAK EVEN", "MOVE_STOP_TO_BE",
    ),
    Action.ENABLE_TRAIL: ("ENABLE_TRAIL", "ENABLE TRAILING", "ENABLE TRAILING STOP", "START TRAILING", "START TRAIL",
                          "TRAILING STOP", "TRAIL STOP", "TRAIL"),
    Action.DISABLE_TRAIL: ("DISABLE_TRAIL", "DISABLE TRAILING", "DISABLE TRAILING STOP", "STOP TRAILING", "STOP TRAIL",
                           "NO TRAIL", "CANCEL TRAIL", "REMOVE TRAIL"),
}

_SEP = r"[\s_\-]*"


def _phrase(p: str) -> str:
    return _SEP.join(re.escape(w) for w in re.split(r"[\s_\-]+", p))


_ENTRIES = sorted(((p, int(a)) for a, ps in SYNONYMS.items() for p in ps), key=lambda x: -len(x[0]))
_ACTION_RE = re.compile(
    r"(?<![A-Za-z0-9])("
    + "|".join(f"(?P<a{i}>{_phrase(p)})" for i, (p, _) in enumerate(_ENTRIES))
    + r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_NEGATION_RE = re.compile(
    r"(?:\bnot|\bdon'?t|\bdo not|\bnever|\bavoid|\bno need to|\bwouldn'?t)\s*\**\s*$", re.IGNORECASE)
_NUMBER = r"(?<![\d.])(\d{1,3}(?:\.\d+)?|\.\d+)\s*(%)?"
_NUMBER_RE = re.compile(_NUMBER)
_CONF_RE = re.compile(r"conf(?:idence)?\W{0,4}" + _NUMBER, re.IGNORECASE)
_DECISION_RE = re.compile(r"(?:decision|final answer|answer)\s*[:\-]", re.IGNORECASE)


class ParseError(ValueError):
    """The answer names no action; ``text`` is the raw answer."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(f"no action in the answer {text[:200]!r}")


@dataclass
class ParsedAnswer:
    action: int
    """Action index (``Action`` order)."""
    confidence: float | None
    """Stated confidence in [0, 1], None when the answer gives none."""
    reason: str | None
    """The short reason, None when absent."""


_WORD_CONFIDENCE = {"very high": 0.9, "high": 0.8, "medium": 0.5, "moderate": 0.5, "low": 0.3, "very low": 0.1}


def _to_unit(num: str, pct: str | None) -> float | None:
    v = float(num)
    if pct or v > 1.0:
        v /= 100.0
    return v if 0.0 <= v <= 1.0 else None


def _match_action(m: re.Match) -> int:
    for name, value in m.groupdict().items():
        if value is not None:
            return _ENTRIES[int(name[1:])][1]
    raise AssertionError("unreachable")


def parse_answer(text: str, chain_of_thought: bool = False) -> ParsedAnswer:
    """Parse one written answer; raises :class:`ParseError` if it names no action."""
    if text is None:
        raise ParseError("")
    body = str(text)
    if chain_of_thought:
        marks = list(_DECISION_RE.finditer(body))
        if marks:
            body = body[marks[-1].end():]
    match = None
    for m in _ACTION_RE.finditer(body):
        if _NEGATION_RE.search(body[max(0, m.start() - 20): m.start()]):
            continue
        match = m
        break
    if match is None:
        raise ParseError(str(text))
    action = _match_action(match)
    rest = body[match.end():]
    line_end = rest.find("\n")
    line = rest if line_end < 0 else rest[:line_end]
    confidence: float | None = None
    reason: str | None = None
    if "|" in line:
        parts = [p.strip(" *`\t") for p in line.split("|")]
        # parts[0] is what follows the action word before the first pipe (usually empty)
        if len(parts) > 1:
            nm = _NUMBER_RE.search(parts[1])
            word = parts[1].lower().removesuffix("confidence").strip()
            if nm:
                confidence = _to_unit(nm.group(1), nm.group(2))
                reason_parts = parts[2:]
            elif word in _WORD_CONFIDENCE:
                confidence = _WORD_CONFIDENCE[word]
                reason_parts = parts[2:]
            else:
                reason_parts = parts[1:]
            reason = " | ".join(p for p in reason_parts if p) or None
    else:
        cm = _CONF_RE.search(line) or _NUMBER_RE.search(line[:40])
        if cm:
            confidence = _to_unit(cm.group(1), cm.group(2))
            tail = line[cm.end():]
        else:
            tail = line
        tail = tail.strip(" \t*`-:,;.()")
        reason = tail or None
    if reason:
        reason = re.sub(r"\s+", " ", reason).strip(" *`\"'")[:200] or None
    return ParsedAnswer(action=action, confidence=confidence, reason=reason)


COT_STEPS: tuple[str, ...] = ("market", "options", "risks", "decision")
"""The chain of thought's steps, in order (keys of :func:`parse_cot_steps`)."""
COT_HEADERS: tuple[str, ...] = ("Market", "Options", "Risks", "Decision")
"""How the prompt names the steps (``1. Market:`` ... ``4. Decision:``)."""
_STEP_WORDS = {
    "market": r"market(?:\s+analysis)?|analy[sz]e(?:\s+the\s+market)?|analysis",
    "options": r"options?|list\s+the\s+options|alternatives",
    "risks": r"risks?|weigh\s+the\s+risks|risk\s+assessment",
    "decision": r"decision|decide|final\s+answer",
}
_STEP_RE = re.compile(
    r"(?:^|\n|(?<=[.!?])\s)\W{0,4}(?:(?:step\s*)?(?P<num>[1-4])\s*[.):\-]\s*)?\**\s*(?P<word>"
    + "|".join(f"(?P<{k}>{v})" for k, v in _STEP_WORDS.items())
    + r")\s*\**\s*[:\-]",
    re.IGNORECASE,
)


def parse_cot_steps(text: str | None) -> dict[str, str]:
    """The steps of a written chain of thought, ``{"market": ..., "options": ..., "risks": ..., "decision": ...}``.

    Only the steps found are returned (an answer with none gives ``{}``). Text before
    the first header counts as the market analysis (the prompt may end with its
    header). The first occurrence of each step wins; each text is one line of at most
    300 characters, whitespace collapsed.
    """
    if not text:
        return {}
    body = str(text)
    marks = []
    for m in _STEP_RE.finditer(body):
        key = next(k for k in COT_STEPS if m.group(k))
        marks.append((m.start(), m.end(), key))
    steps: dict[str, str] = {}
    if marks and body[: marks[0][0]].strip():
        steps["market"] = body[: marks[0][0]]
    elif not marks and not _DECISION_RE.search(body):
        return {}
    for i, (_, end, key) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(body)
        if key not in steps:
            steps[key] = body[end:stop]
    out = {}
    for k in COT_STEPS:
        if k in steps:
            clean = re.sub(r"\s+", " ", steps[k]).strip(" *`\t-")[:300]
            if clean:
                out[k] = clean
    return out


def has_decision_line(text: str) -> bool:
    """True once a chain of thought has written its decision with an action (generation may stop)."""
    marks = list(_DECISION_RE.finditer(text))
    if not marks:
        return False
    return _ACTION_RE.search(text[marks[-1].end():]) is not None
