"""/v1/responses, /v1/messages (+ count_tokens) and /v1/embeddings through the gateway, driven
by the real OpenAI and Anthropic SDKs: against the vLLM 0.33 stand-in
(tests/support/protocol_engine.py) and, for /v1/responses, a real transformers serve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from playground import services
from tests.support.gateway import GATEWAY_MAX_TOKENS
from tests.support.protocol_engine import ProtocolEngine
from tests.support.waiting import wait_for

USER = [{"role": "user", "content": "say three words"}]


@pytest.fixture
def engine() -> Iterator[ProtocolEngine]:
    standin = ProtocolEngine().start()
    yield standin
    standin.stop()


@pytest.fixture
def big(engine: ProtocolEngine, make_deployment: Any) -> Any:
    """A vLLM deployment whose engine is the stand-in, holding the deployment's engine key."""
    deployment = make_deployment("big", engine.port, engine="vllm")
    engine.api_key = deployment.engine_api_key()
    return deployment


def _raw_token(user: Any) -> str:
    return services.token_create(user=user, name="sdk")[1]


def _audit(endpoint: str, count: int = 1) -> list[AuditEvent]:
    def rows() -> list[AuditEvent] | None:
        found = list(
            AuditEvent.objects.filter(action="playground.request", detail__endpoint=endpoint)
        )
        return found if len(found) >= count else None

    return wait_for(rows)


def test_openai_responses_create_retrieve_and_cancel(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any, admin_user: Any
) -> None:
    from openai import NotFoundError, OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(operator), max_retries=0)
    response = client.responses.create(model="big", input="hello there", max_output_tokens=1000)
    assert response.output_text == "w0 w1 w2 w3 w4 " and response.usage is not None
    sent = engine.seen[0]
    assert sent.path == "/v1/responses" and sent.body["model"] == "big"
    assert sent.body["max_output_tokens"] == GATEWAY_MAX_TOKENS  # capped, and no max_tokens
    assert "max_tokens" not in sent.body and "stream_options" not in sent.body
    assert sent.headers["authorization"] == f"Bearer {big.engine_api_key()}"
    row = _audit("/v1/responses")[0]  # the answer's, written before the follow-ups below
    assert row.detail["status"] == "ok" and row.detail["usage"] == {"prompt": 2, "completion": 5}
    assert row.detail["length"] == {"asked": 1000, "sent": GATEWAY_MAX_TOKENS}

    again = client.responses.retrieve(response.id)  # the replica that keeps it answers
    assert again.id == response.id and engine.seen[-1].method == "GET"
    assert client.responses.cancel(response.id).status == "cancelled"
    assert engine.seen[-1].path == f"/v1/responses/{response.id}/cancel"
    other = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(admin_user), max_retries=0)
    seen = len(engine.seen)
    with pytest.raises(NotFoundError):  # another caller's response is not found, not relayed
        other.responses.retrieve(response.id)
    with pytest.raises(NotFoundError):
        client.responses.retrieve("resp_never_made")
    assert len(engine.seen) == seen
    rows = sorted(_audit("/v1/responses", 5), key=lambda r: r.pk)
    follow_ups = [r.detail for r in rows if "follow_up" in r.detail]
    assert [d["http_status"] for d in follow_ups] == [200, 200, 404, 404]
    assert follow_ups[1]["follow_up"] == "cancel"


def test_openai_responses_stream_keeps_its_events(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(operator), max_retries=0)
    stream = client.responses.create(model="big", input="one two three", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "w0 w1 w2 w3 w4 "
    row = _audit("/v1/responses")[0]
    assert row.detail["stream"] is True and row.detail["usage"] == {"prompt": 3, "completion": 5}
    assert row.detail["ttft_ms"] is not None
    rid = events[0].response.id  # remembered from the first event: a cancel finds its replica
    assert client.responses.retrieve(rid).status == "completed"
    replay = httpx.get(
        f"{server.url}/v1/responses/{rid}?stream=true&starting_after=0&evil=1",
        headers={"Authorization": f"Bearer {_raw_token(operator)}"},
    )
    assert replay.text.startswith("event: response.completed\ndata: {")
    assert engine.seen[-1].path == f"/v1/responses/{rid}?stream=true&starting_after=0"
    raw = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": "big", "input": "hi", "stream": True},
        headers={"Authorization": f"Bearer {_raw_token(operator)}"},
    )
    assert raw.text.startswith("event: response.created\ndata: {")  # event lines kept
    assert "[DONE]" not in raw.text


@pytest.fixture
def least_loaded(gateway_settings: Any) -> None:
    """Least loaded only (set before the server forks): ties rotate between the replicas, so
    nothing but the pin keeps a continuation on one of them."""
    gateway_settings.PLAYGROUND_ROUTING_LOAD_FACTOR = 0


def test_a_continuation_goes_to_the_replica_that_keeps_the_previous_response(
    least_loaded: None, server: Any, make_deployment: Any, operator: Any
) -> None:
    from openai import OpenAI

    from deployments.models import Deployment

    engines = [ProtocolEngine().start(), ProtocolEngine().start()]
    try:
        one = make_deployment("pair", engines[0].port, engine="vllm")
        two = make_deployment("pair-2", engines[1].port, engine="vllm")
        Deployment.objects.filter(pk=two.pk).update(name="pair", replica_of=one, replica_index=2)
        engines[0].api_key, engines[1].api_key = one.engine_api_key(), two.engine_api_key()
        client = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(operator), max_retries=0)
        made = client.responses.create(model="pair", input="hi")
        for _ in range(4):
            client.responses.create(model="pair", input="and?", previous_response_id=made.id)
        counts = sorted(len(e.seen) for e in engines)
        assert counts == [0, 5], "every continuation on the replica that keeps its history"
        for _ in range(4):  # new conversations still spread over both
            client.responses.create(model="pair", input="new")
        assert min(len(e.seen) for e in engines) >= 1
    finally:
        for engine in engines:
            engine.stop()


def test_openai_embeddings(server: Any, engine: ProtocolEngine, big: Any, operator: Any) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(operator), max_retries=0)
    result = client.embeddings.create(model="big", input=["a b c", "d e"])
    assert [len(d.embedding) for d in result.data] == [8, 8]
    assert result.usage.prompt_tokens == 5
    assert engine.seen[0].body["encoding_format"] == "base64"  # the SDK's default, passed on
    row = _audit("/v1/embeddings")[0]
    assert row.detail["usage"]["prompt"] == 5 and "length" not in row.detail


def test_anthropic_messages_create_stream_and_count_tokens(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    from anthropic import Anthropic

    client = Anthropic(base_url=server.url, api_key=_raw_token(operator), max_retries=0)
    message = client.messages.create(model="big", max_tokens=3, messages=USER)
    assert message.content[0].text == "w0 w1 w2 " and message.stop_reason == "max_tokens"
    assert message.usage.input_tokens == 3 and message.usage.output_tokens == 3
    assert engine.seen[0].headers["authorization"] == f"Bearer {big.engine_api_key()}"
    with client.messages.stream(model="big", max_tokens=100, messages=USER) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "w0 w1 w2 w3 w4 " and final.usage.output_tokens == 5
    counted = client.messages.count_tokens(model="big", messages=USER, system="be brief")
    assert counted.input_tokens == 5
    rows = sorted(_audit("/v1/messages", 2), key=lambda r: r.pk)
    assert [r.detail["usage"] for r in rows] == [
        {"prompt": 3, "completion": 3},
        {"prompt": 3, "completion": 5},
    ]
    assert rows[1].detail["stream"] is True and rows[1].detail["ttft_ms"] is not None
    assert _audit("/v1/messages/count_tokens")[0].detail["status"] == "ok"


def test_anthropic_stream_is_relayed_event_by_event_with_its_event_lines(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    body = {"model": "big", "max_tokens": 2, "messages": USER, "stream": True}
    headers = {"x-api-key": _raw_token(operator)}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, headers=headers) as r:
        text = r.read().decode()
    events = [e for e in text.split("\n\n") if e]
    names = [e.split("\n", 1)[0] for e in events]
    assert names == [
        "event: message_start",
        "event: content_block_start",
        "event: content_block_delta",
        "event: content_block_delta",
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]


def test_an_engine_that_dies_mid_stream_ends_it_with_anthropics_error_event(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    from anthropic import Anthropic, APIStatusError

    engine.break_after = 4  # message_start, content_block_start, two text deltas
    client = Anthropic(base_url=server.url, api_key=_raw_token(operator), max_retries=0)
    texts: list[str] = []
    with pytest.raises(APIStatusError) as broken:
        with client.messages.stream(model="big", max_tokens=5, messages=USER) as stream:
            texts.extend(stream.text_stream)
    assert texts == ["w0 ", "w1 "]  # what came before the engine died reached the client
    assert "closed the connection" in str(broken.value)
    row = _audit("/v1/messages")[0]
    assert row.detail["http_status"] == 502 and row.detail["status"] == "engine_error"


def test_transformers_serve_answers_responses_through_the_gateway(
    server: Any, tiny_engine: Any, make_deployment: Any, operator: Any
) -> None:
    """A real engine: transformers serve answers /v1/responses (reference/apis.md §2)."""
    from openai import OpenAI

    make_deployment("tiny", tiny_engine.port)
    client = OpenAI(base_url=f"{server.url}/v1", api_key=_raw_token(operator), max_retries=0)
    response = client.responses.create(model="tiny", input="hello", max_output_tokens=4)
    assert response.usage is not None and 1 <= response.usage.output_tokens <= 4
    events = list(
        client.responses.create(model="tiny", input="hi", max_output_tokens=3, stream=True)
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    rows = sorted(_audit("/v1/responses", 2), key=lambda r: r.pk)
    assert all(r.detail["status"] == "ok" for r in rows)
    assert all((r.detail["usage"]["completion"] or 0) >= 1 for r in rows)


def test_follow_ups_count_against_the_tokens_requests_per_minute(
    server: Any, engine: ProtocolEngine, big: Any, operator: Any
) -> None:
    """A retrieve or cancel is a request like any other for the rate limits: a client polling a
    response is not an unlimited way into the engine."""
    from openai import OpenAI, RateLimitError

    from playground import token_limits

    token, raw = services.token_create(user=operator, name="poller")
    token_limits.limits_set(user=operator, token_id=token.pk, rpm_limit=3, tokens_per_day_limit=None)  # fmt: skip
    left_s = 60 - time.time() % 60
    if left_s < 20:  # the counts are per UTC minute: start with 20 s of this one left
        time.sleep(left_s + 0.5)
    client = OpenAI(base_url=f"{server.url}/v1", api_key=raw, max_retries=0)
    response = client.responses.create(model="big", input="hello there")
    assert client.responses.retrieve(response.id).id == response.id
    assert client.responses.retrieve(response.id).id == response.id
    seen = len(engine.seen)
    with pytest.raises(RateLimitError) as refused:
        client.responses.retrieve(response.id)
    assert "3 requests per minute" in refused.value.message
    assert refused.value.response.headers["Retry-After"]
    assert len(engine.seen) == seen  # refused before the engine was asked
    rows = sorted(_audit("/v1/responses", 4), key=lambda r: r.pk)
    assert [r.detail["http_status"] for r in rows if "follow_up" in r.detail] == [200, 200, 429]
