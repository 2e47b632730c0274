"""The executor's shape, measured so that it cannot regress (issue 33's targets).

- **The walk of a bar**: one call of ``Executor.on_bar`` traced (``sys.setprofile``), seen from ``live/executor.py``:
  the sequence of ``src/hybrid_trader`` files it goes through, where each call out of ``live/executor.py`` is one
  visit to the file it enters (what that file calls in turn is part of the visit, however deep) and each frame of
  ``live/executor.py`` (a return to it, or a call back into it from a visit) is a visit to it; consecutive visits to
  one file are one. Its *returns* are the visits to a file the walk had already left. A pipeline of stages in files
  of their own returns once per stage; every property of the executor read from a stage, every helper of the
  executor's file called between stages, is one more. At most 5 (on main before this: 38 on a decision bar).
- **The executor's attributes**: the names assigned as ``self.x = ...`` in ``Executor`` and its base classes of
  ``src/``: at most 15 (before: 38); its constructor takes at most 8 parameters (before: 17).
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

import hybrid_trader
from hybrid_trader.live import executor as executor_module
from hybrid_trader.live.executor import Executor, ExecutorOptions, split_dates
from hybrid_trader.live.feeds import ReplayFeed

SRC = str(Path(hybrid_trader.__file__).resolve().parent) + "/"
EXECUTOR_FILE = str(Path(executor_module.__file__).resolve())
MAX_RETURNS = 5
MAX_ATTRIBUTES = 15


def walk(call: Callable[[], object]) -> list[str]:
    """The files (relative to ``src/hybrid_trader``) ``call`` goes through, seen from the executor's file (see the
    module's docstring)."""
    seq: list[str] = []

    def visit(filename: str) -> None:
        name = filename[len(SRC):]
        if not seq or seq[-1] != name:
            seq.append(name)

    def src_caller(frame):  # the nearest calling frame of src/, or None
        f = frame.f_back
        while f is not None and not f.f_code.co_filename.startswith(SRC):
            f = f.f_back
        return f

    def profile(frame, event, arg) -> None:
        if event == "call":
            filename = frame.f_code.co_filename
            if filename == EXECUTOR_FILE:
                visit(filename)
            elif filename.startswith(SRC):
                caller = src_caller(frame)
                if caller is not None and caller.f_code.co_filename == EXECUTOR_FILE:
                    visit(filename)  # a call out of the executor's file: a visit to the file it enters
        elif event == "return":
            back = frame.f_back
            if back is not None and back.f_code.co_filename == EXECUTOR_FILE != frame.f_code.co_filename:
                visit(EXECUTOR_FILE)  # back in the executor's file

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return seq


def returns(seq: list[str]) -> int:
    """How many times ``seq`` goes back to a file it had left."""
    seen: set[str] = set()
    n = 0
    for name in seq:
        n += name in seen
        seen.add(name)
    return n


def test_the_walk_counts_returns_to_files_already_left():
    assert returns(["live/executor.py", "a.py", "live/executor.py", "b.py", "a.py", "live/executor.py"]) == 3
    assert returns(["live/executor.py", "a.py"]) == 0


def test_a_bar_returns_to_a_file_it_left_at_most_5_times(tiny, tmp_path):
    """Every bar of the tiny run's test days after its first decision, traced: decision bars (fills, account rows,
    the day's end) and the bars between windows."""
    run, csv, _ = tiny
    feed = ReplayFeed(csv)
    ex = Executor(run, tmp_path / "walk.sqlite", ExecutorOptions(trade_dates=split_dates(run, "test"),
                                                                  market=feed.bars.market,
                                                                  bar_minutes=feed.bars.bar_minutes))
    worst = {"decision": (-1, []), "other": (-1, [])}
    traced = {"decision": 0, "other": 0}
    try:
        for bar in feed:
            decisions = ex.summary.decisions
            if decisions == 0:
                ex.on_bar(bar)  # warming up (the features, the first days): not traced
                continue
            seq = walk(lambda: ex.on_bar(bar))  # noqa: B023 (called at once)
            kind = "decision" if ex.summary.decisions > decisions else "other"
            traced[kind] += 1
            if returns(seq) > worst[kind][0]:
                worst[kind] = (returns(seq), seq)
            if min(traced.values()) >= 50:
                break
    finally:
        ex.close()
    assert min(traced.values()) >= 10, traced
    for kind, (n, seq) in worst.items():
        assert n <= MAX_RETURNS, f"a {kind} bar returns {n} times to files it left: {' > '.join(seq)}"
    assert worst["decision"][1][:2] == ["live/executor.py", "live/feed_position.py"]


def self_attributes(cls: type) -> set[str]:
    """The names assigned as ``self.x = ...`` (also annotated, augmented, or in a tuple) in ``cls``'s own source."""
    tree = ast.parse(inspect.getsource(cls).lstrip())
    names: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return names


def test_the_executor_has_at_most_15_attributes_and_8_parameters():
    classes = [c for c in Executor.__mro__ if c.__module__.startswith("hybrid_trader.")]
    attributes = set().union(*(self_attributes(c) for c in classes))
    assert attributes, "no attribute found: the count is broken"
    assert len(attributes) <= MAX_ATTRIBUTES, sorted(attributes)
    parameters = [p for p in inspect.signature(Executor.__init__).parameters if p != "self"]
    assert len(parameters) <= 8, parameters
