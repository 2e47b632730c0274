"""The fake OpenAI-compatible server answers, fails and stops as its modes say."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request

import pytest

from tests.llm.fake_openai_server import MODEL_ID, FakeOpenAIServer


def get(url: str, timeout: float = 5.0, headers: dict | None = None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def test_fake_server_when_ok_lists_its_model_and_answers_completions():
    with FakeOpenAIServer("ok") as srv:
        status, body = get(srv.url + "/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == MODEL_ID
        req = urllib.request.Request(srv.url + "/completions", data=json.dumps({"prompt": "x"}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert "top_logprobs" in json.loads(resp.read())["choices"][0]["logprobs"]
        assert [r[:2] for r in srv.requests] == [("GET", "/v1/models"), ("POST", "/v1/completions")]


def test_fake_server_when_refusing_has_nothing_listening():
    with FakeOpenAIServer("refuse") as srv, pytest.raises(urllib.error.URLError) as err:
        get(srv.url + "/models")
    assert isinstance(err.value.reason, ConnectionRefusedError)


@pytest.mark.parametrize("mode, code", [("401", 401), ("500_echo", 500)])
def test_fake_server_when_failing_answers_its_http_error(mode, code):
    with FakeOpenAIServer(mode) as srv, pytest.raises(urllib.error.HTTPError) as err:
        get(srv.url + "/models", headers={"Authorization": "Bearer sk-echo-me-123456"})
    assert err.value.code == code
    if mode == "500_echo":
        assert "sk-echo-me-123456" in err.value.read().decode()


def test_fake_server_when_garbage_answers_non_json():
    with FakeOpenAIServer("garbage") as srv:
        status, body = get(srv.url + "/models")
    assert status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)


def test_fake_server_when_dropping_closes_without_an_answer():
    with FakeOpenAIServer("drop") as srv, pytest.raises((http.client.RemoteDisconnected, ConnectionError,
                                                         urllib.error.URLError)):
        get(srv.url + "/models")


def test_fake_server_when_hanging_never_answers_within_the_timeout():
    with FakeOpenAIServer("hang", hang_s=5.0) as srv, pytest.raises((TimeoutError, urllib.error.URLError)):
        get(srv.url + "/models", timeout=0.3)


def test_fake_server_when_its_lifetime_passes_stops_by_itself():
    srv = FakeOpenAIServer("ok", lifetime_s=0.2).start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            get(srv.url + "/models", timeout=1.0)
        except OSError:  # URLError (refused), or a reset when it stops mid-answer
            break
        time.sleep(0.05)
    else:
        pytest.fail("the fake server was still answering 20 s after its 0.2 s lifetime")
    srv.stop()  # idempotent after the timer stopped it
