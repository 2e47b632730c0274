"""The YAML dialect of config files: YAML 1.2 scalars read and written by PyYAML.

``1e6`` and ``3e-4`` are floats (PyYAML's YAML 1.1 default reads them as strings) and only
``true``/``false`` are booleans (``yes``, ``no``, ``on``, ``off`` stay strings); the dumper
quotes every string the loader would read as another type.
"""

from __future__ import annotations

import re

import yaml

_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: ``1e6``/``3e-4`` are floats; only true/false are booleans."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string :class:`_Loader` would read as another type."""


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
