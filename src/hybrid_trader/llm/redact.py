"""Keep API keys out of everything printed, logged or journaled: one :func:`redact`.

Server error bodies, exception texts, journal rows and console messages may echo the
key (a misconfigured proxy answering ``invalid key sk-...``). Every such text passes
through :func:`redact`, which replaces

- the current value of each registered key variable (``llm.openai.api_key_env``, by
  default ``OPENAI_API_KEY``; read from the environment at each call, so a key set
  after start-up is covered too),
- ``sk-...`` tokens (OpenAI-style keys) and ``Bearer ...`` credentials,

with :data:`REDACTED`.
"""

from __future__ import annotations

import os
import re
import threading

REDACTED = "[REDACTED]"
"""What a secret is replaced with."""

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""Key variable covered even before any back end registered its own."""

MIN_SECRET_CHARS = 4
"""Shorter variable values are not replaced (a key of 1-3 characters would blank ordinary words)."""

_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"\b(Bearer)\s+[A-Za-z0-9._~+/=\-]{4,}", re.IGNORECASE),
)
_key_envs: set[str] = {DEFAULT_KEY_ENV}
_lock = threading.Lock()


def register_key_env(name: str | None) -> None:
    """Also redact the value of environment variable ``name`` (a back end's key variable)."""
    if name:
        with _lock:
            _key_envs.add(name)


def _secrets() -> list[str]:
    with _lock:
        names = list(_key_envs)
    values = {os.environ.get(n, "") for n in names}
    # longest first: a key that contains another is replaced whole
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: object) -> str:
    """``text`` (any object, as ``str``) with API keys and credentials replaced by :data:`REDACTED`."""
    out = "" if text is None else str(text)
    for secret in _secrets():
        out = out.replace(secret, REDACTED)
    out = _PATTERNS[0].sub(REDACTED, out)
    return _PATTERNS[1].sub(lambda m: f"{m.group(1)} {REDACTED}", out)
