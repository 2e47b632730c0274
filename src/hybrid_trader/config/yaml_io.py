"""YAML files: read with YAML 1.2 scalars and line numbers, written with each field's docstring as a comment."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from hybrid_trader import __version__
from hybrid_trader.config.core import (
    ConfigError,
    T,
    _join,
    _kind,
    from_dict,
    to_dict,
)
from hybrid_trader.config.dialect import _Dumper, _Loader
from hybrid_trader.config.docs import field_docs
from hybrid_trader.errors import UserError


def _line_map(node: yaml.Node, prefix: str = "", out: dict[str, int] | None = None) -> dict[str, int]:
    """Key path -> 1-based line of the key in a composed YAML tree."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            key = _join(prefix, str(knode.value))
            out[key] = knode.start_mark.line + 1
            _line_map(vnode, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, vnode in enumerate(node.value):
            key = f"{prefix}[{i}]"
            out[key] = vnode.start_mark.line + 1
            _line_map(vnode, key, out)
    return out


def read_yaml(path: str | Path) -> tuple[Any, dict[str, int]]:
    """Parse a YAML file: ``(data, {key path: line})``. UserError if missing or malformed."""
    p = Path(path)
    if not p.is_file():
        raise UserError("config file not found" if not p.exists() else "config path is not a file",
                        file=str(p), fix="check the path given to --config")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"cannot read the config file: {err}", file=str(p), fix="save it as UTF-8 text") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"not valid YAML: {problem}", file=str(p), line=line,
                          fix="check indentation (spaces, not tabs) and that each line is 'key: value'") from None
    if node is not None:
        _refuse_duplicate_keys(node, str(p))
    return data, (_line_map(node) if node is not None else {})


def _refuse_duplicate_keys(node: yaml.Node, source: str, prefix: str = "") -> None:
    """ConfigError naming the key and both lines when a mapping holds a key twice (YAML would keep the last)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for knode, vnode in node.value:
            key = str(knode.value)
            line = knode.start_mark.line + 1
            if key in seen:
                raise ConfigError(
                    f"duplicated key: given on line {seen[key]} and again on line {line} (YAML would silently keep "
                    "the last)", key=_join(prefix, key), file=source, line=line,
                    fix=f"keep one '{key}:' and delete the other",
                )
            seen[key] = line
            _refuse_duplicate_keys(vnode, source, _join(prefix, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, vnode in enumerate(node.value):
            _refuse_duplicate_keys(vnode, source, f"{prefix}[{i}]")


def load_yaml_config(path: str | Path, cls: type[T]) -> T:
    """Read a YAML file into the dataclass ``cls``; an empty file gives the defaults."""
    data, lines = read_yaml(path)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"expected a mapping of {cls.__name__} keys at the top level, got {_kind(data)}",
                          file=str(path), line=1, fix="write one 'key: value' per line")
    return from_dict(cls, data, source=str(path), lines=lines)


def _emit(obj: Any, indent: int, out: list[str], docs: bool) -> None:
    """The fields of dataclass ``obj`` as YAML lines, each after its docstring as a comment.

    Sections (nested dataclasses) are walked here; every value is written by PyYAML (flow
    style for a flat list or mapping, block style when nested; non-ASCII escaped, so every
    string reads back equal).
    """
    pad = "  " * indent
    fdocs = field_docs(type(obj)) if docs else {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        if indent == 0 and dataclasses.is_dataclass(value) and out and out[-1] != "":
            out.append("")
        out.extend(f"{pad}# {line}".rstrip() for line in fdocs.get(f.name, "").splitlines())
        if dataclasses.is_dataclass(value):
            out.append(f"{pad}{f.name}:")
            _emit(value, indent + 1, out, docs)
            continue
        out.extend(pad + line for line in _yaml_dump({f.name: to_dict(value)}).splitlines())


def _yaml_dump(data: Any) -> str:
    """PyYAML's text for ``data``: a collection of scalars in flow style (``[1, 2]``), nested ones in blocks."""
    flat = isinstance(data, dict) and not any(isinstance(v, (dict, list)) for v in data.values())
    text = yaml.dump(data, Dumper=_Dumper, default_flow_style=False if flat else None, sort_keys=False,
                     width=10_000, allow_unicode=False)
    return text.removesuffix("...\n").rstrip("\n")


def save_config(obj: Any, path: str | Path, *, header: str | None = None, docs: bool = True) -> Path:
    """Write the resolved config ``obj`` (a dataclass) as YAML; returns the path.

    The file starts with a header comment (what wrote it, when) and, with ``docs``, each
    key is preceded by its field docstring as a comment. ``load_yaml_config(path,
    type(obj))`` reads back an equal object.
    """
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"save_config needs a dataclass instance, got {obj!r}")
    p = Path(path)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        f"# Resolved {type(obj).__name__} written by hybrid-trader {__version__} on {stamp}.",
        "# Every value in effect is listed (defaults included); pass this file to --config to reuse it.",
    ]
    if header:
        lines.extend(f"# {line}".rstrip() for line in header.splitlines())
    lines.append("")
    _emit(obj, 0, lines, docs)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def parse_overrides(items: Iterable[str], *, source: str = "command line") -> dict[str, Any]:
    """``["ppo.learning_rate=3e-4", "env.market=ES"]`` -> ``{"ppo.learning_rate": 0.0003, ...}``.

    Each value is read as YAML (so ``true``, ``null``, ``[1, 2]`` and ``1e-4`` work);
    for a string that looks like a number, quote it: ``name='"123"'``.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"override {item!r} is not KEY=VALUE", file=source,
                            fix="write e.g. --set ppo.learning_rate=3e-4")
        try:
            out[key] = yaml.load(text, Loader=_Loader) if text.strip() else ""
        except yaml.YAMLError:
            out[key] = text
    return out
