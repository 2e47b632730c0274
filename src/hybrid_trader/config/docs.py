"""Field docstrings and the flattened key table of a config class (``--help``, docs/CONFIG.md)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import typing
from typing import Any

import yaml

from hybrid_trader.config.core import (
    _is_dataclass_type,
    _join,
    to_dict,
    type_name,
)
from hybrid_trader.config.dialect import _Dumper


def field_docs(cls: type) -> dict[str, str]:
    """``{field name: docstring}`` from the string literal right under each field.

    Reads the class source with ``ast``; inherited fields are included (a subclass's
    docstring wins). Fields without a docstring are absent; a class whose source is
    unavailable gives ``{}``.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return {}
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__), None)
    if node is None:
        return {}
    docs: dict[str, str] = {}
    body = node.body
    for stmt, nxt in zip(body, body[1:] + [None]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One configurable key, for ``--help`` and documentation tables."""

    key: str
    """Dotted key path, e.g. ``ppo.learning_rate``."""
    type: str
    """Readable type (``float``, ``int or null``, ``one of 'a', 'b'``)."""
    default: Any
    """Default value as plain data (``dataclasses.MISSING`` when required)."""
    doc: str
    """The field's docstring ('' when it has none)."""


def describe_fields(cls: type, prefix: str = "") -> list[FieldInfo]:
    """Flatten a config dataclass into one :class:`FieldInfo` per leaf key (nested sections expanded)."""
    out: list[FieldInfo] = []
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = _join(prefix, f.name)
        tp = hints[f.name]
        if _is_dataclass_type(tp):
            out.extend(describe_fields(tp, key))
            continue
        if f.default is not dataclasses.MISSING:
            default = to_dict(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = to_dict(f.default_factory())
        else:
            default = dataclasses.MISSING
        out.append(FieldInfo(key, type_name(tp), default, docs.get(f.name, "")))
    return out


def markdown_table(cls: type, prefix: str = "") -> str:
    """A Markdown table (key, type, default, meaning) of a config class, for ``docs/CONFIG.md``."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for info in describe_fields(cls, prefix):
        if info.default is dataclasses.MISSING:
            default = "(required)"
        else:
            plain = to_dict(info.default)  # one line: a JSON string is a YAML double-quoted scalar
            text = json.dumps(plain) if isinstance(plain, str) else yaml.dump(
                plain, Dumper=_Dumper, default_flow_style=True, width=10_000).removesuffix("...\n").strip()
            default = (f"`{text}`" if len(text) <= 60 else f"`{text[:40]}`… (long)").replace("|", "\\|")
        doc = info.doc.replace("\n", " ").replace("|", "\\|")
        rows.append(f"| `{info.key}` | {info.type.replace('|', '/')} | {default} | {doc} |")
    return "\n".join(rows)
