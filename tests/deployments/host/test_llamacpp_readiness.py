"""The llama-server probe waits through /health's 503 "Loading model" (reference llamacpp.md
§3.2: the listener is up before the model), which the real binary on a tiny GGUF leaves too
soon to observe: an HTTP server on loopback answers as llama-server does while loading."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployments.engines import LaunchSpec, LlamaServerAdapter, ReadinessProbe
from deployments.host import supervisor as sv

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
KEY = "sk-probe"


class _Loading(BaseHTTPRequestHandler):
    loading_answers = 3
    health_calls = 0

    def do_GET(self) -> None:
        if self.path == "/health":
            type(self).health_calls += 1
            if type(self).health_calls <= self.loading_answers:
                return self._answer(503, LOADING)
            return self._answer(200, {"status": "ok"})
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._answer(401, {"error": {"code": 401, "message": "Invalid API Key"}})
        return self._answer(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def loading_server() -> Iterator[int]:
    _Loading.health_calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Loading)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _command(port: int, key: str) -> tuple[str, ReadinessProbe]:
    spec = LaunchSpec(
        deployment_id="1",
        model="/models/tiny.gguf",
        port=port,
        served_model_name="tiny",
        api_key=key,
        device="cpu",
    )
    command = LlamaServerAdapter("llama-server").build(spec)
    return command.base_url, command.probe


def test_ready_only_after_the_loading_answers(loading_server: int) -> None:
    url, probe = _command(loading_server, KEY)
    result = sv.wait_ready(url, probe, 30.0, lambda: True, poll_s=0.05)
    assert result.ready, result.reason
    assert _Loading.health_calls == _Loading.loading_answers + 1


def test_a_wrong_key_is_unauthorized_not_ready(loading_server: int) -> None:
    url, probe = _command(loading_server, "sk-wrong")
    result = sv.wait_ready(url, probe, 30.0, lambda: True, poll_s=0.05)
    assert result.outcome == "unauthorized"
