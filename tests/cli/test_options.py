"""The one table from CLI flags to config keys."""

from __future__ import annotations

import argparse

import pytest

from hybrid_trader.cli.options import OPTIONS, add_options, field_keys, overrides_from
from hybrid_trader.llm.backends import BACKEND_NAMES
from hybrid_trader.run.config import RunConfig


def test_every_table_key_when_resolved_is_a_key_of_the_run_config():
    keys = set(field_keys(RunConfig))
    for opt in OPTIONS.values():
        for key in opt.keys:
            if "<backend>" in key:
                continue
            assert key in keys, f"{opt.flag} -> {key} is not a config key"


def _parse(flags, argv):
    p = argparse.ArgumentParser()
    add_options(p, flags)
    return p.parse_args(argv)


def test_llm_flag_when_parsed_offers_the_registry_names_and_sets_llm_backend():
    p = argparse.ArgumentParser()
    add_options(p, ("--llm",))
    assert tuple(p._option_string_actions["--llm"].choices) == BACKEND_NAMES
    assert overrides_from(_parse(("--llm",), ["--llm", "mock"]), ("--llm",)) == {"llm.backend": "mock"}
    with pytest.raises(SystemExit):
        _parse(("--llm",), ["--llm", "gpt"])


@pytest.mark.parametrize("backend, key", [("openai", "llm.openai.model"), ("llama_cpp", "llm.llama_cpp.model_path"),
                                          (None, "llm.transformers.model")])
def test_model_flag_when_given_sets_the_chosen_backends_model_key(backend, key):
    flags = ("--backend", "--model")
    argv = ["--model", "m"] + (["--backend", backend] if backend else [])
    over = overrides_from(_parse(flags, argv), flags)
    assert over[key] == "m"


def test_switches_when_absent_set_nothing_and_when_given_set_their_value():
    flags = ("--quiet", "--repair", "--generate")
    assert overrides_from(_parse(flags, []), flags) == {}
    assert overrides_from(_parse(flags, ["--quiet", "--repair", "--generate"]), flags) == {
        "train.progress_bar": False, "data.repair": True, "llm.mode": "generate"}


def test_market_flag_when_given_sets_both_data_and_env_market():
    assert overrides_from(_parse(("--market",), ["--market", "ES"]), ("--market",)) == {
        "data.market": "ES", "env.market": "ES"}
