"""Benchmarks take typed arguments, built from the CLI flags."""

from __future__ import annotations

import pytest

from hybrid_trader.bench.args import EnvBenchArgs, LLMBenchArgs, TrainBenchArgs
from hybrid_trader.cli.main import build_parser
from hybrid_trader.config import ConfigError


def test_bench_flags_when_parsed_become_the_typed_arguments():
    from hybrid_trader.cli.bench import args_of

    ns = build_parser().parse_args(["bench", "train", "--phase", "3", "--llm", "openai", "--steps", "64"])
    args = args_of(TrainBenchArgs, ns)
    assert args == TrainBenchArgs(phase=3, llm="openai", steps=64)
    ns = build_parser().parse_args(["bench", "env"])
    assert args_of(EnvBenchArgs, ns) == EnvBenchArgs()


def test_bench_train_torch_threads_reach_the_timed_runs_config():
    from hybrid_trader.bench.train_bench import bench_config
    from hybrid_trader.cli.bench import args_of

    ns = build_parser().parse_args(["bench", "train", "--phase", "2", "--torch-threads", "2"])
    assert bench_config(args_of(TrainBenchArgs, ns)).ppo.torch_threads == 2
    assert bench_config(TrainBenchArgs()).ppo.torch_threads == 1  # the config's default when not given


@pytest.mark.parametrize("make", [lambda: EnvBenchArgs(steps=0), lambda: LLMBenchArgs(batch=0),
                                  lambda: TrainBenchArgs(llm="gpt"), lambda: TrainBenchArgs(repeats=0),
                                  lambda: TrainBenchArgs(torch_threads=0)])
def test_bench_arguments_when_out_of_range_are_config_errors(make):
    with pytest.raises(ConfigError):
        make()


def test_bench_env_when_run_with_typed_arguments_prints_json(capsys):
    import json

    from hybrid_trader.bench.env_bench import run

    assert run(EnvBenchArgs(steps=500)) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 500 and result["phase"] == 2 and result["env_steps_per_s"] > 0


def test_bench_llm_when_run_with_the_mock_answers_every_query(capsys):
    import json

    from hybrid_trader.bench.llm_bench import run

    assert run(LLMBenchArgs(llm_overrides={"backend": "mock"}, batch=4, queries=40, step_ms=0.0)) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["backend"] == "mock" and result["queries"] >= 40
