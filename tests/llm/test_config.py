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
