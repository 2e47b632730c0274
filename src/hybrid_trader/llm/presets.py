"""Packaged prompt presets: ``hybrid_trader/configs/prompts/<name>.yaml`` (``llm.prompt.preset``).

Each holds a ``prompt:`` section with ``system``, ``context_template`` and ``examples``;
:class:`~hybrid_trader.llm.config.PromptConfig` fills them in when ``preset`` names one.
Imports nothing of the LLM package (the config module imports it).
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Literal

from hybrid_trader.config import read_yaml
from hybrid_trader.errors import UserError, did_you_mean

PromptPreset = Literal["labels", "numbers"]
PRESETS: tuple[str, ...] = ("labels", "numbers")
"""Packaged prompts, each ``hybrid_trader/configs/prompts/<name>.yaml``."""
PRESET_KEYS = ("system", "context_template", "examples")


@functools.cache
def _preset_data(name: str) -> dict:
    path = Path(str(resources.files("hybrid_trader").joinpath("configs", "prompts", f"{name}.yaml")))
    data, _ = read_yaml(path)
    prompt = dict((data or {}).get("prompt") or {})
    prompt["examples"] = [{"answer": e["answer"], "context": dict(e.get("context") or {})}
                          for e in prompt.get("examples") or []]
    return {k: prompt.get(k, "" if k != "examples" else []) for k in PRESET_KEYS}


def prompt_preset(name: str) -> dict:
    """The ``system``, ``context_template`` and ``examples`` (plain mappings) of a packaged preset."""
    if name not in PRESETS:
        raise UserError(f"unknown prompt preset '{name}'", value=name,
                        fix=f"use one of: {', '.join(PRESETS)}.{did_you_mean(name, PRESETS)}")
    return copy.deepcopy(_preset_data(name))
