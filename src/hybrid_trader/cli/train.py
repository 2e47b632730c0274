"""``hybrid-trader train``: train a phase 1, 2 or 3 agent with MaskablePPO."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from hybrid_trader.cli.options import add_no_calibrate, add_options, overrides_from
from hybrid_trader.errors import UserError

DATA_FLAGS = ("--data", "--market", "--tz", "--time-shift", "--repair")
"""The data rows of the options table, shared with ``data check``."""
TRAIN_FLAGS = (*DATA_FLAGS, "--phase", "--timesteps", "--n-envs", "--vec-env", "--seed", "--llm", "--teacher",
               "--quiet")
"""Every table row ``train`` takes; :func:`resolve_config` maps them to config keys."""


def add_data_options(p: argparse.ArgumentParser) -> None:
    """The data options shared with ``data check``."""
    add_options(p, DATA_FLAGS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an agent (MaskablePPO) on bars",
        description="Train phase 1 (entries), 2 (position management, from a phase 1 run) or 3 (hybrid with the "
        "LLM advisor, from a phase 2 run). Writes a run directory with the model, normalisation, checkpoints, "
        "TensorBoard events and progress.jsonl. Ctrl-C saves a checkpoint; --resume continues it.",
    )
    add_options(p, ("--phase",))
    add_data_options(p)
    p.add_argument("--config", metavar="FILE", help="YAML configuration (see docs/CONFIG.md); CLI options override it")
    p.add_argument("--out", metavar="RUN_DIR",
                   help="run directory (default runs/p<phase>-<market>-<data>-s<seed>-<time>)")
    add_options(p, ("--timesteps", "--n-envs", "--vec-env", "--seed"))
    p.add_argument("--init", metavar="RUN_DIR", help="start from this earlier-phase run (required for phases 2 and 3)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest valid checkpoint (only --timesteps may change)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config value, e.g. --set ppo.learning_rate=1e-4 (repeatable)")
    add_options(p, ("--quiet", "--llm", "--teacher"))
    add_no_calibrate(p)
    p.set_defaults(func=run, trains=True)  # main() prepares OpenMP for the update (training/threads.py)


def resolve_config(args: argparse.Namespace, base: Any = None) -> Any:
    """Config file (else ``base``, else the defaults), then CLI options, then --set overrides; validated.

    Without --phase (and no env.phase in --config or --set) a new run is phase 1, as --help says.
    """
    # the config builder and RunConfig load the llm and env configs: `hybrid-trader --help` must not pay them
    from hybrid_trader.config import load_yaml_config, merge_overrides, parse_overrides, read_yaml
    from hybrid_trader.run.config import RunConfig  # same reason as above

    config = load_yaml_config(args.config, RunConfig) if args.config else (base if base is not None else RunConfig())
    sets = parse_overrides(getattr(args, "overrides", []) or [])
    overrides = overrides_from(args, TRAIN_FLAGS)
    if ("env.phase" not in overrides and base is None and "env.phase" not in sets
            and not _file_sets_phase(args.config, read_yaml)):
        overrides["env.phase"] = 1
    overrides.update(sets)
    config = merge_overrides(config, overrides) if overrides else config
    config.validate()
    return config


def _file_sets_phase(path: str | None, read_yaml: Any) -> bool:
    return _file_sets(path, read_yaml, "env", "phase")


def _file_sets(path: str | None, read_yaml: Any, section: str, key: str | None = None) -> bool:
    """Whether the YAML config file at ``path`` has ``section`` (and in it ``key``)."""
    if not path:
        return False
    data, _ = read_yaml(path)
    if not isinstance(data, dict) or section not in data:
        return False
    return key is None or (isinstance(data[section], dict) and key in data[section])


def run(args: argparse.Namespace) -> int:
    # Training loads torch and SB3 (about 2 s): `hybrid-trader --help` registers this module and must not pay it.
    from hybrid_trader.advise.calibrate import advice_calibration  # same reason (loads the env and the LLM layer)
    from hybrid_trader.evaluation.runner import validation_fn
    from hybrid_trader.training.runner import TrainHooks, default_run_dir, load_run_config, train_run  # same reason

    if args.resume:
        if not args.out:
            raise UserError("--resume needs --out RUN_DIR (the run to continue)")
        if args.init:
            raise UserError("--resume continues a run from its checkpoint; --init only starts a new run",
                            fix="drop --init")
        run_dir = Path(args.out)
        config = resolve_config(args, base=load_run_config(run_dir))
    else:
        config = resolve_config(args)
        phase = config.env.phase
        if phase in (2, 3) and not args.init:
            raise UserError(
                f"phase {phase} starts from a phase {phase - 1} run",
                fix=f"train phase {phase - 1} first and pass its run directory with --init RUN_DIR",
            )
        if args.init:
            _check_init(Path(args.init), phase)
            config = data_from_init(args, config, Path(args.init))
        run_dir = Path(args.out) if args.out else default_run_dir(config)
        if not args.quiet:
            print(f"phase {phase}{'' if args.phase is not None else ' (no --phase given)'}: {_PHASES[phase]}",
                  flush=True)
    try:
        train_run(
            config, run_dir, init=Path(args.init) if args.init else None, resume=args.resume, quiet=args.quiet,
            hooks=TrainHooks(validation=validation_fn, calibrate=partial(advice_calibration, calibrate=args.calibrate)))
    except KeyboardInterrupt:
        return 130
    print(f"run directory: {run_dir}")
    print(f"next: hybrid-trader evaluate {run_dir}   |   hybrid-trader report {run_dir}   |   "
          f"hybrid-trader diagnose {run_dir}")
    return 0


_PHASES = {1: "entries (HOLD/BUY/SELL)", 2: "position management, from a phase 1 run (--init)",
           3: "hybrid with the LLM advisor, from a phase 2 run (--init)"}


def data_from_init(args: argparse.Namespace, config: Any, init: Path) -> Any:
    """``config`` with the ``--init`` run's data and split, unless the command names data of its own.

    A phase 2 or 3 run continues on the bars its earlier phase (and its normaliser, and a
    student distilled there) saw: without this, ``train --phase 3 --init runs/p2`` trained
    on the synthetic market. ``--data``, ``--market``, ``--tz``, ``--time-shift``, ``--repair``,
    a ``data`` section in ``--config`` or ``--set data.*`` keep theirs. A command that changes
    only the split (``--set split.*``, a ``split`` section in ``--config``) keeps the init run's
    bars and trains on the new split: ``--set split.*`` is applied to the init run's split, a
    file's ``split`` section replaces it. A line says which.
    """
    from hybrid_trader.config import merge_overrides, parse_overrides, read_yaml  # the config reader: not for --help
    from hybrid_trader.training.runner import load_run_config  # torch and SB3: not for --help

    if any(getattr(args, name, None) is not None for name in ("data", "market", "tz", "time_shift", "repair")):
        return config
    sets = parse_overrides(getattr(args, "overrides", []) or [])
    if any(key.split(".")[0] == "data" for key in sets) or _file_sets(args.config, read_yaml, "data"):
        return config
    split_sets = {key: value for key, value in sets.items() if key.split(".")[0] == "split"}
    src = load_run_config(init)
    if split_sets or _file_sets(args.config, read_yaml, "split"):
        split = config.split
        if not _file_sets(args.config, read_yaml, "split"):
            split = merge_overrides(src, split_sets).split  # the init run's split with the --set keys changed
        if src.data == config.data and split == config.split:
            return config
        if not getattr(args, "quiet", False):
            print(f"data from --init {init}: {src.data.path or 'the built-in synthetic market'}, with the new "
                  f"split ({_split_text(split)})", flush=True)
        config.data, config.split = src.data, split
        config.validate()
        return config
    if src.data == config.data and src.split == config.split:
        return config
    if not getattr(args, "quiet", False):
        print(f"data and split from --init {init}: {src.data.path or 'the built-in synthetic market'}", flush=True)
    config.data, config.split = src.data, src.split
    config.validate()
    return config


def _split_text(split: Any) -> str:
    """The split in words: ``folds 3, fold 0, shares 0.7/0.15/0.15``."""
    if split.unit == "month":
        what = f"{split.train_months}+{split.val_months}+{split.test_months} months per fold"
    else:
        what = f"shares {split.train:g}/{split.val:g}/{split.test:g}"
    folds = f"folds {split.folds}, fold {split.fold}{', anchored' if split.anchored else ''}, " if split.folds else ""
    return folds + what


def _check_init(init: Path, phase: int) -> None:
    from hybrid_trader.training.runner import load_run_config  # torch and SB3: not for --help

    if not init.is_dir():
        raise UserError(f"--init {init}: no such run directory")
    src_phase = load_run_config(init).env.phase
    if src_phase != phase - 1 and not (phase == src_phase):
        raise UserError(
            f"--init {init} is a phase {src_phase} run; phase {phase} starts from phase {phase - 1}",
            fix=f"pass a phase {phase - 1} run directory",
        )
