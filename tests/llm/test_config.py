"""LLMConfig: the packaged default, user files merged over it, unknown keys and bad values as UserErrors."""

from __future__ import annotations

import dataclasses

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import LLMConfig, default_config_path, load_llm_config


def test_packaged_default_when_loaded_matches_documented_defaults():
    cfg = load_llm_config()
    assert default_config_path().is_file()
    assert cfg.backend == "transformers" and cfg.mode == "score"
    assert cfg.transformers.model == "gemma-3-270m"
    assert cfg.query.interval == 5 and cfg.query.cooldown == 2  # seed 002's fix, not its failure (20 / 10)
    assert cfg.cache.ttl_minutes == 5 and cfg.cache.decay == pytest.approx(0.2)
    assert cfg.batching.max_batch == 16
    assert len(cfg.prompt.examples) >= 3


def test_every_config_field_when_inspected_has_a_docstring():
    import ast
    import inspect

    from hybrid_trader.llm import config as mod

    tree = ast.parse(inspect.getsource(mod))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(d, "id", None) == "dataclass" for d in node.decorator_list):
            body = node.body
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.AnnAssign):
                    nxt = body[i + 1] if i + 1 < len(body) else None
                    assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), \
                        f"{node.name}.{stmt.target.id} has no docstring"


def test_user_file_when_given_is_merged_over_the_default(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("llm:\n  backend: mock\n  query:\n    interval: 3\n")
    cfg = load_llm_config(f)
    assert cfg.backend == "mock" and cfg.query.interval == 3
    assert cfg.query.cooldown == 2  # untouched keys keep the packaged values
    assert cfg.prompt.context_template == load_llm_config().prompt.context_template


def test_unknown_key_when_loaded_names_it_with_a_suggestion(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("query:\n  intervall: 3\n")
    with pytest.raises(UserError) as err:
        load_llm_config(f)
    text = err.value.render()
    assert "llm.query.intervall" in text and "Did you mean 'interval'" in text and str(f) in text


@pytest.mark.parametrize("over, option", [
    ({"backend": "gpt"}, "llm.backend"),
    ({"mode": "scores"}, "llm.mode"),
    ({"cache": {"decay": 1.5}}, "cache.decay"),
    ({"query": {"triggers": ["flat", "sometimes"]}}, "query.triggers"),
    ({"batching": {"max_batch": 0}}, "batching.max_batch"),
    ({"query": {"interval": "often"}}, "llm.query.interval"),
])
def test_bad_value_when_loaded_raises_user_error_naming_the_option(over, option):
    with pytest.raises(UserError) as err:
        load_llm_config(overrides=over)
    assert option in err.value.render()


def test_missing_file_when_loaded_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_llm_config(tmp_path / "nope.yaml")


def test_from_dict_when_round_tripped_gives_the_same_config():
    cfg = load_llm_config()
    again = LLMConfig.from_dict(cfg.to_dict())
    assert dataclasses.asdict(again) == dataclasses.asdict(cfg)


def test_chain_of_thought_when_tokens_too_few_is_a_config_error():
    with pytest.raises(UserError, match="max_new_tokens"):
        load_llm_config(overrides={"mode": "generate", "prompt": {"chain_of_thought": True}})


def test_dataclass_defaults_when_built_directly_use_the_packaged_prompt():
    from hybrid_trader.llm import build_advisor
    from hybrid_trader.llm.prompt import sample_context

    assert dataclasses.asdict(LLMConfig().prompt) == dataclasses.asdict(load_llm_config().prompt)
    adv = build_advisor(LLMConfig(backend="mock"))
    try:
        assert not adv.advise_now([sample_context()])[0].abstained
    finally:
        adv.close()


# --------------------------------------------------------------- one configuration system
def _write(tmp_path, text, name="run.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_llm_section_when_a_number_is_quoted_is_rejected_naming_the_users_file_and_line(tmp_path):
    from hybrid_trader.config import ConfigError, load_yaml_config
    from hybrid_trader.run.config import RunConfig

    f = _write(tmp_path, "env:\n  phase: 3\nllm:\n  batching:\n    max_batch: \"16\"\n")
    with pytest.raises(ConfigError) as err:
        load_yaml_config(f, RunConfig)
    text = err.value.render()
    assert str(f) in text and "line 5" in text and "llm.batching.max_batch" in text and "expected int" in text
    assert "configs/llm.yaml" not in text


def test_llm_section_when_a_key_is_misspelt_names_the_users_file_with_a_suggestion(tmp_path):
    from hybrid_trader.config import ConfigError, load_yaml_config
    from hybrid_trader.run.config import RunConfig

    f = _write(tmp_path, "llm:\n  backend: mock\n  query:\n    intervall: 3\n")
    with pytest.raises(ConfigError) as err:
        load_yaml_config(f, RunConfig)
    text = err.value.render()
    assert f"{f}, line 4: llm.query.intervall" in text and "Did you mean 'interval'" in text


def test_run_llm_section_when_partial_is_merged_over_the_packaged_defaults(tmp_path):
    from hybrid_trader.config import load_yaml_config
    from hybrid_trader.run.config import RunConfig

    cfg = load_yaml_config(_write(tmp_path, "llm:\n  backend: mock\n  query:\n    interval: 3\n"), RunConfig)
    assert isinstance(cfg.llm, LLMConfig)
    assert cfg.llm.backend == "mock" and cfg.llm.query.interval == 3
    assert cfg.llm.query.cooldown == 2 and cfg.llm.prompt.examples == load_llm_config().prompt.examples


def test_llm_process_when_null_is_on_in_a_run_for_local_models_only():
    from hybrid_trader.config import merge_overrides
    from hybrid_trader.run.config import RunConfig

    assert RunConfig().llm.process is None
    assert RunConfig().llm.in_run().process is True  # transformers: a child process while training
    assert merge_overrides(RunConfig(), {"llm.backend": "mock"}).llm.in_run().process is False
    assert merge_overrides(RunConfig(), {"llm.process": False}).llm.in_run().process is False
    assert load_llm_config().process is None  # llm ask: in process


@pytest.mark.parametrize("over, option", [
    ({"batching": {"timeout_s": 0}}, "llm.batching.timeout_s"),
    ({"openai": {"request_timeout_s": -1}}, "llm.openai.request_timeout_s"),
    ({"mock": {"coverage": 1.2}}, "llm.mock.coverage"),
    ({"scoring": {"min_coverage": float("nan")}}, "llm.scoring.min_coverage"),
    ({"query": {"win_rate_change": 2.0}}, "llm.query.win_rate_change"),
    ({"openai": {"scoring_endpoint": "chats"}}, "llm.openai.scoring_endpoint"),
    ({"prompt": {"context_template": "RSI {rsi:%Y}"}}, "llm.prompt.context_template"),
])
def test_llm_value_when_out_of_range_is_a_config_error_naming_the_key(over, option):
    from hybrid_trader.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_llm_config(overrides=over)
    assert option in err.value.render()


def test_backend_choices_when_listed_come_from_the_registry():
    import typing

    from hybrid_trader.llm.backends import BACKEND_NAMES, BACKENDS

    assert typing.get_args(typing.get_type_hints(LLMConfig)["backend"]) == BACKEND_NAMES
    for spec in BACKENDS.values():
        assert hasattr(LLMConfig(), spec.section)
        if spec.model_key:
            assert hasattr(getattr(LLMConfig(), spec.section), spec.model_key)


def test_importing_llm_config_when_fresh_loads_no_gymnasium_torch_or_talib():
    import subprocess
    import sys

    code = (
        "import hybrid_trader.llm.config, sys; "
        "bad = [m for m in ('gymnasium', 'torch', 'talib', 'numpy', 'hybrid_trader.llm.prompt') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- secrets
@pytest.mark.parametrize(
    "item", ["llm.openai.api_key=sk-abcdefghijklmnop", "llm.openai={api_key: sk-abcdefghijklmnop}"]
)
@pytest.mark.parametrize("phase", [1, 2, 3])
def test_api_key_when_given_with_set_is_refused_in_any_phase_without_echoing_it(item, phase):
    from hybrid_trader.config import ConfigError, merge_overrides, parse_overrides
    from hybrid_trader.run.config import RunConfig

    with pytest.raises(ConfigError) as err:
        merge_overrides(RunConfig(), {"env.phase": phase, **parse_overrides([item])})
    text = err.value.render()
    assert "llm.openai.api_key" in text and "export OPENAI_API_KEY=" in text and "api_key_env" in text
    assert "sk-abcdefghijklmnop" not in text and "sk-…" in text


def test_api_key_when_written_in_a_config_file_is_refused_naming_file_and_line(tmp_path):
    from hybrid_trader.config import ConfigError

    f = _write(tmp_path, "backend: openai\nopenai:\n  api_key: sk-secret123456\n")
    with pytest.raises(ConfigError) as err:
        load_llm_config(f)
    text = err.value.render()
    assert f"{f}, line 3: llm.openai.api_key" in text and "sk-secret123456" not in text


@pytest.mark.parametrize("value", ["sk-abcdef123456", "my key", "openai_api_key"])
def test_api_key_env_when_it_looks_like_a_key_is_refused_with_a_hint(value):
    from hybrid_trader.config import ConfigError

    with pytest.raises(ConfigError) as err:
        load_llm_config(overrides={"openai.api_key_env": value})
    text = err.value.render()
    assert "llm.openai.api_key_env" in text and "environment variable" in text and value not in text
    assert load_llm_config(overrides={"openai.api_key_env": "MY_SERVER_KEY"}).openai.api_key_env == "MY_SERVER_KEY"


# --------------------------------------------------------------- prompt presets (issue 21)
def test_labels_preset_when_compared_is_the_packaged_default_prompt():
    from hybrid_trader.llm.config import prompt_preset

    cfg = load_llm_config()
    labels = prompt_preset("labels")
    assert cfg.prompt.preset is None
    assert cfg.prompt.system == labels["system"] and cfg.prompt.context_template == labels["context_template"]
    assert [dataclasses.asdict(e) for e in cfg.prompt.examples] == labels["examples"]


def test_preset_when_set_over_another_presets_text_replaces_it_and_round_trips():
    from hybrid_trader.llm.config import prompt_preset

    cfg = load_llm_config(overrides={"prompt.preset": "numbers"})
    assert cfg.prompt.context_template == prompt_preset("numbers")["context_template"]
    again = LLMConfig.from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict()
    back = load_llm_config(overrides={"prompt.preset": "labels"})
    assert back.prompt.context_template == load_llm_config().prompt.context_template


def test_preset_when_the_user_wrote_a_template_is_refused_naming_both_options():
    with pytest.raises(UserError) as err:
        load_llm_config(overrides={"prompt.preset": "numbers", "prompt.context_template": "RSI {rsi:.0f}"})
    text = str(err.value)
    assert "prompt.preset" in text and "context_template" in text and "preset: null" in text


def test_preset_when_unknown_is_a_config_error_listing_the_presets():
    with pytest.raises(UserError) as err:
        load_llm_config(overrides={"prompt.preset": "numbrs"})
    assert "numbers" in str(err.value)


def test_advice_identity_when_new_prompt_options_are_at_their_defaults_is_unchanged():
    from hybrid_trader.run.advice_identity import advice_identity

    default = advice_identity(load_llm_config())
    assert advice_identity(load_llm_config(overrides={"prompt.preset": "labels"})) == default
    numbers = advice_identity(load_llm_config(overrides={"prompt.preset": "numbers"}))
    rotated = advice_identity(load_llm_config(overrides={"prompt.preset": "numbers", "prompt.example_orders": 3}))
    assert len({default["hash"], numbers["hash"], rotated["hash"]}) == 3
