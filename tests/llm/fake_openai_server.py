"""A fake OpenAI-compatible server for fault-injection tests (standard library only).

``FakeOpenAIServer(mode)`` listens on 127.0.0.1 on an ephemeral port in a daemon thread
and answers ``GET /v1/models``, ``POST /v1/completions`` and ``POST /v1/chat/completions``
according to ``mode``:

- ``ok``: well-formed answers (scoring logprobs favour BUY, generation "HOLD | 80% | ...");
- ``refuse``: nothing listens on the port (connection refused);
- ``drop``: accepts the connection and closes it without answering;
- ``401``: every request is refused as unauthorised;
- ``500_echo``: HTTP 500 whose body echoes the Authorization header (the API key);
- ``garbage``: HTTP 200 with a body that is not JSON;
- ``hang``: never answers (holds the request until ``hang_s`` passes or the server stops).

``mode`` may be changed while the server runs. The server is bounded: it stops by
itself after ``lifetime_s`` seconds and in ``stop()``/``__exit__``; a hanging request
ends when the server stops. ``requests`` records ``(method, path, headers)`` of each.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "refuse", "drop", "401", "500_echo", "garbage", "hang")
MODEL_ID = "fake-model"


class FakeOpenAIServer:
    """See the module docstring."""

    def __init__(self, mode: str = "ok", *, lifetime_s: float = 60.0, hang_s: float = 30.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use one of {MODES}")
        self.mode = mode
        self.hang_s = hang_s
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._stopped = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None
        self._lifetime_s = lifetime_s
        self.port = 0

    # ------------------------------------------------------------------ life cycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        if self.mode == "refuse":  # a port that was free a moment ago: nothing listens there
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            return self
        server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai",
                         daemon=True).start()
        self._timer = threading.Timer(self._lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ answers
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, code: int, obj: object) -> None:
                self._send(code, json.dumps(obj).encode())

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                fake.requests.append((method, self.path, dict(self.headers)))
                mode = fake.mode
                if mode == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if mode == "hang":
                    fake._stopped.wait(fake.hang_s)
                    self.close_connection = True
                    return
                if mode == "401":
                    return self._json(401, {"error": {"message": "Incorrect API key provided",
                                                      "code": "invalid_api_key"}})
                if mode == "500_echo":
                    auth = self.headers.get("Authorization", "")
                    return self._send(500, f"internal error while handling request with {auth}".encode(), "text/plain")
                if mode == "garbage":
                    return self._send(200, b"<html>502 Bad Gateway from a proxy</html>", "text/html")
                if method == "GET":
                    return self._json(200, {"object": "list", "data": [{"id": MODEL_ID}]})
                body = json.loads(raw or b"{}")
                if self.path.endswith("/chat/completions"):
                    if body.get("logprobs"):
                        top = [{"token": " BUY", "logprob": math.log(0.6)},
                               {"token": " HOLD", "logprob": math.log(0.3)}]
                        return self._json(200, {"choices": [{"message": {"content": " BUY"},
                                                             "logprobs": {"content": [{"top_logprobs": top}]}}]})
                    return self._json(200, {"choices": [{"message": {"content": "HOLD | 80% | wait for a setup"}}]})
                top_lp = {" BUY": math.log(0.5), " HOLD": math.log(0.2), " SELL": math.log(0.1)}
                return self._json(200, {"choices": [{"text": " BUY", "logprobs": {"top_logprobs": [top_lp]}}]})

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

        return Handler
