"""The builder: a mapping -> a validated dataclass (:func:`from_dict`) and back (:func:`to_dict`); ConfigError."""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeGuard, TypeVar, Union

from hybrid_trader.errors import UserError, did_you_mean

T = TypeVar("T")


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


def secret_hint(value: Any) -> str:
    """A secret shown safely in a message: its first 3 characters and an ellipsis."""
    text = str(value)
    return (text[:3] + "…") if text else "''"


def _refused_key_error(cls: type | None, key: str, path: str, value: Any, *, file: str | None,
                       line: int | None) -> ConfigError | None:
    """The error for a key the class refuses (``REFUSED_KEYS``: key -> fix), else None."""
    refused = getattr(cls, "REFUSED_KEYS", None) or {}
    if key not in refused:
        return None
    shown = f" (value {secret_hint(value)})" if value not in (None, "") else ""
    return ConfigError(f"is not accepted in a config file or --set{shown}", key=path, file=file, line=line,
                       fix=refused[key])


def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    if not key:
        return prefix
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


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


def _convert(value: Any, tp: Any, path: str, ctx: _Ctx, allow_nan: bool = False) -> Any:
    """``value`` as type ``tp`` (a type hint), or a ConfigError naming ``path``, the value and the fix."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object or origin is typing.ClassVar:
        return value
    if origin in (Union, types.UnionType):
        return _union(value, tp, path, ctx, allow_nan)
    if origin is Literal:
        return _literal(value, typing.get_args(tp), path, ctx)
    if value is None:
        what = f"give the keys of '{path}' or leave it out for the defaults" if _is_dataclass_type(tp) else \
            f"give a value or leave '{path.rsplit('.', 1)[-1]}' out for its default"
        raise _wrong(value, tp, path, ctx, fix=what)
    scalar = _SCALARS.get(tp)
    if scalar is not None:
        return scalar(value, path, ctx, allow_nan)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(value, tp, path, ctx)
    if _is_dataclass_type(tp):
        return _build_dataclass(tp, value, path, ctx)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        return _sequence(value, tp, path, ctx)
    if tp is dict or origin in (dict, Mapping):
        return _mapping(value, tp, path, ctx)
    if isinstance(tp, type) and not isinstance(value, tp):
        raise _wrong(value, tp, path, ctx)
    return value  # an instance of an other class, or an exotic hint: accepted as is


def _wrong(value: Any, expected: Any, path: str, ctx: _Ctx, fix: str | None = None) -> ConfigError:
    exp = expected if isinstance(expected, str) else type_name(expected)
    return ctx.error(path, f"expected {exp}, got {_kind(value)} {_show(value)}", value=None, fix=fix)


def _union(value: Any, tp: Any, path: str, ctx: _Ctx, allow_nan: bool) -> Any:
    args = typing.get_args(tp)
    if value is None:
        if _NONE in args:
            return None
        raise _wrong(value, tp, path, ctx)
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
            raise _wrong(value, tp, path, ctx, fix=only.fix)
        raise only
    raise _wrong(value, tp, path, ctx)


def _literal(value: Any, allowed: tuple, path: str, ctx: _Ctx) -> Any:
    for a in allowed:
        if value == a and type(value) is type(a):
            return a
    hint = did_you_mean(str(value), [str(a) for a in allowed]) if isinstance(value, str) else ""
    raise ctx.error(path, f"{_show(value)} is not allowed." + hint, fix="use one of: " + ", ".join(map(_show, allowed)))


def _bool(value: Any, path: str, ctx: _Ctx, allow_nan: bool) -> bool:
    if isinstance(value, bool):
        return value
    raise _wrong(value, "bool (true or false)", path, ctx, fix="write true or false (without quotes)")


def _int(value: Any, path: str, ctx: _Ctx, allow_nan: bool) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    fix = None if isinstance(value, bool) else "write a whole number" if isinstance(value, float) else \
        "write a whole number without quotes, e.g. 2048"
    raise _wrong(value, "int", path, ctx, fix=fix)


def _float(value: Any, path: str, ctx: _Ctx, allow_nan: bool) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not allow_nan and math.isnan(value):
            raise ctx.error(path, "NaN is not a number this option accepts", fix="write a number, e.g. 0.0003")
        return float(value)
    fix = None if isinstance(value, bool) else "write a number without quotes, e.g. 0.0003 or 3e-4"
    raise _wrong(value, "float", path, ctx, fix=fix)


def _str(value: Any, path: str, ctx: _Ctx, allow_nan: bool) -> str:
    if isinstance(value, str):
        return value
    raise _wrong(value, "str", path, ctx,
                 fix=f"quote the value: \"{value}\"" if isinstance(value, (int, float, bool)) else None)


def _path(value: Any, path: str, ctx: _Ctx, allow_nan: bool) -> Path:
    if isinstance(value, (str, Path)):
        return Path(value)
    raise _wrong(value, "path (a string)", path, ctx)


_SCALARS: dict[Any, Any] = {bool: _bool, int: _int, float: _float, str: _str, Path: _path}
"""Converters of the scalar types: nothing is coerced silently (the string "3" is not an int)."""


def _enum(value: Any, tp: type[enum.Enum], path: str, ctx: _Ctx) -> enum.Enum:
    if isinstance(value, tp):
        return value
    for m in tp:
        if (isinstance(value, str) and m.name.lower() == value.lower()) or (
                not isinstance(value, bool) and m.value == value):
            return m
    hint = did_you_mean(str(value), [m.name for m in tp]) if isinstance(value, str) else ""
    raise ctx.error(path, f"{_show(value)} is not allowed." + hint, fix="use one of: " + ", ".join(m.name for m in tp))


def _sequence(value: Any, tp: Any, path: str, ctx: _Ctx) -> list | tuple:
    if not isinstance(value, (list, tuple)):
        raise _wrong(value, tp, path, ctx, fix="write a list: [a, b] or one '- item' per line")
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    container: type = tuple if (tp is tuple or origin is tuple) else list
    if not args:
        return container(value)
    if container is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise ctx.error(path, f"expected a list of {len(args)} values, got {len(value)}: {_show(value)}",
                            fix=f"give exactly {len(args)} values ({', '.join(type_name(a) for a in args)})")
        return tuple(_convert(v, a, f"{path}[{i}]", ctx) for i, (v, a) in enumerate(zip(value, args)))
    return container(_convert(v, args[0], f"{path}[{i}]", ctx) for i, v in enumerate(value))


def _mapping(value: Any, tp: Any, path: str, ctx: _Ctx) -> dict:
    if not isinstance(value, Mapping):
        raise _wrong(value, tp, path, ctx, fix="write a mapping: {key: value} or indented 'key: value' lines")
    args = typing.get_args(tp)
    if not args:
        return dict(value)
    ktp, vtp = args
    return {_convert(k, ktp, path, ctx): _convert(v, vtp, _join(path, str(k)), ctx) for k, v in value.items()}


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
