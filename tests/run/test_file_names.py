"""The run's model file names are spelled once, in run/rundir.py: code elsewhere uses the constants."""

from __future__ import annotations

import ast
from pathlib import Path

from hybrid_trader.run import rundir

PACKAGE = Path(rundir.__file__).resolve().parents[1]
MODEL_FILES = {rundir.MODEL, rundir.VECNORMALIZE, rundir.BEST_MODEL, rundir.BEST_VECNORMALIZE}


def spelled_names(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Lines of string constants (docstrings aside) that are one of ``names``."""
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
            and n.value in names]


def test_model_file_names_when_spelled_outside_run_are_refused():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line} spells {name!r}"
           for path in sorted(PACKAGE.rglob("*.py")) if path.parent.name != "run"
           for line, name in spelled_names(path.read_text(encoding="utf-8"), MODEL_FILES)]
    assert bad == [], "use the constants of hybrid_trader.run.rundir (MODEL, VECNORMALIZE, ...)"


def test_spelled_names_when_a_path_is_built_from_a_literal_are_found():
    source = '"""model.zip is the final model."""\nimport x\nif (run / "model.zip").exists():\n    pass\n'
    assert spelled_names(source, MODEL_FILES) == [(3, "model.zip")]
    assert spelled_names(source.replace('"model.zip"', "MODEL"), MODEL_FILES) == []
