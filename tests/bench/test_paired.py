"""``hybrid-trader bench train --against REF``: two codes timed in pairs that run at once, a core each."""

from __future__ import annotations

import json
import os

import pytest

from hybrid_trader.bench.args import TrainBenchArgs
from hybrid_trader.bench.paired import code_of, package_src, run_flags, sign_test_p
from hybrid_trader.cli.main import main
from hybrid_trader.config import ConfigError
from hybrid_trader.errors import UserError

CHECKOUT = package_src().parent


def test_each_timed_run_gets_the_flags_given_less_the_pairings_on_one_thread():
    args = TrainBenchArgs(phase=2, n_envs=4, steps=4096, against="HEAD~1", pairs=4, update_threads="auto",
                          fast_math="true")
    flags = run_flags(args)
    assert flags == ["--phase", "2", "--n-envs", "4", "--steps", "4096", "--fast-math", "true", "--torch-threads", "1",
                     "--update-threads", "1"]
    assert "--pairs" not in flags and "--against" not in flags


def test_the_sign_test_is_exact_and_two_sided():
    assert sign_test_p(0, 6) == pytest.approx(2 / 64) == sign_test_p(6, 6)
    assert sign_test_p(1, 6) == pytest.approx(2 * 7 / 64)
    assert sign_test_p(3, 6) == 1.0


def test_a_folder_is_taken_as_is_and_a_name_that_is_neither_folder_nor_revision_is_refused(tmp_path):
    assert code_of(str(CHECKOUT), tmp_path) == package_src()
    with pytest.raises(UserError, match="neither a folder with src/hybrid_trader nor a git revision") as err:
        code_of("no-such-revision-xyz", tmp_path)
    assert "HEAD~1" in (err.value.fix or "")


def test_against_and_breakdown_together_are_refused():
    with pytest.raises((UserError, ConfigError), match="drop one of them"):
        TrainBenchArgs(against="HEAD", breakdown=True)


@pytest.mark.slow  # 30-45 s: pairs of two codes trained at once (make test-slow)
@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2,
                    reason="pairs run both codes at once on a core each: needs 2 cores")
def test_a_pair_times_both_codes_at_once_on_swapped_cores_and_reports_the_median_ratio(capsys):
    if not (CHECKOUT / ".git").exists():
        pytest.skip(f"{CHECKOUT} is not a git checkout")
    code = main(["bench", "train", "--against", "HEAD", "--pairs", "2", "--steps", "64", "--n-envs", "1"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["pairs"] == 2 and len(result["ratios"]) == 2 and all(r > 0 for r in result["ratios"])
    assert result["this_cores"][0] != result["this_cores"][1]  # swapped from one pair to the next
    ratios = [a / b for a, b in zip(result["this_seconds"], result["against_seconds"])]
    assert result["ratios"] == [round(r, 4) for r in ratios]
    assert result["flags"][-4:] == ["--torch-threads", "1", "--update-threads", "1"]
    assert lines[-2].startswith("this code took") and "sign test" in lines[-2]
