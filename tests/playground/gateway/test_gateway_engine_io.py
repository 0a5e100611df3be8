"""The gateway's connections to engines (playground.gateway.engine_client): reuse, hang-ups,
timeouts; and what the lean /v1/ handler keeps of Django's."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.gateway import bearer_for, sse_data, sse_stream

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def test_an_engine_that_dropped_an_idle_connection_still_answers_the_next_request(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.close_after_response = True
    make_deployment("tiny", stub.port)
    url, headers = f"{server.url}/v1/chat/completions", bearer_for(operator)
    for _ in range(3):
        with sse_stream(url, CHAT, headers) as r:
            assert r.status_code == 200 and sse_data(r.read().decode())[-1] == "[DONE]"
        time.sleep(0.1)  # the hang-up reaches the gateway while its connection is idle
    assert len(stub.seen) == 3


def test_keep_alive_connections_are_reused(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    url, headers = f"{server.url}/v1/chat/completions", bearer_for(operator)
    for _ in range(3):
        assert httpx.post(url, json=CHAT, headers=headers).status_code == 200
    assert stub.connections == 1, f"one connection for three requests, not {stub.connections}"


@pytest.fixture
def short_read_timeout(gateway_settings: Any) -> None:
    gateway_settings.PLAYGROUND_READ_TIMEOUT_S = 1.0


def test_an_engine_that_stalls_mid_answer_ends_in_a_timeout_frame(
    short_read_timeout: None, asgi_server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.hold_after_first = threading.Event()  # never set
    make_deployment("tiny", stub.port)
    started = time.monotonic()
    url = f"{asgi_server.url}/v1/chat/completions"
    with sse_stream(url, CHAT, bearer_for(operator)) as r:
        data = sse_data(r.read().decode())
    assert time.monotonic() - started < 5
    error = json.loads(data[-2])["error"]
    assert error["type"] == "engine_timeout" and data[-1] == "[DONE]"


def test_the_lean_gateway_path_checks_the_host_and_sets_security_headers(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    """/v1/ skips Django's middleware stack (playground.asgi); what it must keep, it keeps."""
    make_deployment("tiny", stub.port)
    url, headers = f"{server.url}/v1/chat/completions", bearer_for(operator)
    forged = httpx.post(url, json=CHAT, headers={**headers, "Host": "evil.example"})
    assert forged.status_code == 400 and stub.seen == []
    assert forged.json()["error"]["type"] == "invalid_request_error"  # JSON, not an HTML page
    r = httpx.post(url, json=CHAT, headers=headers)
    assert r.status_code == 200
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    again = httpx.post(url, json=CHAT, headers={**headers, "Host": "evil.example:80"})
    assert again.status_code == 400 and len(stub.seen) == 1  # a host that passed is not a pass
    missing = httpx.post(f"{server.url}/v1/nothing-here", json=CHAT, headers=headers)
    assert missing.status_code == 404 and "Traceback" not in missing.text
    assert missing.json() == {"error": {"message": "Not found.", "type": "not_found_error"}}
    slash = httpx.post(f"{url}/", json=CHAT, headers=headers)  # not a view: Django resolves
    assert slash.status_code == 404 and slash.json()["error"]["type"] == "not_found_error"
    wrong = httpx.get(url, headers=headers)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert len(stub.seen) == 1


def test_gateway_errors_are_json_without_internals() -> None:
    from django.http import HttpResponse, HttpResponseServerError

    from playground.gateway.asgi import as_api_error

    crash = as_api_error(HttpResponseServerError("<h1>Server Error (500)</h1>"))
    assert crash.status_code == 500 and crash["Content-Type"] == "application/json"
    assert b"Internal error" in crash.content and b"<h1>" not in crash.content
    already = HttpResponse(b'{"error": {}}', content_type="application/json", status=429)
    assert as_api_error(already) is already
