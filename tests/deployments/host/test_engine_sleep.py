"""The host's sleep and wake requests, against a small real HTTP server that answers as vLLM
0.33's dev-mode routes do (the stand-in engine has no /collective_rpc, which a level-2 wake
needs to load the weights again)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from deployments.host import engine_sleep

ANSWERS: dict[str, Any] = {
    "/sleep": {"status": "sleeping", "level": 2},
    "/wake_up": {"status": "awake", "tags": None},
    "/collective_rpc": {"results": [None]},
}


@pytest.fixture
def engine() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    seen: list[tuple[str, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path, _, query = self.path.partition("?")
            seen.append((path, query, body))
            answer = json.dumps(ANSWERS.get(path, {"status": "sleeping"})).encode()
            self.send_response(200 if path in ANSWERS else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_level_two_wakes_then_reloads_the_weights(engine: Any) -> None:
    url, seen = engine
    engine_sleep.put_to_sleep(url, 2)
    engine_sleep.wake_up(url, 2)
    assert [(p, q) for p, q, _ in seen] == [
        ("/sleep", "level=2&mode=wait"),
        ("/wake_up", ""),
        ("/collective_rpc", ""),
    ]
    assert json.loads(seen[2][2]) == {"method": "reload_weights"}


def test_level_one_wakes_without_a_reload(engine: Any) -> None:
    url, seen = engine
    engine_sleep.wake_up(url, 1)
    assert [p for p, _, _ in seen] == ["/wake_up"]


def test_a_refused_route_is_an_error_naming_it(engine: Any) -> None:
    url, _ = engine
    with pytest.raises(engine_sleep.EngineSleepError, match="/is_sleeping"):
        engine_sleep.is_sleeping(url)  # a GET this server does not answer
