"""What the gateway refuses on /v1/responses, /v1/messages (+ count_tokens) and /v1/embeddings,
each in its protocol's error shape: fields it does not forward, an engine that lacks the path,
callers without the scope or role, and the rate and token limits (usage read from each
protocol's own usage block)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from playground import services
from playground.models import Scope
from tests.support.private_redis import PrivateRedis
from tests.support.protocol_engine import ProtocolEngine
from tests.support.waiting import wait_for

USER = [{"role": "user", "content": "say three words"}]
MESSAGE = {"model": "big", "max_tokens": 5, "messages": USER}


@pytest.fixture
def engine() -> Iterator[ProtocolEngine]:
    standin = ProtocolEngine().start()
    yield standin
    standin.stop()


@pytest.fixture
def big(engine: ProtocolEngine, make_deployment: Any) -> Any:
    deployment = make_deployment("big", engine.port, engine="vllm")
    engine.api_key = deployment.engine_api_key()
    return deployment


def _token(user: Any, scopes: tuple[str, ...] = (Scope.INFER,)) -> str:
    return services.token_create(user=user, name="sdk", scopes=scopes)[1]


def _anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    return str(body["error"]["message"])


def test_fields_the_gateway_does_not_forward_are_refused_by_name(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    from anthropic import Anthropic, BadRequestError
    from openai import BadRequestError as OpenAIBadRequest
    from openai import OpenAI

    claude = Anthropic(base_url=server.url, api_key=_token(operator), max_retries=0)
    with pytest.raises(BadRequestError) as refused:
        claude.messages.create(**MESSAGE, extra_body={"vllm_xargs": {"a": 1}})  # type: ignore[arg-type]
    assert refused.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "'vllm_xargs' is not a field the gateway forwards to /v1/messages",
        },
    }
    openai = OpenAI(base_url=f"{server.url}/v1", api_key=_token(operator), max_retries=0)
    with pytest.raises(OpenAIBadRequest) as bad:
        openai.responses.create(model="big", input="hi", extra_body={"kv_transfer_params": {}})
    assert "'kv_transfer_params' is not a field the gateway forwards to /v1/responses" in str(
        bad.value
    )
    with pytest.raises(OpenAIBadRequest, match="'priority' is not a field"):
        openai.embeddings.create(model="big", input="x", extra_body={"priority": 9})
    headers = {"x-api-key": _token(operator)}
    missing = httpx.post(
        f"{server.url}/v1/messages", json={"model": "big", "messages": USER}, headers=headers
    )
    assert _anthropic_error(missing, 400, "invalid_request_error") == "'max_tokens' is required"
    assert engine.seen == []
    rows = wait_for(lambda: AuditEvent.objects.filter(detail__http_status=400).count() == 4)
    assert rows


def test_an_engine_without_the_path_is_a_4xx_naming_it_before_anything_is_sent(
    server: Any, engine: ProtocolEngine, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", engine.port)  # a transformers serve deployment
    headers = {"Authorization": f"Bearer {_token(operator)}"}
    message = {**MESSAGE, "model": "tiny"}
    answer = httpx.post(f"{server.url}/v1/messages", json=message, headers=headers)
    assert _anthropic_error(answer, 400, "invalid_request_error") == (
        "'tiny': this deployment runs on transformers serve, which does not serve /v1/messages"
    )
    counted = httpx.post(
        f"{server.url}/v1/messages/count_tokens",
        json={"model": "tiny", "messages": USER},
        headers=headers,
    )
    assert "transformers serve" in _anthropic_error(counted, 400, "invalid_request_error")
    embedded = httpx.post(
        f"{server.url}/v1/embeddings", json={"model": "tiny", "input": "x"}, headers=headers
    )
    assert embedded.status_code == 400
    assert embedded.json()["error"]["type"] == "unsupported_endpoint"
    assert "does not serve /v1/embeddings" in embedded.json()["error"]["message"]
    assert engine.seen == []


def test_callers_without_the_scope_or_the_role_are_refused_in_anthropics_shape(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any, viewer: Any
) -> None:
    from anthropic import Anthropic, AuthenticationError, PermissionDeniedError

    url = f"{server.url}/v1/messages"
    read_only = Anthropic(
        base_url=server.url, api_key=_token(operator, (Scope.READ,)), max_retries=0
    )
    with pytest.raises(PermissionDeniedError) as scoped:
        read_only.messages.create(**MESSAGE)  # type: ignore[arg-type]
    assert "lacks the 'infer' scope" in scoped.value.body["error"]["message"]  # type: ignore[index]
    assert scoped.value.body["type"] == "error"  # type: ignore[index]
    viewer_answer = httpx.post(url, json=MESSAGE, headers={"x-api-key": _token(viewer)})
    assert "Operator role" in _anthropic_error(viewer_answer, 403, "permission_error")
    with pytest.raises(AuthenticationError):
        Anthropic(base_url=server.url, api_key="sb-forged", max_retries=0).messages.create(
            **MESSAGE  # type: ignore[arg-type]
        )
    anonymous = httpx.post(url, json=MESSAGE)
    _anthropic_error(anonymous, 401, "authentication_error")
    wrong_method = httpx.get(url, headers={"x-api-key": _token(operator)})
    assert wrong_method.status_code == 405 and wrong_method.json()["type"] == "error"
    assert engine.seen == []


def _not_near_a_minute_end() -> None:
    """Requests are counted per UTC minute: start with 20 s before the next one."""
    left = 60 - time.time() % 60
    if left < 20:
        time.sleep(left + 0.5)


@pytest.fixture
def limited(
    private_redis: PrivateRedis, gateway_settings: Any, request: pytest.FixtureRequest
) -> Any:
    """A gateway of its own Redis, started with a request and a token limit per API token."""
    gateway_settings.REDIS_URL = private_redis.url
    gateway_settings.GATEWAY_RPM_PER_TOKEN = 3
    gateway_settings.GATEWAY_TOKENS_PER_DAY_PER_TOKEN = 12
    return request.getfixturevalue("asgi_server")


def test_limits_apply_with_usage_read_from_each_protocols_own_block(
    limited: Any, engine: ProtocolEngine, big: Any, operator: Any, private_redis: PrivateRedis
) -> None:
    import redis

    client = redis.Redis.from_url(private_redis.url)

    def used() -> int:
        return sum(int(client.get(k) or 0) for k in client.keys("*:tpd:t:*"))

    headers = {"x-api-key": _token(operator)}
    first = httpx.post(f"{limited.url}/v1/messages", json=MESSAGE, headers=headers)
    assert first.status_code == 200
    wait_for(lambda: used() == 8)  # Anthropic usage: 3 input + 5 output tokens
    stream = {**MESSAGE, "stream": True}
    second = httpx.post(f"{limited.url}/v1/messages", json=stream, headers=headers)
    assert second.status_code == 200 and "event: message_stop" in second.text
    wait_for(lambda: used() == 16)  # read from message_start and message_delta
    refused = httpx.post(f"{limited.url}/v1/messages", json=MESSAGE, headers=headers)
    message = _anthropic_error(refused, 429, "rate_limit_error")
    assert "12 tokens per day" in message and int(refused.headers["Retry-After"]) > 0

    bearer = {"Authorization": f"Bearer {_token(operator)}"}
    _not_near_a_minute_end()
    answers = [
        httpx.post(
            f"{limited.url}/v1/embeddings", json={"model": "big", "input": "a b"}, headers=bearer
        )
        for _ in range(4)
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]  # 3 requests a minute
    assert answers[3].json()["error"]["code"] == "rate_limit_exceeded"
    limited_rows = AuditEvent.objects.filter(detail__status="rate_limited")
    wait_for(lambda: limited_rows.count() == 2)
    assert {r.detail["endpoint"] for r in limited_rows} == {"/v1/messages", "/v1/embeddings"}


@pytest.fixture
def small_bodies(gateway_settings: Any) -> None:
    gateway_settings.PLAYGROUND_MAX_BODY_BYTES = 4096  # read when the server forks


def test_a_body_past_the_limit_is_refused_before_it_is_read_in_anthropics_shape(
    small_bodies: None, server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    huge = {**MESSAGE, "messages": [{"role": "user", "content": "x" * 8000}]}
    headers = {"x-api-key": _token(operator)}
    answer = httpx.post(f"{server.url}/v1/messages", json=huge, headers=headers)
    assert "larger than the gateway's limit of 4,096 bytes" in _anthropic_error(
        answer, 413, "request_too_large"
    )
    anonymous = httpx.post(f"{server.url}/v1/messages/count_tokens", json=MESSAGE)
    _anthropic_error(anonymous, 401, "authentication_error")  # refused before the body
    responses = httpx.post(
        f"{server.url}/v1/responses", json={"model": "big", "input": "x" * 8000}, headers=headers
    )
    assert responses.status_code == 413 and responses.json()["error"]["type"] == "request_too_large"
    assert engine.seen == []
