"""The advisor: submit never blocks, batches across environments, ages, staleness, abstentions, clean close."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm import STAT_NAMES, build_advisor
from hybrid_trader.llm.advice import LLM_ERROR, LLM_PARSE_FAILURE, LLM_TIMEOUT
from hybrid_trader.llm.async_advisor import Advisor
from hybrid_trader.llm.health import HEALTH_STAT_NAMES
from tests.llm import FakeBackend, failing_backend, make_context, mock_config


def advisor_with(backend, **over) -> Advisor:
    base = {"query": {"mode": "always"}, "cache": {"enabled": False},
            "batching": {"max_batch": 8, "max_wait_ms": 5.0}}
    for k, v in over.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) else v
    return build_advisor(mock_config(**base), backend=backend)


def wait_for(fn, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = fn()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError("condition not met in time")


def test_submit_when_backend_is_slow_returns_at_once_and_results_carry_their_age():
    backend = FakeBackend(delay=0.4)
    adv = advisor_with(backend)
    try:
        worst = 0.0
        for env in range(8):
            t0 = time.perf_counter()
            assert adv.submit(env, 10, make_context()) is True
            worst = max(worst, time.perf_counter() - t0)
        assert worst < 0.05  # a blocking submit would take the back end's 0.4 s
        t0 = time.perf_counter()
        assert adv.poll(0, 10) is None  # not ready: poll does not wait either
        assert time.perf_counter() - t0 < 0.05
        advice = wait_for(lambda: adv.poll(3, 13))
        assert advice.step == 10 and advice.age_steps == 3
        assert advice.action == 1 and not advice.abstained
        assert advice.latency_ms >= 300
        assert backend.threads == {"llm-advisor"}  # the model ran in the worker thread, not the caller's
    finally:
        adv.close()


def test_queries_of_many_envs_when_submitted_together_are_batched():
    backend = FakeBackend(delay=0.05)
    adv = advisor_with(backend, batching={"max_batch": 8, "max_wait_ms": 300.0})
    try:
        for env in range(16):
            adv.submit(env, 1, make_context())
        wait_for(lambda: all(adv.poll(e, 1) is not None for e in range(16)))
        assert sum(backend.batches) == 16 and max(backend.batches) == 8
        assert len(backend.batches) == 2
        assert adv.stats()["llm/batch_size_avg"] == pytest.approx(8.0)
    finally:
        adv.close()


def test_single_query_when_batch_not_full_runs_after_max_wait():
    backend = FakeBackend()
    adv = advisor_with(backend, batching={"max_batch": 64, "max_wait_ms": 30.0})
    try:
        t0 = time.perf_counter()
        adv.submit(0, 1, make_context())
        wait_for(lambda: adv.poll(0, 1))
        assert time.perf_counter() - t0 < 5.0
        assert backend.batches == [1]
    finally:
        adv.close()


def test_batch_when_every_expected_env_has_a_query_runs_without_waiting_for_more():
    backend = FakeBackend()
    adv = advisor_with(backend, batching={"max_batch": 16, "max_wait_ms": 10_000.0})
    adv.expect_envs(2)  # at most 2 queries can wait: a batch of 2 is complete
    try:
        t0 = time.perf_counter()
        adv.submit(0, 1, make_context())
        adv.submit(1, 1, make_context())
        wait_for(lambda: adv.poll(0, 1) and adv.poll(1, 1))
        assert time.perf_counter() - t0 < 5.0 and backend.batches == [2]
    finally:
        adv.close()


def busy_advisor(refresh_steps: int) -> Advisor:
    """An advisor whose worker is busy with environment 99's query for 0.3 s."""
    backend = FakeBackend(delay=0.3)
    adv = advisor_with(backend, batching={"max_batch": 1, "max_wait_ms": 0.0, "refresh_steps": refresh_steps})
    adv.submit(99, 1, make_context())  # occupies the worker
    assert backend.started.wait(5)
    return adv


def test_newer_submit_when_older_still_queued_supersedes_it():
    adv = busy_advisor(refresh_steps=1)
    try:
        adv.submit(0, 1, make_context())
        adv.submit(0, 2, make_context(rsi=40.0))  # replaces step 1's query, still queued
        advice = wait_for(lambda: adv.poll(0, 2))
        assert advice.step == 2
        assert adv.stats()["llm/dropped"] == 1
    finally:
        adv.close()


def test_submit_when_queued_query_younger_than_refresh_steps_keeps_it():
    adv = busy_advisor(refresh_steps=4)
    try:
        assert adv.submit(0, 10, make_context())
        # 1-3 steps later the waiting query is kept: no new context is needed
        assert not adv.should_query(0, 13, make_context())
        assert not adv.submit(0, 13, make_context(rsi=40.0))
        # 4 steps later it is old enough to be replaced by the fresher one
        assert adv.should_query(0, 14, make_context())
        assert adv.submit(0, 14, make_context(rsi=40.0))
        advice = wait_for(lambda: adv.poll(0, 14))
        assert advice.step == 14
        assert adv.stats()["llm/dropped"] == 1
    finally:
        adv.close()


def slow_batch(adv: Advisor, env: int, step: int, lag: int) -> int:
    """One batch for ``env`` queried at ``step``, answered while the caller takes ``lag`` steps; the step after."""
    done = adv.stats()["llm/total_queries"] + 1
    adv.submit(env, step, make_context())
    wait_for(lambda: adv._busy)
    adv.poll(env, step + lag)
    wait_for(lambda: adv.stats()["llm/total_queries"] >= done)
    return step + lag + 1


def renews_while_busy(adv: Advisor, step: int) -> bool:
    """Whether environment 0's waiting query, old enough to renew, is renewed while the model is busy."""
    adv.submit(98, step, make_context())
    wait_for(lambda: adv._busy)
    assert adv.submit(0, step + 1, make_context())
    renewed = adv.should_query(0, step + 9, make_context())  # 8 steps old: past refresh_steps (4)
    assert adv.submit(0, step + 9, make_context(rsi=40.0)) == renewed
    assert wait_for(lambda: adv.poll(0, step + 9)).step == (step + 9 if renewed else step + 1)
    return renewed


def test_waiting_query_when_the_model_answers_slower_than_max_age_is_not_renewed():
    adv = advisor_with(FakeBackend(delay=0.2), batching={"max_batch": 1, "max_wait_ms": 0.0, "refresh_steps": 4})
    try:
        step = slow_batch(adv, 99, 1, lag=29)  # more than max_age_steps (10) ...
        assert adv.stats()["llm/answer_lag_steps"] == 29
        assert renews_while_busy(adv, step + 1), "one slow batch (a first call, a hiccup) changes nothing"
        step = step + 20
        for _ in range(3):  # ... three batches in a row: any answer would arrive stale
            step = slow_batch(adv, 99, step, lag=29)
        queries = adv.stats()["llm/total_queries"]
        adv.submit(97, step, make_context())  # a batch while the callers pause (a PPO update) ...
        wait_for(lambda: adv.stats()["llm/total_queries"] > queries)
        assert not renews_while_busy(adv, step + 1)  # ... says nothing about the model's speed
    finally:
        adv.close()


def test_advice_when_older_than_max_age_expires_and_is_counted_once():
    adv = advisor_with(FakeBackend(), batching={"max_age_steps": 3})
    try:
        adv.submit(0, 5, make_context())
        wait_for(lambda: adv.poll(0, 5))
        assert adv.poll(0, 8).age_steps == 3
        assert adv.poll(0, 9) is None
        assert adv.poll(0, 9) is None
        assert adv.stats()["llm/expired"] == 1
    finally:
        adv.close()


def test_slow_answer_when_past_timeout_abstains_and_is_counted():
    adv = advisor_with(FakeBackend(delay=0.3), batching={"timeout_s": 0.1})
    try:
        for env in range(3):
            adv.submit(env, 1, make_context())
        advices = [wait_for(lambda e=e: adv.poll(e, 1)) for e in range(3)]
        assert all(a.abstained and a.abstain_reason == LLM_TIMEOUT for a in advices)
        assert np.allclose(advices[0].probs, [1 / 3, 1 / 3, 1 / 3, 0, 0, 0])
        s = adv.stats()
        assert s["llm/timeouts"] == 3 and s["llm/error_rate"] == 1.0 and s["llm/answered"] == 0
    finally:
        adv.close()


@pytest.mark.parametrize("exc", ["backend_error", "plain_exception"])
def test_failing_backend_when_queried_abstains_counts_and_keeps_running(exc):
    backend = failing_backend() if exc == "backend_error" else FakeBackend(fail=ValueError("boom"))
    adv = advisor_with(backend)
    try:
        adv.submit(0, 1, make_context())
        first = wait_for(lambda: adv.poll(0, 1))
        assert first.abstained and first.abstain_reason == LLM_ERROR
        adv.submit(0, 2, make_context())
        second = wait_for(lambda: adv.poll(0, 2) if adv.poll(0, 2) and adv.poll(0, 2).step == 2 else None)
        assert second.abstain_reason == LLM_ERROR
        s = adv.stats()
        assert s["llm/errors"] == 2 and s["llm/error_rate"] == 1.0
        assert adv._thread.is_alive()
    finally:
        adv.close()


def test_malformed_written_answer_when_generating_abstains_as_parse_failure():
    backend = FakeBackend(texts=["I have no idea", "SELL | 0.7 | breakdown"])
    adv = advisor_with(backend, mode="generate", batching={"max_batch": 2, "max_wait_ms": 200.0})
    try:
        adv.submit(0, 1, make_context())
        adv.submit(1, 1, make_context())
        a0, a1 = wait_for(lambda: adv.poll(0, 1)), wait_for(lambda: adv.poll(1, 1))
        assert a0.abstained and a0.abstain_reason == LLM_PARSE_FAILURE and a0.raw == "I have no idea"
        assert a1.action == 2 and a1.confidence == pytest.approx(0.7) and a1.reason == "breakdown"
        assert adv.stats()["llm/parse_failures"] == 1
    finally:
        adv.close()


def test_cache_hit_when_context_repeats_answers_at_once_with_decay():
    backend = FakeBackend()
    adv = advisor_with(backend, cache={"enabled": True})
    try:
        adv.submit(0, 1, make_context())
        first = wait_for(lambda: adv.poll(0, 1))
        adv.submit(1, 2, make_context(minutes=1))
        hit = adv.poll(1, 2)  # no waiting: the cache answered inside submit
        assert hit is not None and hit.from_cache and hit.age_steps == 0
        assert hit.confidence == pytest.approx(first.confidence * 0.8)
        assert len(backend.batches) == 1
        assert adv.stats()["llm/cache_hits"] == 1
    finally:
        adv.close()


def test_reset_when_query_in_flight_discards_its_answer():
    backend = FakeBackend(delay=0.3)
    adv = advisor_with(backend)
    try:
        adv.submit(0, 1, make_context())
        assert backend.started.wait(5)
        adv.reset(0)  # new episode: the old answer must not leak into it
        time.sleep(0.6)
        assert adv.poll(0, 1) is None
        assert adv.stats()["llm/dropped"] >= 1
    finally:
        adv.close()


def test_selective_policy_when_used_skips_and_counts_query_rate():
    adv = build_advisor(mock_config(cache={"enabled": False}, query={"mode": "selective", "triggers": ["interval"],
                                                                     "interval": 5, "cooldown": 1}))
    try:
        ctx = make_context(position=1, position_status="LONG 1")
        sent = [adv.submit(0, s, ctx) for s in range(20)]
        assert sum(sent) == 4
        s = adv.stats()
        assert s["llm/calls"] == 20 and s["llm/accepted_pct"] == pytest.approx(20.0)
        assert adv.should_query(0, 20, ctx) and not adv.should_query(0, 16, ctx)
    finally:
        adv.close()


def test_close_when_called_joins_the_worker_and_is_idempotent():
    backend = FakeBackend(delay=0.2)
    adv = advisor_with(backend)
    adv.submit(0, 1, make_context())
    assert backend.started.wait(5)
    thread = adv._thread
    adv.close()
    assert not thread.is_alive() and backend.closed and adv.closed
    adv.close()  # second call is a no-op
    assert adv.submit(0, 2, make_context()) is False
    with pytest.raises(UserError):
        adv.advise_now([make_context()])


def test_advisor_when_never_closed_exits_cleanly_at_interpreter_exit():
    code = textwrap.dedent("""
        from hybrid_trader.llm import build_advisor, load_llm_config
        from hybrid_trader.llm.prompt import sample_context
        adv = build_advisor(load_llm_config(overrides={"backend": "mock", "mock": {"latency_ms": 300},
                                                       "query": {"mode": "always"}}))
        for env in range(4):
            adv.submit(env, 1, sample_context())
        print("submitted", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "submitted" in proc.stdout and "terminate called" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_stats_when_read_have_seed_tensorboard_names_and_numbers():
    adv = advisor_with(FakeBackend())
    try:
        adv.submit(0, 1, make_context())
        wait_for(lambda: adv.poll(0, 1))
        s = adv.stats()
        for name in ("llm/total_queries", "llm/avg_latency_ms", "llm/error_rate", "confidence/llm_avg"):
            assert name in s
        assert set(s) == set(STAT_NAMES) | set(HEALTH_STAT_NAMES)
        assert all(isinstance(v, float) for v in s.values())
        assert s["llm/total_queries"] == 1 and s["llm/answered"] == 1
        assert s["confidence/llm_avg"] == pytest.approx(0.6 / 0.8, rel=1e-3)  # BUY's share of the legal mass
        assert s["llm/label_coverage"] == pytest.approx(0.8)
        assert s["llm/advice_age_avg_steps"] == 0.0 and s["llm/poll_hit_rate"] > 0
    finally:
        adv.close()


def test_advise_now_when_called_answers_synchronously_in_batches():
    backend = FakeBackend()
    adv = advisor_with(backend, batching={"max_batch": 4})
    try:
        out = adv.advise_now([make_context(rsi=float(r)) for r in range(10)])
        assert len(out) == 10 and backend.batches == [4, 4, 2]
        assert adv._thread is None  # no worker thread for synchronous use
        assert threading.current_thread().name in backend.threads
    finally:
        adv.close()


def test_advise_now_when_backend_fails_and_raise_errors_gives_user_error():
    adv = advisor_with(failing_backend())
    try:
        assert adv.advise_now([make_context()])[0].abstain_reason == LLM_ERROR
        with pytest.raises(UserError, match="server exploded"):
            adv.advise_now([make_context()], raise_errors=True)
    finally:
        adv.close()


def test_journal_when_enabled_records_every_query_and_answer(tmp_path):
    path = tmp_path / "journal.sqlite"
    adv = advisor_with(FakeBackend(), journal=str(path))
    adv.submit(2, 7, make_context())
    wait_for(lambda: adv.poll(2, 7))
    adv.advise_now([make_context(rsi=30.0)])
    adv.close()
    con = sqlite3.connect(path)
    rows = con.execute("SELECT env_index, step, market, prompt, probs_json, action_name, confidence, coverage, "
                       "abstained, latency_ms, backend FROM llm_queries ORDER BY id").fetchall()
    assert len(rows) == 2
    env, step, market, prompt, probs, name, conf, cov, abst, lat, backend = rows[0]
    assert (env, step, market, name, abst, backend) == (2, 7, "NQ", "BUY", 0, "fake")
    assert prompt.endswith("Answer:") and json.loads(probs) == [0.125, 0.75, 0.125, 0, 0, 0]
    assert cov == pytest.approx(0.8) and conf == pytest.approx(0.75)
    prefix = con.execute("SELECT text FROM llm_prefixes").fetchone()[0]
    assert "BUY | 0.75" in prefix
    assert con.execute("SELECT backend, mode FROM llm_runs").fetchone() == ("fake", "score")


def test_journal_when_path_unwritable_raises_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="journal"):
        advisor_with(FakeBackend(), journal=str(blocker / "sub" / "j.sqlite"))
