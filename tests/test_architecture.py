"""The package's layers: no import cycles, no upward imports, imports at module top.

Layers, lowest first (a module may import its own layer and those below):

    0  errors, markets, calendar, actions, account_state, config (the generic builder)
    1  data            2  features        3  env             4  llm
    5  agent           6  run             7  training, evaluation (training never imports evaluation)
    8  bench, advise, finetune   9  cli

A project import inside a function must say why on its line or the line above (a
comment naming the measured reason, e.g. the start-up time it saves).
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "hybrid_trader"
LAYERS = {
    "errors": 0, "markets": 0, "calendar": 0, "actions": 0, "account_state": 0, "config": 0,
    "data": 1, "features": 2, "env": 3, "llm": 4, "agent": 5, "run": 6,
    "training": 7, "evaluation": 7, "bench": 8, "advise": 8, "finetune": 8, "cli": 9,
}
FORBIDDEN = {("training", "evaluation")}
"""Same-layer pairs that must not import each other (importer, imported)."""


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    in_function: bool
    commented: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        root = ".".join(base + ([node.module] if node.module else []))
    else:
        root = node.module or ""
    return [root] + [f"{root}.{a.name}" for a in node.names]


@functools.cache
def edges() -> tuple[Edge, ...]:
    known = modules()
    out: list[Edge] = []
    for module, path in known.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            in_function = type_checking = False
            up = node
            while up in parents:
                up = parents[up]
                in_function |= isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
                type_checking |= isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test)
            if type_checking:
                continue
            here, above = lines[node.lineno - 1], lines[node.lineno - 2] if node.lineno > 1 else ""
            commented = "#" in here or above.strip().startswith("#")
            targets = {_resolve(n, known) for n in _imported_names(node, module, path.name == "__init__.py")
                       if n.startswith(PACKAGE)}
            out += [Edge(module, t, node.lineno, in_function, commented) for t in targets if t and t != module]
    return tuple(out)


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return top, LAYERS.get(top, 0 if top == "__init__" else 99)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_when_listed_has_a_layer():
    tops = {layer(m)[0] for m in modules()}
    assert tops - set(LAYERS) - {"__init__"} == set(), "add the new package to LAYERS (and to the docstring above)"


def test_imports_when_followed_form_no_cycle():
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges():
        # a package's __init__ re-exporting its own modules is not a cycle between layers
        if not e.imported.startswith(e.importer + "."):
            graph[e.importer].add(e.imported)
    assert cycles(graph) == []


def test_imports_when_checked_by_layer_never_go_upward():
    bad = []
    for e in edges():
        (a, la), (b, lb) = layer(e.importer), layer(e.imported)
        if lb > la or (a, b) in FORBIDDEN:
            bad.append(f"{e.importer}:{e.line} imports {e.imported} ({a} -> {b})")
    assert bad == []


@pytest.mark.parametrize("module", sorted(modules()))
def test_project_imports_when_inside_a_function_say_why(module):
    bad = [f"{e.importer}:{e.line} imports {e.imported}" for e in edges()
           if e.importer == module and e.in_function and not e.commented]
    assert bad == [], "move the import to the module top, or say on its line why it must wait"
