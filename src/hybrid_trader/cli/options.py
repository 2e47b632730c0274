"""The one table from command-line flags to configuration keys.

Every flag that sets a config value is a row of :data:`OPTIONS`: the flag, the key path(s)
of the run configuration (``RunConfig``; LLM keys start with ``llm.``) it sets, and how
argparse reads it. Commands pick rows with :func:`add_options` and turn the parsed
arguments into ``{key path: value}`` overrides with :func:`overrides_from`, which
:func:`hybrid_trader.config.merge_overrides` validates like a file.

Choices of ``llm.*`` keys (the back ends come from the registry) and help texts left out
of a row are read from the LLM config's types and field docstrings: that module is light.
The run sections' classes are not imported here (``run.config`` loads gymnasium and
TA-Lib, 1.3 s measured, which ``hybrid-trader --help`` must not pay), so those rows give
their help and choices themselves.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hybrid_trader.config import field_docs
from hybrid_trader.llm.backends import BACKENDS, TEACHER_NAMES
from hybrid_trader.llm.config import LLMConfig

__all__ = ["OPTIONS", "CliOption", "add_no_calibrate", "add_options", "llm_key_overrides", "overrides_from"]


@dataclass(frozen=True)
class CliOption:
    """One flag and the config key(s) it sets."""

    flag: str
    """The flag, e.g. ``--timesteps``."""
    keys: tuple[str, ...]
    """Key paths it sets (all to the same value), e.g. ``("ppo.total_timesteps",)``."""
    type: Callable[[str], Any] | None = str
    """argparse type of the value; None for a switch (no value)."""
    const: Any = True
    """Value a switch sets in the config (the parsed argument itself is True)."""
    help: str | None = None
    """Help text; None: the field docstring (``llm.*`` keys)."""
    choices: Sequence[Any] | None = None
    """Allowed values; None: the field's Literal (``llm.*`` keys) or any."""
    metavar: str | None = None
    """Placeholder in the usage line."""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


def _opt(flag: str, *keys: str, **kw: Any) -> CliOption:
    return CliOption(flag, keys, **kw)


OPTIONS: dict[str, CliOption] = {o.flag: o for o in (
    # data
    _opt("--data", "data.path", metavar="FILE",
         help="bars file (CSV or Parquet); default: the built-in synthetic market"),
    _opt("--market", "data.market", "env.market",
         help="contract root symbol: NQ, MNQ, ES, MES, YM, MYM, RTY, M2K (default: from the file name)"),
    _opt("--tz", "data.tz", help="time zone of naive timestamps (default America/New_York)"),
    _opt("--time-shift", "data.time_shift", type=float, metavar="HOURS",
         help="hours added to every timestamp, for vendors whose clock is off (ES sample file: -5)"),
    _opt("--repair", "data.repair", type=None, help="repair fixable data errors (each reported)"),
    # run
    _opt("--phase", "env.phase", type=int, choices=(1, 2, 3),
         help="training phase (env.phase; a new run without it, in --config or --set, is phase 1)"),
    _opt("--timesteps", "ppo.total_timesteps", type=int, help="environment steps to train (ppo.total_timesteps)"),
    _opt("--n-envs", "ppo.n_envs", type=int, help="parallel environments (ppo.n_envs, default 4)"),
    _opt("--vec-env", "ppo.vec_env", choices=("dummy", "subproc"),
         help="run the environments in the main process (dummy, default: fastest here) or one subprocess each"),
    _opt("--seed", "ppo.seed", type=int, help="seed (ppo.seed)"),
    _opt("--quiet", "train.progress_bar", type=None, const=False, help="no progress bar or messages"),
    # LLM advisor
    _opt("--llm", "llm.backend", help="phase 3: LLM advisor back end (llm.backend)"),
    _opt("--backend", "llm.backend", help="LLM back end (default: the config's, transformers)"),
    _opt("--teacher", "llm.student.teacher", choices=TEACHER_NAMES,
         help="phase 3 with --llm student: a language model that also answers, in its own worker, the decisions "
              "llm.query picks, into RUN_DIR/advice/train for the next distillation (llm.student.teacher)"),
    _opt("--model", "llm.<backend>.model", metavar="MODEL",
         help="transformers: 'gemma-3-270m', a local model directory or a .gguf; openai: the server's model name; "
              "llama_cpp: a .gguf file (the key depends on the back end: llm.transformers.model, ...)"),
    _opt("--base-url", "llm.openai.base_url", metavar="URL",
         help="openai back end: server URL ending in /v1 (e.g. http://127.0.0.1:8080/v1)"),
    _opt("--generate", "llm.mode", type=None, const="generate",
         help="generation mode (ACTION | confidence | reason) instead of scoring (llm.mode: generate)"),
    _opt("--max-wait-ms", "llm.batching.max_wait_ms", type=float, metavar="MS"),
)}
"""Flag -> key path(s). ``llm.<backend>`` stands for the section of the chosen back end."""


def _llm_field(key: str) -> tuple[type, str] | None:
    """(owner class, field name) of an ``llm.*`` key, or None."""
    parts = key.split(".")
    if parts[0] != "llm" or "<" in key:
        return None
    cls: Any = LLMConfig
    for part in parts[1:-1]:
        cls = typing.get_type_hints(cls)[part]
    return cls, parts[-1]


def _help_and_choices(opt: CliOption) -> tuple[str | None, Sequence[Any] | None]:
    help_text, choices = opt.help, opt.choices
    found = _llm_field(opt.keys[0])
    if found is not None:
        cls, name = found
        if help_text is None:
            help_text = field_docs(cls).get(name, "") + f" ({opt.keys[0]})"
        hint = typing.get_type_hints(cls)[name]
        if choices is None and typing.get_origin(hint) is Literal:
            choices = typing.get_args(hint)
    return help_text, choices


def add_options(parser: argparse.ArgumentParser, flags: Sequence[str], **defaults: Any) -> None:
    """Add the rows ``flags`` of :data:`OPTIONS` to ``parser``; ``defaults`` by dest (e.g. ``phase=1``)."""
    for flag in flags:
        opt = OPTIONS[flag]
        help_text, choices = _help_and_choices(opt)
        default = defaults.get(opt.dest)
        if default is not None and help_text:
            help_text = f"{help_text} (default {default})"
        kwargs: dict[str, Any] = {"help": help_text, "default": default, "dest": opt.dest}
        if opt.type is None:  # a switch: True when given, None when not; overrides_from maps it to const
            kwargs["action"] = "store_const"
            kwargs["const"] = True
        else:
            kwargs.update(type=opt.type, choices=choices, metavar=opt.metavar)
        parser.add_argument(opt.flag, **kwargs)


def add_no_calibrate(parser: argparse.ArgumentParser) -> None:
    """``--no-calibrate``, the same flag on every command that asks a leaning model (advise collect, llm eval,
    train, run): by default its answers are divided by the run's batch calibration, fitted first when missing."""
    parser.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                        help="a model with an answer lean (transformers, llama_cpp, openai): use its raw answers "
                             "instead of dividing them by the run's batch calibration (by default fitted first on "
                             "the training days when the run has none); the advice is then marked raw in the "
                             "dataset and every report")


def overrides_from(args: argparse.Namespace, flags: Sequence[str]) -> dict[str, Any]:
    """``{key path: value}`` for each of ``flags`` given on the command line (None = not given)."""
    out: dict[str, Any] = {}
    for flag in flags:
        opt = OPTIONS[flag]
        value = getattr(args, opt.dest, None)
        if value is None or value is False:
            continue
        if opt.type is None:
            value = opt.const
        for key in opt.keys:
            if "<backend>" in key:
                backend = out.get("llm.backend") or getattr(args, "backend", None) or getattr(args, "llm", None)
                spec = BACKENDS.get(backend or "transformers", BACKENDS["transformers"])
                key = key.replace("<backend>", spec.section).rsplit(".", 1)[0] + f".{spec.model_key}"
                if not spec.model_key:
                    continue
            out[key] = value
    return out


def llm_key_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``llm.*`` entries of ``overrides`` with the ``llm.`` prefix removed (for an LLMConfig)."""
    return {k[len("llm."):]: v for k, v in overrides.items() if k.startswith("llm.")}


def field_keys(cls: type, prefix: str = "") -> list[str]:
    """Every leaf key path of a config class (for tests: each table key must exist)."""
    out = []
    for f in dataclasses.fields(cls):
        sub = typing.get_type_hints(cls)[f.name]
        key = f"{prefix}{f.name}"
        out.extend(field_keys(sub, key + ".") if isinstance(sub, type) and dataclasses.is_dataclass(sub) else [key])
    return out
