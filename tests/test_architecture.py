"""The package's layers: no import cycles, no upward imports, imports at module top.

Layers, lowest first (a module may import its own layer and those below), are read from the
layer table of docs/ARCHITECTURE.md, so the table a reader sees is the one enforced; every package
needs a row. Packages must not import each other both ways either (a package-level cycle), which
also orders packages of one layer (``finetune`` imports ``advise``; training never imports evaluation).

A project import inside a function must say why it waits, in a comment on its line or
just above its block of imports, naming the reason: what it loads or costs (``loads``,
``pulls in``, ``measured``, ``--help``, seconds), when it is needed (``only``), or an
ordering constraint (``must run before``, ``after``). Imports under ``if TYPE_CHECKING:``
and modules named in strings for ``importlib.import_module`` (lazy tables) count as
imports for the layer rules.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = "hybrid_trader"
LAYER_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
"""A row of the layer table: ``| 7 | `training`, `evaluation` | what they hold |``."""


def read_layers(text: str) -> dict[str, int]:
    """Package -> layer, from the rows of the ``## Layers`` table of docs/ARCHITECTURE.md."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    out: dict[str, int] = {}
    for line in section.splitlines():
        m = LAYER_ROW.match(line)
        if m:
            for name in re.findall(r"`(\w+)`", m.group(2)):
                assert name not in out, f"docs/ARCHITECTURE.md lists package {name!r} in two layers"
                out[name] = int(m.group(1))
    return out


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
FORBIDDEN = {("training", "evaluation")}
"""Same-layer pairs that must not import each other (importer, imported)."""


REASON = re.compile(r"(--help|\bloads?\b|pulls? in|measured|\d\s?s\b|\bonly\b|must run before|\bafter\b|"
                    r"start-?up|optional|import time|cycle)", re.IGNORECASE)
"""What a comment must name for an import inside a function: its cost, when it is needed, or an ordering."""
MODULE_STRING = re.compile(r"^(hybrid_trader(?:\.\w+)+)(?::\w+)?$")
"""A string naming a project module (``pkg.module`` or ``pkg.module:Class``), as lazy import tables hold them."""


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    in_function: bool
    commented: bool
    kind: str = "import"
    """``import``, ``type`` (under ``if TYPE_CHECKING:``: layers only, no cycle) or ``dynamic`` (a module string)."""


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


def _reason_for(lines: list[str], lineno: int, import_lines: set[int]) -> bool:
    """A named reason on the import's line, or in the comment just above the block of imports it belongs to."""
    n = lineno
    while True:
        here = lines[n - 1]
        if "#" in here and REASON.search(here.split("#", 1)[1]):
            return True
        above = lines[n - 2].strip() if n > 1 else ""
        if above.startswith("#"):
            k = n - 1  # a comment block: any of its lines may name the reason
            while k >= 1 and lines[k - 1].strip().startswith("#"):
                if REASON.search(lines[k - 1]):
                    return True
                k -= 1
            return False
        if n - 1 in import_lines:
            n -= 1  # the same block of imports: the reason above the first one covers it
            continue
        return False


def _module_strings(tree: ast.AST, known: dict[str, Path]) -> list[tuple[str, int]]:
    """Project modules named in string constants (or f-string prefixes) of a module: lazy import tables."""
    out = []
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value).rstrip(".")  # f"hybrid_trader.llm.{name}": at least the package
        m = MODULE_STRING.match(text) if text else None
        if m and _resolve(m.group(1), known):
            out.append((m.group(1), node.lineno))
    return out


@functools.cache
def edges() -> tuple[Edge, ...]:
    known = modules()
    out: list[Edge] = []
    for module, path in known.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
        import_lines = {line for n in imports for line in range(n.lineno, (n.end_lineno or n.lineno) + 1)}
        for node in imports:
            in_function = type_checking = False
            up: ast.AST = node
            while up in parents:
                up = parents[up]
                in_function |= isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
                type_checking |= isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test)
            commented = _reason_for(lines, node.lineno, import_lines)
            targets = {_resolve(n, known) for n in _imported_names(node, module, path.name == "__init__.py")
                       if n.startswith(PACKAGE)}
            kind = "type" if type_checking else "import"
            out += [Edge(module, t, node.lineno, in_function, commented, kind) for t in targets if t and t != module]
        for name, line in _module_strings(tree, known):
            target = _resolve(name, known)
            if target and target != module:
                out.append(Edge(module, target, line, True, True, "dynamic"))
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
    assert tops - set(LAYERS) - {"__init__"} == set(), "add the new package to the layer table of docs/ARCHITECTURE.md"


def test_layer_table_when_read_holds_every_layer_and_only_packages():
    assert LAYERS["errors"] == 0 and LAYERS["cli"] == max(LAYERS.values())
    assert {"hindsight", "finetune", "advise"} <= set(LAYERS)
    assert set(LAYERS) <= {layer(m)[0] for m in modules()}, "the layer table names a package that does not exist"


def test_layer_table_when_a_package_is_listed_twice_is_refused():
    text = "## Layers\n| layer | packages |\n|---|---|\n| 0 | `a`, `b` | x |\n| 1 | `b` | y |\n## Next\n"
    with pytest.raises(AssertionError, match="'b' in two layers"):
        read_layers(text)
    assert read_layers(text.replace("| 1 | `b` |", "| 1 | `c` |")) == {"a": 0, "b": 0, "c": 1}


def package_graph(found: tuple[Edge, ...]) -> dict[str, set[str]]:
    """Package -> the packages it imports at run time (type-only imports never run)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in found:
        a, b = layer(e.importer)[0], layer(e.imported)[0]
        if e.kind != "type" and a != b and "__init__" not in (a, b):
            graph[a].add(b)
    return graph


def test_packages_when_followed_form_no_cycle():
    assert cycles(package_graph(edges())) == [], "two packages import each other: move the shared piece below both"


def test_package_cycle_when_two_packages_import_each_other_is_found():
    pair = (Edge("hybrid_trader.advise.calibrate", "hybrid_trader.finetune.retrieval_pool", 1, False, False),
            Edge("hybrid_trader.finetune.retrieval_eval", "hybrid_trader.advise.calibrate", 1, False, False))
    assert cycles(package_graph(pair)) == [["advise", "finetune"]]
    assert cycles(package_graph(pair[:1])) == []


def test_imports_when_followed_form_no_cycle():
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges():
        # a package's __init__ re-exporting its own modules is not a cycle between layers; type-only imports
        # never run
        if e.kind != "type" and not e.imported.startswith(e.importer + "."):
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
    assert bad == [], ("move the import to the module top, or name why it must wait in a comment on its line or "
                       f"above its block of imports (matching {REASON.pattern})")


def test_layer_rules_when_imports_are_type_only_or_dynamic_are_seen():
    kinds = {e.kind for e in edges()}
    assert {"import", "type", "dynamic"} <= kinds
    dynamic = {(e.importer, e.imported) for e in edges() if e.kind == "dynamic"}
    assert ("hybrid_trader.llm.backends", "hybrid_trader.llm.backends.student_backend") in dynamic
    assert ("hybrid_trader.cli.main", "hybrid_trader.cli.advise") in dynamic


def test_reason_when_only_a_bare_or_unrelated_comment_is_refused():
    lines = ["def f():", "    import x  # noqa", "    # TODO", "    import y", "    # loads torch (~2 s)",
             "    import z", "    import w"]
    import_lines = {2, 4, 6, 7}
    assert not _reason_for(lines, 2, import_lines)
    assert not _reason_for(lines, 4, import_lines)
    assert _reason_for(lines, 6, import_lines) and _reason_for(lines, 7, import_lines)
