"""Validated YAML <-> dataclass configuration.

Every configuration section is a plain dataclass defined by the module it configures
(``EnvConfig`` in ``env/config.py``, a PPO section in ``training``, ...), each field with
a one-line docstring (a string literal right under it). This module is the generic
machinery that turns YAML into those dataclasses and back:

- :func:`from_dict` builds a dataclass from a mapping, recursively, using the type hints
  (``int``, ``float``, ``bool``, ``str``, ``Path``, ``Optional``, ``Literal``,
  ``list``/``tuple``/``dict``, enums, nested dataclasses). Unknown keys, wrong types and
  values outside a ``Literal`` raise :class:`ConfigError` (a
  :class:`~hybrid_trader.errors.UserError`) naming the file, the line when known, the
  key path (``ppo.learning_rat``), a "did you mean" suggestion and the valid keys.
  Nothing is coerced silently: the string ``"3"`` is not an ``int``. Ints are accepted
  where floats are expected, and whole floats (``1.0e+6``) where ints are.
- :func:`load_yaml_config` / :func:`save_config` read and write YAML files;
  :func:`to_dict` is the inverse of :func:`from_dict`.
- :func:`merge_overrides` applies ``{"ppo.learning_rate": 1e-4}`` (from the command
  line, see :func:`parse_overrides`) with the same validation.
- :func:`field_docs` reads the field docstrings, :func:`describe_fields` flattens a
  config class into rows (key path, type, default, doc) for ``--help`` and the docs.
- :func:`check` is for ``__post_init__`` validation: the error it raises gets the file
  and the full key path added by :func:`from_dict`.
- Layers: a section given in a file is merged over the field's default value (or over an
  explicit ``base``), so a packaged defaults layer (the LLM advisor's ``llm.yaml``) lies
  beneath the user's file while errors still name the user's file and line.
- Rules every field gets: a float is not NaN (refused unless the field's metadata says
  ``allow_nan``; ranges, inf included, are each field's ``check``); a key listed in a class's ``REFUSED_KEYS`` (secrets
  such as ``api_key``) is refused with its fix and its value is never echoed; a YAML
  mapping with a duplicated key is an error naming both lines.

YAML scalars are read as YAML 1.2 reads them: ``1e6`` and ``3e-4`` are floats (PyYAML's
YAML 1.1 default would read them as strings) and only ``true``/``false`` are booleans
(``yes``, ``no``, ``on``, ``off`` stay strings, so ``country: NO`` is the text "NO").
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import enum
import inspect
import math
import re
import textwrap
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeGuard, TypeVar, Union

import yaml

from hybrid_trader import __version__
from hybrid_trader.errors import UserError, did_you_mean

T = TypeVar("T")

__all__ = [
    "ConfigError",
    "FieldInfo",
    "check",
    "redact",
    "describe_fields",
    "field_docs",
    "from_dict",
    "load_yaml_config",
    "markdown_table",
    "merge_overrides",
    "parse_overrides",
    "read_yaml",
    "save_config",
    "to_dict",
    "type_name",
]


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
class ConfigError(UserError):
    """A configuration value the user must fix: ``file, line N: key.path: message``."""

    def __init__(
        self,
        message: str,
        *,
        key: str = "",
        file: str | None = None,
        line: int | None = None,
        value: Any = None,
        fix: str | None = None,
    ) -> None:
        self.key = key
        self.line = line
        super().__init__(message, file=file, value=value, fix=fix)

    def render(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file) + (f", line {self.line}" if self.line else ""))
        if self.key:
            where.append(self.key)
        text = ": ".join(where + [self.message])
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text

    def located(self, *, file: str | None = None, prefix: str = "", line: int | None = None) -> ConfigError:
        """A copy with the file, the key path prefix and the line filled in (where unset)."""
        key = _join(prefix, self.key) if prefix else self.key
        return ConfigError(
            self.message,
            key=key,
            file=self.file if self.file is not None else file,
            line=self.line if self.line is not None else line,
            value=self.value,
            fix=self.fix,
        )


def check(cond: Any, path: str, message: str, *, value: Any = None, fix: str | None = None) -> None:
    """Raise :class:`ConfigError` for the field ``path`` unless ``cond`` holds.

    For ``__post_init__``: ``path`` is relative to the dataclass being validated
    (``"learning_rate"``); :func:`from_dict` prefixes the section (``ppo.learning_rate``)
    and adds the file name and line::

        def __post_init__(self):
            check(self.learning_rate > 0, "learning_rate", f"must be > 0, got {self.learning_rate}")
    """
    if not cond:
        raise ConfigError(message, key=path, value=value, fix=fix)


def redact(value: Any) -> str:
    """A secret shown safely in a message: its first 3 characters and an ellipsis."""
    text = str(value)
    return (text[:3] + "…") if text else "''"


def _refused_key_error(cls: type | None, key: str, path: str, value: Any, *, file: str | None,
                       line: int | None) -> ConfigError | None:
    """The error for a key the class refuses (``REFUSED_KEYS``: key -> fix), else None."""
    refused = getattr(cls, "REFUSED_KEYS", None) or {}
    if key not in refused:
        return None
    shown = f" (value {redact(value)})" if value not in (None, "") else ""
    return ConfigError(f"is not accepted in a config file or --set{shown}", key=path, file=file, line=line,
                       fix=refused[key])


def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    if not key:
        return prefix
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


# ---------------------------------------------------------------------------------------
# Type names (for messages and docs)
# ---------------------------------------------------------------------------------------
_NONE = type(None)


def type_name(tp: Any) -> str:
    """Readable name of a type hint: ``int``, ``float or null``, ``one of 'a', 'b'``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return "any value"
    if tp is _NONE:
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not _NONE]
        text = " or ".join(names)
        return text + " or null" if _NONE in args else text
    if origin in (list, Sequence) or tp is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is tuple or tp is tuple:
        if not args:
            return "list"
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list of {type_name(args[0])}"
        return f"list of {len(args)} ({', '.join(type_name(a) for a in args)})"
    if origin in (dict, Mapping) or tp is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}" if args else "mapping"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(m.name) for m in tp)
    if _is_dataclass_type(tp):
        return f"mapping ({tp.__name__})"
    if tp is Path:
        return "path"
    return getattr(tp, "__name__", str(tp))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


# ---------------------------------------------------------------------------------------
# dict -> dataclass
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Ctx:
    source: str
    lines: Mapping[str, int] | None = None

    def line(self, path: str) -> int | None:
        if not self.lines:
            return None
        while path:
            if path in self.lines:
                return self.lines[path]
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return None

    def error(self, path: str, message: str, *, value: Any = None, fix: str | None = None) -> ConfigError:
        return ConfigError(message, key=path, file=self.source, line=self.line(path), value=value, fix=fix)


def from_dict(cls: type[T], data: Mapping[str, Any] | None, *, source: str = "config.yaml", path: str = "",
              lines: Mapping[str, int] | None = None, base: T | None = None) -> T:
    """Build the dataclass ``cls`` from ``data`` (a mapping, e.g. parsed YAML), validating it.

    Missing keys take the field defaults; ``None`` for ``data`` means all defaults.
    ``source`` names the file in error messages, ``path`` is the key path of ``data``
    inside it (``"ppo"``), ``lines`` optionally maps key paths to line numbers.
    ``base`` (an instance of ``cls``) gives the values of keys that ``data`` leaves out
    (a defaults layer); without it a nested section is merged over the field's default.
    Raises :class:`ConfigError` on unknown keys, wrong types, values outside a
    ``Literal`` and failed :func:`check` calls in ``__post_init__``.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"from_dict needs a dataclass type, got {cls!r}")
    return _build_dataclass(cls, {} if data is None else data, path, _Ctx(source, lines), base)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _build_dataclass(cls: type, data: Any, path: str, ctx: _Ctx, base: Any = None) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ctx.error(
            path, f"expected a mapping of {cls.__name__} keys, got {_kind(data)} {_show(data)}",
            fix=f"write the keys of '{path or 'the file'}' indented under it, one 'key: value' per line",
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = _join(path, str(key))
        refused = _refused_key_error(cls, str(key), sub, value, file=ctx.source, line=ctx.line(sub))
        if refused is not None:
            raise refused
        if key not in fields:
            valid = ", ".join(fields) or "(none)"
            raise ctx.error(
                sub, "unknown key." + did_you_mean(str(key), fields),
                fix=f"valid keys {'under ' + repr(path) if path else 'at the top level'}: {valid}",
            )
        f = fields[key]
        sub_cls = _dataclass_of(hints[key])
        if sub_cls is not None and isinstance(value, Mapping):
            # a section given in the file is merged over the default (or base) section
            under = getattr(base, key) if base is not None else _field_default(f)
            kwargs[key] = _build_dataclass(sub_cls, value, sub, ctx, under if isinstance(under, sub_cls) else None)
        else:
            kwargs[key] = _convert(value, hints[key], sub, ctx, allow_nan=f.metadata.get("allow_nan", False))
    if base is not None:
        for name in fields:
            if name not in kwargs:
                kwargs[name] = copy.deepcopy(getattr(base, name))
    missing = [
        n for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ctx.error(
            path, f"missing required key{'s' if len(missing) > 1 else ''}: {', '.join(missing)}",
            fix=f"add {', '.join(repr(m) for m in missing)} {'under ' + repr(path) if path else 'to the file'}",
        )
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise err.located(file=ctx.source, prefix=path, line=ctx.line(_join(path, err.key))) from None
    except UserError as err:
        if err.file is not None:
            raise
        raise ConfigError(
            err.message, key="", file=ctx.source, line=ctx.line(path), value=err.value, fix=err.fix
        ) from None


def _convert(value: Any, tp: Any, path: str, ctx: _Ctx,  # noqa: C901 - one branch per kind of type
             allow_nan: bool = False) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def wrong(expected: str | None = None, fix: str | None = None) -> ConfigError:
        exp = expected or type_name(tp)
        return ctx.error(path, f"expected {exp}, got {_kind(value)} {_show(value)}", value=None, fix=fix)

    if tp is Any or tp is object:
        return value
    if origin is typing.ClassVar:
        return value
    if origin in (Union, types.UnionType):
        if value is None:
            if _NONE in args:
                return None
            raise wrong()
        options = [a for a in args if a is not _NONE]
        errors = []
        for opt in options:
            try:
                return _convert(value, opt, path, ctx, allow_nan)
            except ConfigError as err:
                errors.append(err)
        if len(options) == 1:
            only = errors[0]
            if only.key == path and only.message.startswith("expected "):
                raise wrong(fix=only.fix)
            raise only
        raise wrong()
    if origin is Literal:
        for allowed in args:
            if value == allowed and type(value) is type(allowed):
                return allowed
        hint = did_you_mean(str(value), [str(a) for a in args]) if isinstance(value, str) else ""
        raise ctx.error(
            path, f"{_show(value)} is not allowed." + hint,
            fix="use one of: " + ", ".join(_show(a) for a in args),
        )
    if value is None:
        if _is_dataclass_type(tp):
            raise wrong(fix=f"give the keys of '{path}' or leave it out for the defaults")
        raise wrong(fix=f"give a value or leave '{path.rsplit('.', 1)[-1]}' out for its default")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise wrong("bool (true or false)", fix="write true or false (without quotes)")
    if tp is int:
        if isinstance(value, bool):
            raise wrong("int")
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        fix = "write a whole number without quotes, e.g. 2048"
        if isinstance(value, float):
            fix = "write a whole number"
        raise wrong("int", fix=fix)
    if tp is float:
        if isinstance(value, bool):
            raise wrong("float")
        if isinstance(value, (int, float)):
            if not allow_nan and math.isnan(value):
                raise ctx.error(path, "NaN is not a number this option accepts", fix="write a number, e.g. 0.0003")
            return float(value)
        raise wrong("float", fix="write a number without quotes, e.g. 0.0003 or 3e-4")
    if tp is str:
        if isinstance(value, str):
            return value
        raise wrong("str", fix=f"quote the value: \"{value}\"" if isinstance(value, (int, float, bool)) else None)
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value)
        raise wrong("path (a string)")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        if isinstance(value, str):
            for m in tp:
                if m.name.lower() == value.lower():
                    return m
        for m in tp:
            if not isinstance(value, bool) and m.value == value:
                return m
        hint = did_you_mean(str(value), [m.name for m in tp]) if isinstance(value, str) else ""
        raise ctx.error(path, f"{_show(value)} is not allowed." + hint,
                        fix="use one of: " + ", ".join(m.name for m in tp))
    if _is_dataclass_type(tp):
        return _build_dataclass(tp, value, path, ctx)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            raise wrong(fix="write a list: [a, b] or one '- item' per line")
        container = tuple if (tp is tuple or origin is tuple) else list
        if not args:
            return container(value)
        if container is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise ctx.error(path, f"expected a list of {len(args)} values, got {len(value)}: {_show(value)}",
                                fix=f"give exactly {len(args)} values ({', '.join(type_name(a) for a in args)})")
            return tuple(_convert(v, a, f"{path}[{i}]", ctx) for i, (v, a) in enumerate(zip(value, args)))
        item_tp = args[0]
        return container(_convert(v, item_tp, f"{path}[{i}]", ctx) for i, v in enumerate(value))
    if tp is dict or origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise wrong(fix="write a mapping: {key: value} or indented 'key: value' lines")
        if not args:
            return dict(value)
        ktp, vtp = args
        return {_convert(k, ktp, path, ctx): _convert(v, vtp, _join(path, str(k)), ctx) for k, v in value.items()}
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise wrong()
    return value  # an exotic hint: accept as is


# ---------------------------------------------------------------------------------------
# dataclass -> dict
# ---------------------------------------------------------------------------------------
def to_dict(obj: Any) -> Any:
    """Plain Python data (dicts, lists, scalars) for a dataclass, the inverse of :func:`from_dict`.

    Tuples become lists, paths strings, enums their names; the key order is the field order.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init}
    if isinstance(obj, Mapping):
        return {(k.name if isinstance(k, enum.Enum) else k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item) and type(obj).__module__ == "numpy":
        return obj.item()
    return obj


# ---------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------
class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: ``1e6``/``3e-4`` are floats; only true/false are booleans."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string :class:`_Loader` would read as another type."""


_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_BOOL_TAG = "tag:yaml.org,2002:bool"
for _cls in (_Loader, _Dumper):
    _cls.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))
    _cls.add_implicit_resolver(_BOOL_TAG, _BOOL_12, list("tTfF"))


def _bool_12(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    return loader.construct_scalar(node).lower() == "true"


_Loader.add_constructor(_BOOL_TAG, _bool_12)


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


def _yaml_double_quoted(text: str) -> str:
    """A YAML double-quoted scalar with every non-printable or non-ASCII character escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif 32 <= code < 127:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _flow_item_yaml(value: Any) -> str:
    """An item of a flow list or mapping: a string holding a flow indicator (``,[]{}``) is quoted."""
    if isinstance(value, str) and any(c in value for c in ",[]{}"):
        return _yaml_double_quoted(value)
    return _scalar_yaml(value)


def _scalar_yaml(value: Any) -> str:
    if isinstance(value, (list, tuple)):  # flow list: each item quoted as it needs
        return "[" + ", ".join(_flow_item_yaml(v) for v in value) + "]"
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{_flow_item_yaml(k)}: {_flow_item_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and (value != value.strip() or not value.isprintable() or not value.isascii()):
        # PyYAML writes some of these (e.g. a no-break space) as plain scalars that read back
        # differently; a JSON string is a valid YAML double-quoted scalar that round-trips.
        return _yaml_double_quoted(value)
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=10_000, allow_unicode=True, sort_keys=False)
    text = text.strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    elif text.endswith("..."):
        text = text[:-3].strip()
    return text


def _emit(obj: Any, indent: int, out: list[str], docs: bool) -> None:
    pad = "  " * indent
    cls = type(obj)
    fdocs = field_docs(cls) if docs else {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = getattr(obj, f.name)
        doc = fdocs.get(f.name)
        if indent == 0 and dataclasses.is_dataclass(value) and out and out[-1] != "":
            out.append("")
        if doc:
            for line in doc.splitlines():
                out.append(f"{pad}# {line}".rstrip())
        if dataclasses.is_dataclass(value):
            out.append(f"{pad}{f.name}:")
            _emit(value, indent + 1, out, docs)
            continue
        plain = to_dict(value)
        if isinstance(plain, (dict, list)) and plain and _nested(plain):
            block = yaml.dump(
                plain, Dumper=_Dumper, default_flow_style=False, sort_keys=False, allow_unicode=True, width=10_000
            )
            out.append(f"{pad}{f.name}:")
            out.extend(f"{pad}  {line}" for line in block.rstrip("\n").splitlines())
        else:
            out.append(f"{pad}{f.name}: {_scalar_yaml(plain)}")


def _nested(plain: Any) -> bool:
    values = plain.values() if isinstance(plain, dict) else plain
    return any(isinstance(v, (dict, list)) for v in values)


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


# ---------------------------------------------------------------------------------------
# Overrides
# ---------------------------------------------------------------------------------------
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


def merge_overrides(obj: T, overrides: Mapping[str, Any], *, source: str = "command line", path: str = "") -> T:
    """A new config equal to ``obj`` with dotted-key ``overrides`` applied and validated.

    ``merge_overrides(cfg, {"ppo.learning_rate": 1e-4, "env.market": "ES"})``. A key that
    names a nested section may take a mapping, which is merged into that section.
    ``path`` is where ``obj`` sits in a larger config (``"llm"``), for the messages.
    """
    data = to_dict(obj)
    cls = type(obj)
    for dotted, value in overrides.items():
        parts = [p for p in str(dotted).split(".")]
        if any(not p for p in parts):
            raise ConfigError("empty part in the key", key=_join(path, str(dotted)), file=source,
                              fix="write section.key, e.g. ppo.learning_rate")
        node, walked = data, ""
        node_cls: Any = cls
        for i, part in enumerate(parts):
            fields = {f.name: f for f in dataclasses.fields(node_cls) if f.init} if node_cls else {}
            here = _join(walked, part)
            shown = _join(path, here)
            refused = _refused_key_error(node_cls, part, shown, value if i == len(parts) - 1 else None,
                                         file=source, line=None)
            if refused is not None:
                raise refused
            if node_cls is not None and part not in fields:
                raise ConfigError("unknown key." + did_you_mean(part, fields), key=shown, file=source,
                                  fix=f"valid keys {'under ' + repr(walked) if walked else 'at the top level'}: "
                                  + ", ".join(fields))
            last = i == len(parts) - 1
            sub_cls = _dataclass_of(typing.get_type_hints(node_cls)[part]) if node_cls else None
            if last:
                if isinstance(value, Mapping) and isinstance(node.get(part), Mapping):
                    merged = dict(node[part])
                    merged.update(value)
                    node[part] = merged
                else:
                    node[part] = to_dict(value)
            else:
                if not isinstance(node.get(part), dict):
                    if sub_cls is None and node_cls is not None:
                        raise ConfigError(f"is not a section, so '{'.'.join(parts[i + 1:])}' cannot be set inside it",
                                          key=shown, file=source, fix=f"set '{shown}' itself")
                    node[part] = {}
                node, node_cls, walked = node[part], sub_cls, here
    return from_dict(cls, data, source=source, path=path)


def _is_dataclass_type(tp: Any) -> TypeGuard[type]:
    """Whether ``tp`` is a dataclass (the class, not an instance)."""
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (``X`` or ``Optional[X]``), else None."""
    if _is_dataclass_type(tp):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        found = [a for a in typing.get_args(tp) if _is_dataclass_type(a)]
        return found[0] if len(found) == 1 else None
    return None


# ---------------------------------------------------------------------------------------
# Field documentation
# ---------------------------------------------------------------------------------------
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
            text = _scalar_yaml(info.default)
            default = (f"`{text}`" if len(text) <= 60 else f"`{text[:40]}`… (long)").replace("|", "\\|")
        doc = info.doc.replace("\n", " ").replace("|", "\\|")
        rows.append(f"| `{info.key}` | {info.type.replace('|', '/')} | {default} | {doc} |")
    return "\n".join(rows)
