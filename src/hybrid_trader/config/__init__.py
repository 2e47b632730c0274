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

from hybrid_trader.config.core import (
    ConfigError,
    check,
    from_dict,
    secret_hint,
    to_dict,
    type_name,
)
from hybrid_trader.config.docs import FieldInfo, describe_fields, field_docs, markdown_table
from hybrid_trader.config.overrides import merge_overrides
from hybrid_trader.config.yaml_io import load_yaml_config, parse_overrides, read_yaml, save_config

__all__ = [
    "ConfigError",
    "FieldInfo",
    "check",
    "describe_fields",
    "field_docs",
    "from_dict",
    "load_yaml_config",
    "markdown_table",
    "merge_overrides",
    "parse_overrides",
    "read_yaml",
    "secret_hint",
    "save_config",
    "to_dict",
    "type_name",
]
