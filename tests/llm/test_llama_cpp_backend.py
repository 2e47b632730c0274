"""The llama_cpp back end (optional extra [llama]) on the packaged Gemma GGUF."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.llm.parsing import parse_answer
from hybrid_trader.llm.prompt import PromptBuilder
from tests.llm import LONG_MASK, make_context, require, require_llama_cpp_runs

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def backend():
    require_llama_cpp_runs()
    from hybrid_trader.llm.backends.llama_cpp_backend import LlamaCppBackend

    cfg = load_llm_config(overrides={"backend": "llama_cpp"})
    be = LlamaCppBackend(cfg, PromptBuilder(cfg))
    yield be
    be.close()


def test_scoring_when_prefix_is_shared_evaluates_only_the_new_tokens(backend):
    pb = backend.prompts
    a, b = pb.query(make_context()), pb.query(make_context(rsi=35.0))
    mass_a = backend.score([a])[0]
    n_prefix = len(backend.llm.tokenize(a.prefix.encode(), add_bos=True, special=False))
    evaluated = []
    original = backend.llm.eval
    backend.llm.eval = lambda toks: (evaluated.append(len(toks)), original(toks))[1]
    try:
        mass_b = backend.score([b])[0]
    finally:
        backend.llm.eval = original
    assert evaluated and evaluated[0] < len(backend._tokens(b)) - n_prefix + 5  # the prefix was not re-evaluated
    for m in (mass_a, mass_b):
        assert m[:3].sum() > 0.5 and np.all(m >= 0) and m.sum() <= 1.0 + 1e-6


def test_scoring_when_in_position_gives_management_names_mass(backend):
    m = backend.score([backend.prompts.query(make_context(position=1, position_status="LONG 1", unrealized_pnl=600.0,
                                                          legal=LONG_MASK))])[0]
    assert m[3] > 0  # MOVE_TO_BE's first token


def test_generation_when_greedy_gives_a_parsable_line(backend):
    text = backend.generate([backend.prompts.query(make_context())], 24, 0.0)[0]
    assert "\n" not in text
    assert 0 <= parse_answer(text).action < 6


def test_missing_gguf_when_configured_raises_user_error(tmp_path):
    require("llama_cpp", "llama-cpp-python")
    from hybrid_trader.llm.backends.llama_cpp_backend import LlamaCppBackend

    cfg = load_llm_config(overrides={"backend": "llama_cpp", "llama_cpp": {"model_path": str(tmp_path / "x.gguf")}})
    with pytest.raises(UserError, match="GGUF model file not found"):
        LlamaCppBackend(cfg, PromptBuilder(cfg))


def test_probe_when_the_child_crashes_raises_user_error_naming_the_signal():
    from hybrid_trader.llm.backends.llama_cpp_backend import run_probe

    with pytest.raises(UserError, match=r"crashed \(SIGSEGV\)") as info:
        run_probe("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", what="llama-cpp-python test")
    assert "--llm transformers" in info.value.fix


def test_probe_when_the_child_fails_raises_user_error_with_its_last_line():
    from hybrid_trader.llm.backends.llama_cpp_backend import run_probe

    with pytest.raises(UserError, match="failed to evaluate a few tokens: ValueError: bad file"):
        run_probe("raise ValueError('bad file')", what="llama-cpp-python test")
