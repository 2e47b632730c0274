"""Readable signatures and names: no function in src/ takes more than 8 parameters, and no class or public
function name is defined twice (issue 33, items 6 and 7).

Parameters are counted as a caller sees them: positional, keyword-only, ``*args`` and ``**kwargs``, without
``self``/``cls``. A longer list groups into a request dataclass that names its concept (``EvaluationRequest``,
``CollectRequest``, ``TrainHooks``, ...). A name is defined twice when two modules (or two classes of one module)
define it at their top level; ``@overload`` stubs of one function count once.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_PARAMETERS = 8

OVER_ALLOWED: dict[str, str] = {}
"""Functions allowed over :data:`MAX_PARAMETERS` (file:qualified name -> why): none."""

TWICE_ALLOWED = {
    "register": "a protocol: every cli/ command module registers its subcommand (cli/main.py reads them all)",
    "run": "a protocol: every cli/ command module runs its subcommand, every bench/ module its benchmark",
}
"""Names defined in several modules on purpose (one implementation each of a protocol), with the reason."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(SRC).as_posix(), ast.parse(p.read_text(encoding="utf-8"), filename=str(p)))
            for p in sorted(SRC.rglob("*.py"))]


def count_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's parameters as a caller passes them: positional (``self``/``cls`` left out), keyword-only,
    ``*args`` and ``**kwargs``."""
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def long_signatures(modules: list[tuple[str, ast.Module]]) -> list[tuple[str, int, str, int]]:
    """``(file, line, qualified name, parameters)`` of every function over :data:`MAX_PARAMETERS`."""
    out = []

    def walk(file: str, node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = count_parameters(child)
                if n > MAX_PARAMETERS:
                    out.append((file, child.lineno, prefix + child.name, n))
                walk(file, child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(file, child, prefix + child.name + ".")
            else:
                walk(file, child, prefix)

    for file, tree in modules:
        walk(file, tree, "")
    return out


def _is_overload(fn: ast.AST) -> bool:
    return any(getattr(d, "id", getattr(d, "attr", None)) == "overload" for d in getattr(fn, "decorator_list", []))


def defined_twice(modules: list[tuple[str, ast.Module]]) -> dict[str, list[str]]:
    """Class and public function names defined at the top level of more than one place: name -> ``file:line``s."""
    where: dict[str, list[str]] = defaultdict(list)
    for file, tree in modules:
        seen: set[str] = set()
        for node in tree.body:
            public_fn = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_")
            if not (isinstance(node, ast.ClassDef) or public_fn) or _is_overload(node):
                continue
            if isinstance(node, ast.ClassDef) or node.name not in seen:
                where[node.name].append(f"{file}:{node.lineno}")
            seen.add(node.name)
    return {name: places for name, places in where.items() if len(places) > 1}


def test_no_function_takes_more_than_eight_parameters():
    found = long_signatures(_modules())
    over = [f"src/{file}:{line} {name} {n}" for file, line, name, n in found
            if f"{file}:{name}" not in OVER_ALLOWED]
    assert not over, (f"functions over {MAX_PARAMETERS} parameters (file:line name count):\n  " + "\n  ".join(over)
                      + "\nfix: group the parameters that travel together into a request dataclass that names their "
                        "concept (frozen, one docstring per field; e.g. evaluation.evaluate.EvaluationRequest)")
    allowed = {f"{file}:{name}" for file, _, name, _ in found}
    assert set(OVER_ALLOWED) <= allowed, f"allowed but no longer over: {sorted(set(OVER_ALLOWED) - allowed)}: " \
                                         "remove them from OVER_ALLOWED"


def test_no_class_or_public_function_name_is_defined_twice():
    twice = {name: places for name, places in defined_twice(_modules()).items() if name not in TWICE_ALLOWED}
    assert not twice, ("names defined in more than one place (a reader cannot tell which is meant):\n  "
                       + "\n  ".join(f"{name}: {', '.join(places)}" for name, places in sorted(twice.items()))
                       + "\nfix: rename each to say what it holds or does (or merge them into one)")


@pytest.mark.parametrize(("source", "expected"), [
    ("def f(a, b, c, d, e, f, g, h): pass", 8),
    ("class C:\n    def m(self, a, *args, b, **kw): pass", 4),
    ("def f(a, /, b, *, c=1): pass", 3),
])
def test_parameters_are_counted_as_a_caller_passes_them(source, expected):
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef))
    assert count_parameters(fn) == expected


def test_the_walks_name_the_long_function_and_the_doubled_name_when_src_has_them():
    long = ast.parse("class A:\n    def m(self, a, b, c, d, e, f, g, h, i): pass\n"
                     "from typing import overload\n@overload\ndef g(x: int) -> int: ...\n"
                     "@overload\ndef g(x: str) -> str: ...\ndef g(x): return x\n")
    other = ast.parse("class A: pass\ndef g(): pass\ndef _private(): pass\n")
    assert long_signatures([("x.py", long)]) == [("x.py", 2, "A.m", 9)]
    assert defined_twice([("x.py", long), ("y.py", other)]) == {"A": ["x.py:1", "y.py:1"], "g": ["x.py:8", "y.py:2"]}
    assert defined_twice([("x.py", long)]) == {}
