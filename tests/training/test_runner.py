"""The training runner: run directory, interruption and resume, phase transfer, config errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from hybrid_trader.cli.main import main
from hybrid_trader.config import load_yaml_config, merge_overrides
from hybrid_trader.errors import UserError
from hybrid_trader.evaluation.runner import validation_fn
from hybrid_trader.run.config import RunConfig
from hybrid_trader.run.market import load_market
from hybrid_trader.training.runner import TrainHooks, train_run

TINY = {"data.synthetic_days": 12, "ppo.n_steps": 128, "ppo.batch_size": 128, "ppo.n_envs": 2,
        "ppo.n_epochs": 2, "train.validate_every": 256, "train.validation_sessions": 2,
        "train.progress_bar": False, "train.checkpoint_every": 256}


def cfg(phase: int = 1, steps: int = 512, **extra) -> RunConfig:
    return merge_overrides(RunConfig(), {**TINY, "env.phase": phase, "ppo.total_timesteps": steps, **extra})


@pytest.fixture(scope="module")
def market():
    c = cfg()
    return load_market(c.data, c.split)


class InterruptAt(BaseCallback):
    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.steps:
            raise KeyboardInterrupt
        return True


def test_run_directory_holds_everything_when_training_finishes(tmp_path, market):
    status = train_run(cfg(), tmp_path / "run", market=market, quiet=True, hooks=TrainHooks(validation=validation_fn))
    run = tmp_path / "run"
    for name in ("config.yaml", "split.json", "model.zip", "vecnormalize.pkl", "progress.jsonl", "status.json",
                 "validation.jsonl"):
        assert (run / name).exists(), name
    assert any((run / "tb").iterdir())
    assert status["state"] == "finished" and status["total_timesteps"] >= 512 and status["steps_per_second"] > 0
    assert load_yaml_config(run / "config.yaml", RunConfig) == cfg()
    rows = [json.loads(r) for r in (run / "progress.jsonl").read_text().splitlines()]
    keys = set().union(*rows)
    assert {"train/approx_kl", "train/clip_fraction", "train/explained_variance", "rollout/ep_len_mean",
            "trading/trades_per_episode", "trading/net_pnl_per_episode", "time/fps"} <= keys
    val = json.loads((run / "validation.jsonl").read_text().splitlines()[0])
    assert {"train/net_pnl_per_day", "val/net_pnl_per_day"} <= set(val)
    split = json.loads((run / "split.json").read_text())
    assert split["train"][1] <= split["val"][0] and split["val"][1] <= split["test"][0]


@pytest.mark.parametrize("reward", ["prop", "sharpe"])
def test_a_tiny_run_trains_with_each_reward(tmp_path, market, reward):
    over = {"env.reward": reward, "train.validate_every": 0, "train.checkpoint_every": 1_000_000}
    status = train_run(cfg(steps=256, **over), tmp_path / "run", market=market, quiet=True)
    assert status["state"] == "finished" and status["total_timesteps"] >= 256
    assert load_yaml_config(tmp_path / "run" / "config.yaml", RunConfig).env.reward == reward


@pytest.mark.parametrize("validate", [False, True])
def test_distribution_checks_follow_the_config_when_training(tmp_path, market, validate):
    import torch

    before = torch.distributions.Distribution._validate_args
    try:
        train_run(cfg(steps=256, **{"ppo.validate_distributions": validate, "train.validate_every": 0}),
                  tmp_path / "run", market=market, quiet=True)
        assert torch.distributions.Distribution._validate_args is validate
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


def test_a_budget_between_rollouts_is_said_and_the_bar_ends_at_the_steps_trained(tmp_path, market, capsys,
                                                                                 monkeypatch):
    from hybrid_trader.training import callbacks

    bars = []

    class Bar(callbacks.RolloutProgressBar):
        def _on_training_end(self) -> None:
            bars.append((self.pbar.total, self.pbar.n))
            super()._on_training_end()

    monkeypatch.setattr("hybrid_trader.training.runner.RolloutProgressBar", Bar)
    status = train_run(cfg(steps=300, **{"train.progress_bar": True, "train.validate_every": 0}), tmp_path / "run",
                       market=market)
    assert status["total_timesteps"] == 512 == cfg().ppo.whole_rollouts(300)  # rollouts of 128 x 2 environments
    assert bars == [(512, 512)]
    assert "note: 512 steps will be trained for the 300 asked: whole rollouts of 128 steps x 2 environments" \
        in capsys.readouterr().out
    assert [cfg().ppo.whole_rollouts(n) for n in (0, 1, 256, 257)] == [0, 256, 256, 512]


def test_resume_continues_steps_and_optimizer_when_interrupted(tmp_path, market):
    from sb3_contrib import MaskablePPO

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg(steps=1024), run, market=market, quiet=True, hooks=TrainHooks(extra_callbacks=[InterruptAt(512)]))
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "interrupted" and status["total_timesteps"] >= 512
    ckpt = run / status["last_checkpoint"]
    assert ckpt.exists()
    saved = MaskablePPO.load(ckpt)
    assert saved.num_timesteps == status["total_timesteps"]
    assert saved.policy.optimizer.state_dict()["state"], "the optimizer's moments are in the checkpoint"

    status = train_run(cfg(steps=1024), run, resume=True, market=market, quiet=True)
    assert status["state"] == "finished" and status["total_timesteps"] >= 1024
    steps = [json.loads(r).get("time/total_timesteps") for r in (run / "progress.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s is not None]
    assert steps == sorted(steps) and steps[-1] >= 1024


class NextDraws(BaseCallback):
    """The torch and numpy generators' next values when learning starts (put back: nothing consumed)."""

    def __init__(self, log: list) -> None:
        super().__init__()
        self.log = log

    def _on_training_start(self) -> None:
        state_t, state_n = torch.get_rng_state(), np.random.get_state()
        self.log.append((float(torch.rand(1)), float(np.random.rand())))
        torch.set_rng_state(state_t)
        np.random.set_state(state_n)

    def _on_step(self) -> bool:
        return True


def test_a_resumed_run_draws_on_rather_than_replaying_step_0s_draws_and_resumes_alike_twice(tmp_path, market):
    from sb3_contrib import MaskablePPO

    draws: list = []
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg(steps=1024), run, market=market, quiet=True,
                  hooks=TrainHooks(extra_callbacks=[NextDraws(draws), InterruptAt(512)]))
    again = tmp_path / "again"
    shutil.copytree(run, again)
    for folder in (run, again):
        train_run(cfg(steps=1024), folder, resume=True, market=market, quiet=True,
                  hooks=TrainHooks(extra_callbacks=[NextDraws(draws)]))
    assert draws[1] != draws[0], "loading the checkpoint seeded the streams with the run's seed: step 0's draws"
    assert draws[1] == draws[2]
    a, b = (MaskablePPO.load(f / "model.zip").policy.state_dict() for f in (run, again))
    assert all(torch.equal(a[k], b[k]) for k in a), "two resumes from one checkpoint train alike"


def test_phase2_keeps_phase1_actions_and_starts_new_ones_neutral(tmp_path, market):
    from sb3_contrib import MaskablePPO

    train_run(cfg(1), tmp_path / "p1", market=market, quiet=True)
    train_run(cfg(2, steps=1, **{"ppo.learning_rate": 1e-12}), tmp_path / "p2", init=tmp_path / "p1",
              market=market, quiet=True)
    p1 = MaskablePPO.load(tmp_path / "p1" / "model.zip").policy
    p2 = MaskablePPO.load(tmp_path / "p2" / "checkpoints" / sorted(
        (tmp_path / "p2" / "checkpoints").glob("*.zip"))[0].name).policy
    w1, w2 = p1.action_net.weight.detach().numpy(), p2.action_net.weight.detach().numpy()
    np.testing.assert_allclose(w2[:3], w1[:3], atol=1e-6)
    np.testing.assert_allclose(w2[3:], 0.0, atol=1e-6)
    b1, b2 = p1.action_net.bias.detach().numpy(), p2.action_net.bias.detach().numpy()
    np.testing.assert_allclose(b2[3:], b1.mean(), atol=1e-6)
    status = json.loads((tmp_path / "p2" / "status.json").read_text())
    assert any("new ones neutral" in n for n in status["init_notes"])


def test_freeze_schedule_longer_than_run_is_a_config_error_when_loaded(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ppo:\n  total_timesteps: 81920\ntrain:\n  freeze_body_steps: 100000\n")
    with pytest.raises(UserError, match="never be trained"):
        load_yaml_config(path, RunConfig)
    with pytest.raises(UserError, match="never be trained"):
        merge_overrides(RunConfig(), {"train.freeze_body_steps": 300_000})


def test_unknown_config_key_suggests_the_right_one_when_misspelt(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("ppo:\n  learning_rat: 0.001\n")
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "learning_rat" in err and "Did you mean 'learning_rate'" in err and "Traceback" not in err


def test_phase2_without_init_is_refused_with_the_fix(tmp_path, capsys):
    assert main(["train", "--phase", "2", "--out", str(tmp_path / "r")]) == 2
    assert "--init" in capsys.readouterr().err


def test_walk_forward_fold_sets_the_split_when_configured(market):
    from hybrid_trader.run.market import make_split

    folds = [make_split(60, cfg(**{"split.folds": 3, "split.fold": k}).split) for k in range(3)]
    assert folds[-1].test.stop == 60
    for a, b in zip(folds, folds[1:]):
        assert a.test.stop == b.test.start  # test windows tile time
    for f in folds:
        assert f.train.stop <= f.val.start and f.val.stop <= f.test.start


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, market):
    run = tmp_path_factory.mktemp("finished") / "run"
    train_run(cfg(), run, market=market, quiet=True)
    return run


def test_evaluate_json_last_line_holds_everything_when_asked(finished_run, capsys):
    assert main(["evaluate", str(finished_run), "--seeds", "2", "--json"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    data = json.loads(last)
    assert data["split"] == "test"
    assert {"agent", "flat", "random", "momentum"} <= set(data["metrics"])
    assert "Net PnL [$]" in data["metrics"]["agent"] and "PSR [%]" in data["metrics"]["agent"]
    assert set(data["random_seeds"]["Net PnL [$]"]) >= {"mean", "std"}


def test_evaluate_then_report_and_diagnose_from_the_command_line(finished_run, capsys):
    assert main(["evaluate", str(finished_run), "--seeds", "1"]) == 0
    assert main(["report", str(finished_run)]) == 0
    assert (finished_run / "eval" / "test" / "report.html").exists()
    assert main(["diagnose", str(finished_run)]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_evaluate_missing_run_is_a_clear_error(tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err


class SignalAt(BaseCallback):
    """Sends this process a real SIGINT once training reaches ``steps``."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.sent_at: int | None = None

    def _on_step(self) -> bool:
        if self.sent_at is None and self.num_timesteps >= self.steps:
            import os
            import signal

            self.sent_at = self.num_timesteps
            os.kill(os.getpid(), signal.SIGINT)
        return True


def test_sigint_when_training_stops_at_next_step_with_checkpoint_and_restores_handler(tmp_path, market):
    import signal

    before = signal.getsignal(signal.SIGINT)
    sender = SignalAt(200)
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg(steps=100_000), tmp_path / "run", market=market, quiet=True,
                  hooks=TrainHooks(extra_callbacks=[sender]))
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "interrupted"
    # the signal only set a flag: training ended within one vectorised step of it (2 environments)
    assert sender.sent_at <= status["total_timesteps"] <= sender.sent_at + 2
    assert (tmp_path / "run" / status["last_checkpoint"]).exists()
    assert signal.getsignal(signal.SIGINT) is before


def test_stop_on_signal_when_signalled_twice_raises_at_once():
    import os
    import signal

    from hybrid_trader.training.callbacks import StopOnSignal

    stop = StopOnSignal().install()
    try:
        assert stop._on_step()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested == "SIGTERM" and not stop._on_step()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        stop.restore()


def test_training_imports_no_evaluation_module_when_loaded():

    code = ("import sys, hybrid_trader.training.runner, hybrid_trader.training.callbacks; "
            "print(sorted(m for m in sys.modules if m.startswith('hybrid_trader.evaluation')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert out.stdout.strip() == "[]"
    # and none inside a function either
    for path in (Path(__file__).parents[2] / "src" / "hybrid_trader" / "training").glob("*.py"):
        assert "hybrid_trader.evaluation" not in path.read_text(), path.name


def test_an_init_run_trained_on_this_runs_validation_or_test_days_is_refused(tmp_path):
    # walk-forward folds: phase 1 on fold 2 trained on fold 0's validation and test days; phase 2 of fold 0 from it
    # would carry them (the network and the normalisation) into its own evaluation
    tiny = {"data.synthetic_days": 40, "ppo.n_steps": 128, "ppo.batch_size": 128, "ppo.n_envs": 2, "ppo.n_epochs": 1,
            "train.validate_every": 0, "train.progress_bar": False, "split.folds": 3,
            "ppo.normalizer_warmup_steps": 256, "ppo.total_timesteps": 256}
    c1 = merge_overrides(RunConfig(), {**tiny, "env.phase": 1, "split.fold": 2})
    train_run(c1, tmp_path / "p1", quiet=True)
    late = merge_overrides(RunConfig(), {**tiny, "env.phase": 2, "split.fold": 0})
    with pytest.raises(UserError, match="look-ahead") as err:
        train_run(late, tmp_path / "p2", init=tmp_path / "p1", quiet=True)
    assert "fix:" in str(err.value) and not (tmp_path / "p2").exists()
    same = merge_overrides(RunConfig(), {**tiny, "env.phase": 2, "split.fold": 2})  # the same fold: allowed
    train_run(same, tmp_path / "p2same", init=tmp_path / "p1", quiet=True)
