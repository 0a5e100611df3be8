"""The /v1/ gateway on a real uvicorn server (as `make run` starts it), in front of a stand-in
engine that streams slowly."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from playground import services
from playground.models import ApiToken, PlaygroundRun
from tests.support.gateway import (
    GATEWAY_MAX_TOKENS,
    bearer_for,
    session_for,
    sse_data,
    sse_stream,
)
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def _audits() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="playground.request").order_by("id"))


def test_first_chunk_reaches_the_client_before_the_engine_finishes(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.hold_after_first = threading.Event()
    make_deployment("tiny", stub.port)
    url = f"{server.url}/v1/chat/completions"
    with sse_stream(url, CHAT, bearer_for(operator)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = response.iter_raw()
        first = next(chunks)
        assert b"t0 " in first
        assert not stub.finished.is_set(), "the engine is still holding its second chunk"
        stub.hold_after_first.set()
        rest = first + b"".join(chunks)
    assert stub.finished.is_set()
    data = sse_data(rest.decode())
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1
    texts = [json.loads(d)["choices"][0]["delta"]["content"] for d in data[:-1]]
    assert texts == [f"t{i} " for i in range(5)]


def test_client_disconnect_closes_the_engine_request(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.hold_after_first = threading.Event()  # never set: the engine would wait forever
    make_deployment("tiny", stub.port)
    with sse_stream(f"{server.url}/v1/chat/completions", CHAT, bearer_for(operator)) as response:
        assert b"t0 " in next(response.iter_raw())
    wait_for(stub.disconnected.is_set)
    assert not stub.finished.is_set()
    row = wait_for(lambda: _audits() and _audits()[-1])
    assert row.detail["status"] == "client_disconnected"
    assert row.actor == operator


def test_one_audit_row_without_prompt_text(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    deployment = make_deployment("tiny", stub.port)
    secret = "the launch codes are 0000"
    body = {**CHAT, "messages": [{"role": "user", "content": secret}]}
    with sse_stream(f"{server.url}/v1/chat/completions", body, bearer_for(operator)) as r:
        r.read()
    rows = wait_for(_audits)
    assert len(rows) == 1
    row = rows[0]
    assert (row.actor, row.target_type, row.target_id) == (
        operator,
        "deployment",
        str(deployment.pk),
    )
    detail = row.detail
    assert detail["status"] == "ok" and detail["deployment"] == "tiny" and detail["via"] == "bearer"
    assert detail["usage"] == {"prompt": 3, "completion": 5}
    assert detail["ttft_ms"] > 0 and detail["duration_ms"] >= detail["ttft_ms"]
    assert secret not in json.dumps(detail) and "prompt" not in detail


@pytest.fixture
def prompts_audited(gateway_settings: Any) -> None:
    gateway_settings.AUDIT_PROMPTS = True


def test_audit_prompts_on_records_the_prompt(
    prompts_audited: None, asgi_server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    body = {"model": "tiny", "prompt": "count to three", "max_tokens": 4}
    r = httpx.post(f"{asgi_server.url}/v1/completions", json=body, headers=bearer_for(operator))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"].startswith("t0")
    row = wait_for(_audits)[0]
    assert row.detail["prompt"] == "count to three"


@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_too_low_a_role_is_refused(
    server: Any, stub: Any, make_deployment: Any, persona: str, request: pytest.FixtureRequest
) -> None:
    make_deployment("tiny", stub.port)
    user = request.getfixturevalue(persona)
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=bearer_for(user))
    assert r.status_code == 403
    assert "Operator" in r.json()["error"]["message"]
    assert stub.seen == []


def test_anonymous_gets_401_json(server: Any, stub: Any, make_deployment: Any) -> None:
    make_deployment("tiny", stub.port)
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT)
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "unauthenticated"
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(f"{server.url}/v1/models").status_code == 401
    assert stub.seen == []


def test_bearer_token_works_and_a_forged_one_does_not(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    token, raw = services.token_create(user=operator, name="ci")
    headers = {"Authorization": f"Bearer {raw}"}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=headers)
    assert r.status_code == 200, r.text
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None
    forged = {"Authorization": "Bearer sb-not-a-real-token"}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=forged)
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    assert len(stub.seen) == 1


def test_session_callers_need_the_csrf_token(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    cookies, csrf = session_for(operator)
    url = f"{server.url}/v1/chat/completions"
    refused = httpx.post(url, json=CHAT, cookies=cookies)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "csrf_failed"
    accepted = httpx.post(url, json=CHAT, cookies=cookies, headers=csrf)
    assert accepted.status_code == 200, accepted.text
    assert len(stub.seen) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_engine_down_is_a_clear_error_at_once(
    server: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", _closed_port())
    started = time.monotonic()
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers=bearer_for(operator),
        timeout=10,
    )
    assert time.monotonic() - started < 3
    assert r.status_code == 502
    error = r.json()["error"]
    assert error["type"] == "engine_unreachable" and "tiny" in error["message"]
    assert wait_for(_audits)[0].detail["status"] == "engine_unreachable"


def test_engine_error_passes_the_engine_message(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.fail_status = 422
    stub.fail_body = b'{"detail": "Unexpected fields in the request: {\'bogus\'}"}'
    make_deployment("tiny", stub.port)
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers=bearer_for(operator),
    )
    assert r.status_code == 422
    assert "Unexpected fields in the request" in r.json()["error"]["message"]
    stub.fail_status = 500
    r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, headers=bearer_for(operator))
    assert r.status_code == 502 and "answered 500" in r.json()["error"]["message"]


def test_unknown_and_stopped_deployments_are_refused(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("old", stub.port, status="stopped")
    headers = bearer_for(operator)
    r = httpx.post(
        f"{server.url}/v1/chat/completions", json={**CHAT, "model": "old"}, headers=headers
    )
    assert r.status_code == 409 and "stopped" in r.json()["error"]["message"]
    r = httpx.post(
        f"{server.url}/v1/chat/completions", json={**CHAT, "model": "nope"}, headers=headers
    )
    assert r.status_code == 404
    assert stub.seen == []
    assert [row.detail["status"] for row in _audits()] == [
        "deployment_not_running",
        "model_not_found",
    ]


def test_max_tokens_is_capped(server: Any, stub: Any, make_deployment: Any, operator: Any) -> None:
    make_deployment("tiny", stub.port)
    headers, url = bearer_for(operator), f"{server.url}/v1/chat/completions"
    without = {k: v for k, v in CHAT.items() if k != "max_tokens"}
    for body in ({**CHAT, "max_tokens": 100_000}, {**CHAT, "max_completion_tokens": 9999}, without):
        assert httpx.post(url, json=body, headers=headers).status_code == 200
    assert [s.body["max_tokens"] for s in stub.seen] == [GATEWAY_MAX_TOKENS] * 3
    assert all("max_completion_tokens" not in s.body for s in stub.seen)
    small = httpx.post(url, json={**CHAT, "max_tokens": 3}, headers=headers)
    assert small.status_code == 200 and stub.seen[-1].body["max_tokens"] == 3
    bad = httpx.post(url, json={**CHAT, "max_tokens": -1}, headers=headers)
    assert bad.status_code == 400


def test_a_body_that_is_not_json_is_a_400_that_says_why(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    headers, url = bearer_for(operator), f"{server.url}/v1/chat/completions"
    for raw, why in ((b"{nope", "not valid JSON"), (b'{"temperature": NaN}', "NaN")):
        bad = httpx.post(url, content=raw, headers={**headers, "Content-Type": "application/json"})
        assert bad.status_code == 400 and why in bad.json()["error"]["message"]
    assert stub.seen == []


def test_concurrency_limit_answers_429(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.hold_after_first = threading.Event()
    make_deployment("tiny", stub.port)
    headers, url = bearer_for(operator), f"{server.url}/v1/chat/completions"
    with sse_stream(url, CHAT, headers) as one, sse_stream(url, CHAT, headers) as two:
        assert one.status_code == two.status_code == 200
        streams = [one.iter_raw(), two.iter_raw()]  # kept: a dropped iterator hangs up
        assert all(b"t0 " in next(chunks) for chunks in streams)
        third = httpx.post(url, json=CHAT, headers=headers)
        assert third.status_code == 429
        assert "2 requests running" in third.json()["error"]["message"]
        stub.hold_after_first.set()
        assert all(b"[DONE]" in b"".join(chunks) for chunks in streams)
    assert httpx.post(url, json=CHAT, headers=headers).status_code == 200
    assert "rate_limited" in [row.detail["status"] for row in _audits()]


def test_vllm_dialect_gets_the_engine_key_and_is_normalised(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.dialect = "vllm"
    deployment = make_deployment("big", stub.port, engine="vllm")
    headers = {**bearer_for(operator), "X-Shardboard-Playground": "1"}
    with sse_stream(f"{server.url}/v1/chat/completions", {**CHAT, "model": "big"}, headers) as r:
        text = r.read().decode()
    seen = stub.seen[0]
    assert seen.headers["authorization"] == f"Bearer {deployment.engine_api_key()}"
    assert seen.body["model"] == "big" and seen.body["stream_options"] == {"include_usage": True}
    data = sse_data(text)
    assert data.count("[DONE]") == 1 and data[-1] == "[DONE]"
    events = text.split("\n\n")
    assert events[-3].startswith("event: shardboard\ndata: "), "our metrics frame, then [DONE]"
    metrics = json.loads(events[-3].split("data: ", 1)[1])
    chunks = [json.loads(d) for d in data[:-2]]
    assert len(chunks) == 5 and all(c["choices"] for c in chunks), "unasked usage chunk dropped"
    assert metrics["prompt_tokens"] == 3 and metrics["completion_tokens"] == 5
    assert metrics["ttft_ms"] > 0 and metrics["status"] == "ok"
    run = PlaygroundRun.objects.get(pk=metrics["run_id"])
    assert run.answer == "t0 t1 t2 t3 t4 " and run.user == operator


def test_transformers_dialect_omits_model_and_key_and_gains_done(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    with sse_stream(
        f"{server.url}/v1/completions", {"model": "tiny", "prompt": "1 +"}, bearer_for(operator)
    ) as r:
        text = r.read().decode()
    seen = stub.seen[0]
    assert "model" not in seen.body and "authorization" not in seen.headers
    assert sse_data(text)[-1] == "[DONE]"
    assert "event: shardboard" not in text, "plain API clients get no extra events"


def test_models_lists_running_deployments(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    make_deployment("gone", stub.port, status="stopped")
    r = httpx.get(f"{server.url}/v1/models", headers=bearer_for(operator))
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["tiny"]


def test_the_openai_client_streams_through_the_gateway(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    from openai import OpenAI

    make_deployment("tiny", stub.port)
    _, raw = services.token_create(user=operator, name="sdk")
    client = OpenAI(base_url=f"{server.url}/v1", api_key=raw, max_retries=0)
    stream = client.chat.completions.create(
        model="tiny", messages=CHAT["messages"], max_tokens=5, stream=True
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "t0 t1 t2 t3 t4 "
    )
