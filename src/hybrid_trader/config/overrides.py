"""Dotted-key overrides (``--set ppo.learning_rate=1e-4``) merged into a config with the builder's validation."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from hybrid_trader.config.core import (
    ConfigError,
    T,
    _dataclass_of,
    _join,
    _refused_key_error,
    from_dict,
    to_dict,
)
from hybrid_trader.errors import did_you_mean


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
