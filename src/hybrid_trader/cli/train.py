"""``hybrid-trader train``: train a phase 1, 2 or 3 agent with MaskablePPO."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hybrid_trader.errors import UserError


def add_data_options(p: argparse.ArgumentParser) -> None:
    """The data options shared with ``data check``."""
    p.add_argument("--data", metavar="FILE", help="bars file (CSV or Parquet); default: the built-in synthetic market")
    p.add_argument("--market", help="contract root symbol: NQ, MNQ, ES, MES, YM, MYM, RTY, M2K (default: from the file name)")
    p.add_argument("--tz", help="time zone of naive timestamps (default America/New_York)")
    p.add_argument("--time-shift", type=float, metavar="HOURS",
                   help="hours added to every timestamp, for vendors whose clock is off (ES sample file: -5)")
    p.add_argument("--repair", action="store_true", default=None, help="repair fixable data errors (each reported)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train an agent (MaskablePPO) on bars",
        description="Train phase 1 (entries), 2 (position management, from a phase 1 run) or 3 (hybrid with the "
        "LLM advisor, from a phase 2 run). Writes a run directory with the model, normalisation, checkpoints, "
        "TensorBoard events and progress.jsonl. Ctrl-C saves a checkpoint; --resume continues it.",
    )
    p.add_argument("--phase", type=int, choices=(1, 2, 3), default=None, help="training phase (default 1, or the config's)")
    add_data_options(p)
    p.add_argument("--config", metavar="FILE", help="YAML configuration (see docs/CONFIG.md); CLI options override it")
    p.add_argument("--out", metavar="RUN_DIR", help="run directory (default runs/p<phase>-<market>-<data>-s<seed>-<time>)")
    p.add_argument("--timesteps", type=int, help="environment steps to train (ppo.total_timesteps)")
    p.add_argument("--n-envs", type=int, help="parallel environments (ppo.n_envs, default 4)")
    p.add_argument("--vec-env", choices=("dummy", "subproc"),
                   help="run the environments in the main process (dummy, default: fastest here) or one subprocess each")
    p.add_argument("--seed", type=int, help="seed (ppo.seed)")
    p.add_argument("--init", metavar="RUN_DIR", help="start from this earlier-phase run (required for phases 2 and 3)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest valid checkpoint (only --timesteps may change)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config value, e.g. --set ppo.learning_rate=1e-4 (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or messages")
    add_llm_options(p)
    p.set_defaults(func=run)


def add_llm_options(p: argparse.ArgumentParser) -> None:
    """Phase 3 options (the advisor); filled in by the phase 3 code when present."""
    p.add_argument("--llm", choices=("mock", "transformers", "openai", "llama_cpp"),
                   help="phase 3: LLM advisor back end (llm.backend)")


def resolve_config(args: argparse.Namespace, base: Any = None) -> Any:
    """Config file (else ``base``, else the defaults), then CLI options, then --set overrides; validated.

    Without --phase (and no env.phase in --config or --set) a new run is phase 1, as --help says.
    """
    from hybrid_trader.config import load_yaml_config, merge_overrides, parse_overrides, read_yaml
    from hybrid_trader.training.config import RunConfig

    config = load_yaml_config(args.config, RunConfig) if args.config else (base if base is not None else RunConfig())
    overrides: dict[str, Any] = {}
    sets = parse_overrides(getattr(args, "overrides", []) or [])
    if getattr(args, "phase", None) is not None:
        overrides["env.phase"] = args.phase
    elif base is None and "env.phase" not in sets and not _file_sets_phase(args.config, read_yaml):
        overrides["env.phase"] = 1
    if args.data is not None:
        overrides["data.path"] = str(args.data)
    if args.market is not None:
        overrides["data.market"] = args.market
        overrides["env.market"] = args.market
    if args.tz is not None:
        overrides["data.tz"] = args.tz
    if args.time_shift is not None:
        overrides["data.time_shift"] = args.time_shift
    if args.repair:
        overrides["data.repair"] = True
    if getattr(args, "timesteps", None) is not None:
        overrides["ppo.total_timesteps"] = args.timesteps
    if getattr(args, "n_envs", None) is not None:
        overrides["ppo.n_envs"] = args.n_envs
    if getattr(args, "vec_env", None) is not None:
        overrides["ppo.vec_env"] = args.vec_env
    if getattr(args, "seed", None) is not None:
        overrides["ppo.seed"] = args.seed
    if getattr(args, "llm", None) is not None:
        overrides["llm.backend"] = args.llm
    if getattr(args, "quiet", False):
        overrides["train.progress_bar"] = False
    overrides.update(sets)
    config = merge_overrides(config, overrides) if overrides else config
    config.validate()
    return config


def _file_sets_phase(path: str | None, read_yaml: Any) -> bool:
    if not path:
        return False
    data, _ = read_yaml(path)
    return isinstance(data, dict) and isinstance(data.get("env"), dict) and "phase" in data["env"]


def run(args: argparse.Namespace) -> int:
    # Training loads torch and SB3 (about 2 s): `hybrid-trader --help` registers this module and must not pay it.
    from hybrid_trader.evaluation.runner import validation_fn
    from hybrid_trader.training.runner import default_run_dir, load_run_config, train_run

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
        run_dir = Path(args.out) if args.out else default_run_dir(config)
        if not args.quiet:
            print(f"phase {phase}{'' if args.phase is not None else ' (no --phase given)'}: {_PHASES[phase]}",
                  flush=True)
    try:
        train_run(config, run_dir, init=Path(args.init) if args.init else None, resume=args.resume, quiet=args.quiet,
                  validation=validation_fn)
    except KeyboardInterrupt:
        return 130
    print(f"run directory: {run_dir}")
    print(f"next: hybrid-trader evaluate {run_dir}   |   hybrid-trader report {run_dir}   |   hybrid-trader diagnose {run_dir}")
    return 0


_PHASES = {1: "entries (HOLD/BUY/SELL)", 2: "position management, from a phase 1 run (--init)",
           3: "hybrid with the LLM advisor, from a phase 2 run (--init)"}


def _check_init(init: Path, phase: int) -> None:
    from hybrid_trader.training.runner import load_run_config

    if not init.is_dir():
        raise UserError(f"--init {init}: no such run directory")
    src_phase = load_run_config(init).env.phase
    if src_phase != phase - 1 and not (phase == src_phase):
        raise UserError(
            f"--init {init} is a phase {src_phase} run; phase {phase} starts from phase {phase - 1}",
            fix=f"pass a phase {phase - 1} run directory",
        )
