"""LLM failures that show: auth at start-up, errors by kind, circuit breaker, stall reports, redaction.

Every test runs against :mod:`tests.llm.fake_openai_server` (or a scripted back end), never a real model.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest

from hybrid_trader.errors import UserError
from hybrid_trader.llm import build_advisor, load_llm_config
from hybrid_trader.llm.advice import LLM_ERROR
from hybrid_trader.llm.backends.base import BackendError
from hybrid_trader.llm.health import HEALTH_STAT_NAMES, LLM_CIRCUIT_OPEN, AdvisorHealth
from hybrid_trader.llm.redact import REDACTED, redact
from tests.llm import FakeBackend, make_context, mock_config
from tests.llm.fake_openai_server import FakeOpenAIServer

KEY = "sk-test-0123456789abcdefSECRET"


def server_config(url: str, **over):
    o = {"backend": "openai", "check_on_start": False, "query": {"mode": "always"}, "cache": {"enabled": False},
         "openai": {"base_url": url, "retries": 0, "request_timeout_s": 5.0, "model": "fake-model"}}
    for k, v in over.items():
        o[k] = {**o.get(k, {}), **v} if isinstance(v, dict) else v
    return load_llm_config(overrides=o)


def ask_until_done(adv, n: int) -> list:
    """What evaluation does: ask synchronously whenever the advisor says a query is due."""
    out = []
    for step in range(n):
        ctx = make_context(minutes=step)
        if adv.should_query(0, step, ctx, 0.5):
            out.append(adv.advise_now([ctx], env_index=0, step=step)[0])
    return out


# ------------------------------------------------------------------ start-up check
@pytest.mark.parametrize("key_set", [False, True])
def test_start_check_when_server_answers_401_names_the_key_variable_and_fix(monkeypatch, key_set):
    if key_set:
        monkeypatch.setenv("MY_LLM_KEY", KEY)
    else:
        monkeypatch.delenv("MY_LLM_KEY", raising=False)
    with FakeOpenAIServer("401") as srv, pytest.raises(UserError) as err:
        build_advisor(server_config(srv.url, check_on_start=True, openai={"api_key_env": "MY_LLM_KEY", "model": ""}))
    text = err.value.render()
    assert "HTTP 401" in text and "export MY_LLM_KEY=" in text
    assert ("not set" in text) != key_set and KEY not in text


def test_start_check_when_only_queries_need_the_key_still_catches_the_401(monkeypatch):
    # llama.cpp serves /models without a key: the check must try the endpoint queries use
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer("ok") as srv:
        real = srv._handler

        def handler():
            base = real()

            class AuthOnPost(base):
                def do_POST(self):
                    srv.mode = "401"
                    try:
                        super().do_POST()
                    finally:
                        srv.mode = "ok"
            return AuthOnPost

        srv.stop()
        srv._handler = handler
        srv.start()
        with pytest.raises(UserError, match="OPENAI_API_KEY"):
            build_advisor(server_config(srv.url, check_on_start=True))


# ------------------------------------------------------------------ errors by kind
@pytest.mark.parametrize("mode, kind", [("401", "auth"), ("refuse", "connection"), ("drop", "connection"),
                                        ("500_echo", "http_5xx"), ("garbage", "garbage"), ("hang", "timeout")])
def test_failed_query_when_server_breaks_is_counted_by_kind(mode, kind):
    with FakeOpenAIServer(mode, hang_s=5.0) as srv:
        adv = build_advisor(server_config(srv.url, openai={"request_timeout_s": 0.5}))
        try:
            a = adv.advise_now([make_context()])[0]
            stats = adv.stats()
        finally:
            adv.close()
    assert a.abstained
    assert stats[f"llm/errors_{kind}"] == 1 and stats["llm/error_rate_pct"] == 100.0
    assert sum(stats[f"llm/errors_{k}"] for k in ("auth", "connection", "timeout", "http_5xx", "garbage")) == 1
    assert set(HEALTH_STAT_NAMES) <= set(stats)


def test_error_counts_when_server_is_healthy_stay_zero():
    with FakeOpenAIServer("ok") as srv:
        adv = build_advisor(server_config(srv.url))
        try:
            assert not adv.advise_now([make_context()])[0].abstained
            stats = adv.stats()
        finally:
            adv.close()
    assert stats["llm/error_rate_pct"] == 0.0 and stats["llm/circuit_open"] == 0.0


# ------------------------------------------------------------------ circuit breaker
def test_circuit_when_server_keeps_failing_opens_and_stops_sending_queries(caplog):
    with FakeOpenAIServer("drop") as srv:
        adv = build_advisor(server_config(srv.url, batching={"circuit_errors": 3, "circuit_cooldown_s": 3600}))
        try:
            with caplog.at_level(logging.WARNING):
                answers = ask_until_done(adv, 40)
            sent = len(srv.requests)
            stats = adv.stats()
            assert adv.health.circuit_open
            assert adv.advise_now([make_context()])[0].abstain_reason == LLM_CIRCUIT_OPEN
            assert len(srv.requests) == sent  # nothing more reached the server
        finally:
            adv.close()
    assert sent == 3 and len(answers) == 3  # evaluation stopped asking after 3 failures
    assert all(a.abstained and a.abstain_reason == LLM_ERROR for a in answers)
    assert stats["llm/circuit_open"] == 1.0 and stats["llm/circuit_opened"] == 1.0
    assert stats["llm/errors_connection"] == 3 and stats["llm/total_queries"] == 3
    text = caplog.text
    assert "CIRCUIT OPEN" in text and "RL-only" in text and srv.url in text
    assert "LLM advice was missing" in text  # said again when the advisor closes


def test_circuit_when_open_makes_submit_decline_without_queueing():
    backend = FakeBackend(fail=BackendError("server exploded", kind="http_5xx"))
    adv = build_advisor(mock_config(query={"mode": "always"}, cache={"enabled": False},
                                    batching={"max_wait_ms": 1.0, "circuit_errors": 2, "circuit_cooldown_s": 3600}),
                        backend=backend)
    try:
        step = 0
        deadline = time.monotonic() + 20
        while not adv.health.circuit_open and time.monotonic() < deadline:
            step += 1
            adv.submit(0, step, make_context(minutes=step))
            time.sleep(0.01)
        assert adv.health.circuit_open
        calls = len(backend.batches)
        assert adv.submit(0, step + 1, make_context(minutes=step + 1)) is False
        assert not adv.should_query(0, step + 2, make_context(minutes=step + 2))
        assert adv.stats()["llm/circuit_skipped"] >= 1
        assert len(backend.batches) == calls
    finally:
        adv.close()


def test_circuit_when_cooldown_passes_probes_once_then_closes_on_success(caplog):
    now = [0.0]
    health = AdvisorHealth(2, 30.0, describe=lambda: "openai:http://x/v1", clock=lambda: now[0])
    health.on_failure("connection", "refused", 1)
    assert health.allow() and not health.circuit_open
    health.on_failure("connection", "refused", 1)
    assert health.circuit_open and health.blocked() and not health.allow()
    now[0] = 31.0
    assert not health.blocked() and health.allow()  # the probe
    assert not health.allow() and health.blocked()  # only one probe at a time
    health.on_failure("connection", "refused", 1)  # the probe failed: open again for a cool-down
    assert health.blocked() and health.times_opened == 1
    now[0] = 62.0
    assert health.allow()
    with caplog.at_level(logging.WARNING):
        health.on_success(1)
    assert not health.circuit_open and health.allow() and "answers again" in caplog.text
    assert health.snapshot()["llm/errors_connection"] == 3


def test_circuit_when_disabled_never_opens():
    health = AdvisorHealth(0, 30.0)
    for _ in range(50):
        health.on_failure("timeout", "slow", 1)
    assert not health.circuit_open and health.allow()


def test_rl_only_notice_when_backend_was_healthy_is_none():
    health = AdvisorHealth(5, 30.0)
    health.on_success(10)
    health.on_failure("timeout", "slow", 1)
    assert health.rl_only_notice() is None


# ------------------------------------------------------------------ stalls
def test_stalled_server_when_waiting_is_reported_before_the_request_times_out(caplog):
    with FakeOpenAIServer("hang", hang_s=10.0) as srv:
        adv = build_advisor(server_config(srv.url, openai={"request_timeout_s": 8.0},
                                          batching={"stall_warn_s": 0.2, "timeout_s": 30.0}))
        done = threading.Event()
        worker = threading.Thread(target=lambda: (adv.advise_now([make_context()]), done.set()), daemon=True)
        try:
            with caplog.at_level(logging.WARNING):
                worker.start()
                deadline = time.monotonic() + 7.0
                while "has not answered" not in caplog.text and time.monotonic() < deadline:
                    time.sleep(0.02)
                reported_while_waiting = not done.is_set()
                assert "has not answered" in caplog.text and srv.url in caplog.text
                assert reported_while_waiting, "the stall was reported only after the request ended"
        finally:
            srv.stop()  # releases the hanging request
            worker.join(10)
            adv.close()
    assert adv.stats()["llm/stalls"] == 1


# ------------------------------------------------------------------ secrets
def test_redact_when_text_holds_the_key_or_credential_patterns_replaces_them(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "plainkey-without-prefix-42")
    text = "key plainkey-without-prefix-42, header Bearer abc.def-123, other sk-proj-AAAAbbbbCCCC1234"
    out = redact(text)
    assert "plainkey" not in out and "abc.def-123" not in out and "sk-proj" not in out
    assert out.count(REDACTED) == 3 and "Bearer " in out
    assert redact("HTTP 500: nothing secret here") == "HTTP 500: nothing secret here"


def test_echoed_key_when_server_errors_is_redacted_in_answers_logs_errors_and_journal(monkeypatch, caplog, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    journal = tmp_path / "journal.sqlite"
    with FakeOpenAIServer("500_echo") as srv:
        adv = build_advisor(server_config(srv.url, journal=str(journal)))
        try:
            with caplog.at_level(logging.DEBUG):
                a = adv.advise_now([make_context()])[0]
                with pytest.raises(UserError) as err:
                    adv.advise_now([make_context(minutes=1)], raise_errors=True)
        finally:
            adv.close()
        echoed = any(KEY in str(h) for _, _, h in srv.requests)
    assert echoed, "the fake server did receive the key (it is sent as a Bearer header)"
    assert a.abstained and "HTTP 500" in a.raw and KEY not in a.raw and REDACTED in a.raw
    assert KEY not in err.value.render() and KEY not in str(err.value.__cause__ or "")
    assert KEY not in caplog.text
    con = sqlite3.connect(journal)
    rows = con.execute("SELECT answer FROM llm_queries").fetchall()
    con.close()
    assert rows and all(KEY not in (r[0] or "") for r in rows)
