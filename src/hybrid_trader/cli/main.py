"""Entry point of the ``hybrid-trader`` console command.

Each command group lives in its own module under ``hybrid_trader.cli`` and exposes
``register(subparsers)``; the parser it adds sets ``func`` to a callable taking the
parsed arguments and returning an exit code. A :class:`~hybrid_trader.errors.UserError`
anywhere is printed as one message (no traceback) with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hybrid_trader import __version__
from hybrid_trader.errors import WRITE_ERRORS, UserError, os_error

# OpenMP threads that spin while waiting steal the CPU from the other threads of this
# process (training, the LLM worker); set before torch is imported. A command that trains
# imports torch with them spinning instead, for the update's second core (training/threads.py).
WAIT_POLICY_CHOSEN = os.environ.get("OMP_WAIT_POLICY")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

COMMAND_MODULES = [
    "hybrid_trader.cli.data",
    "hybrid_trader.cli.bench",
    "hybrid_trader.cli.llm",
    "hybrid_trader.cli.train",
    "hybrid_trader.cli.evaluate",
    "hybrid_trader.cli.demo",
    "hybrid_trader.cli.report",
    "hybrid_trader.cli.diagnose",
    "hybrid_trader.cli.advise",
    "hybrid_trader.cli.study",
    "hybrid_trader.cli.run",
    "hybrid_trader.cli.watch",
    "hybrid_trader.cli.nt_sim",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hybrid-trader",
        description="Hybrid RL + LLM futures day-trading agent: data, training, evaluation, reports.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def glob_hint(argv: Sequence[str], extras: Sequence[str]) -> str:
    """For argparse's "unrecognized arguments": when they are files, the hint that the shell expanded an unquoted
    pattern (``--data data/*.csv``), with the quoted pattern to type; "" otherwise."""
    files = [Path(e) for e in extras if not e.startswith("-")]
    if not files or not all(f.exists() for f in files):
        return ""
    argv = list(argv)
    start = argv.index(extras[0]) if extras[0] in argv else 0
    while start > 0 and not argv[start - 1].startswith("-") and Path(argv[start - 1]).exists():
        start -= 1  # the first file of the expansion, which the option before it took
    option = argv[start - 1] if start > 0 and argv[start - 1].startswith("-") else ""
    expanded = [Path(a) for a in argv[start:start + len(files) + 1] if Path(a).exists()]
    parents = {p.parent for p in expanded}
    suffixes = {"".join(p.suffixes) for p in expanded}
    pattern = f"{parents.pop() / '*'}{suffixes.pop() if len(suffixes) == 1 else ''}" if len(parents) == 1 else \
        "data/*.csv"
    return (f"\n  hint: {len(expanded)} files where one value goes: the shell expanded an unquoted pattern; quote "
            f"it so that the command gets it whole, e.g. {option + ' ' if option else ''}'{pattern}' "
            "(a folder works too)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}{glob_hint(argv, extras)}")
    if getattr(args, "trains", False):  # before torch is imported: the update's second core spins, not sleeps
        from hybrid_trader.training.threads import prepare_openmp  # only to train; must run before torch loads

        prepare_openmp(WAIT_POLICY_CHOSEN)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe fails here, inside the handlers below, not at interpreter exit
        return code
    except UserError as err:
        print(f"error: {err.render()}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # `... | head` closed the pipe: nothing more to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        if err.errno not in WRITE_ERRORS:
            raise
        fail = os_error(err)
        print(f"error: {fail.render()}", file=sys.stderr)
        return fail.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
