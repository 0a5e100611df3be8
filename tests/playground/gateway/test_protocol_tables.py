"""The per-path table of the gateway's protocols (playground.gateway.protocols) and the usage
meters of Responses and Anthropic Messages (playground.gateway.meters). Pure: no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from playground.gateway import protocols
from playground.gateway.meters import MessagesMeter, ResponsesMeter
from playground.gateway.payload import PayloadError, cap_length, engine_body, parse_call

USER = [{"role": "user", "content": "hi"}]


def _parse(kind: Any, body: dict[str, Any]) -> Any:
    return parse_call(json.dumps(body).encode(), kind, max_choices=4)


@pytest.mark.parametrize(
    ("kind", "body", "length_field", "sent"),
    [
        ("chat", {"model": "m", "messages": USER, "max_completion_tokens": 99}, "max_tokens", 10),
        (
            "responses",
            {"model": "m", "input": "hi", "max_output_tokens": 5},
            "max_output_tokens",
            5,
        ),
        ("responses", {"model": "m", "input": "hi"}, "max_output_tokens", 10),
        ("messages", {"model": "m", "messages": USER, "max_tokens": 50}, "max_tokens", 10),
    ],
)
def test_each_path_caps_its_own_length_field(
    kind: Any, body: dict[str, Any], length_field: str, sent: int
) -> None:
    capped, length = cap_length(_parse(kind, body), 10)
    assert capped[length_field] == sent and length is not None and length.sent == sent
    others = {"max_tokens", "max_completion_tokens", "max_output_tokens"} - {length_field}
    assert not others & set(capped)


@pytest.mark.parametrize("kind", ["embeddings", "count_tokens"])
def test_paths_that_generate_nothing_have_no_length(kind: Any) -> None:
    key = protocols.PROTOCOLS[kind].input_key
    body = {"model": "m", key: USER if key == "messages" else "hi"}
    capped, length = cap_length(_parse(kind, body), 10)
    assert length is None and capped == body


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        ("messages", {"model": "m", "messages": USER}, "'max_tokens' is required"),
        ("messages", {"model": "m", "messages": [], "max_tokens": 1}, "'messages' must be"),
        ("responses", {"model": "m"}, "'input' must be a string or a list"),
        ("embeddings", {"model": "m", "input": 3}, "'input' must be a string or a list"),
        (
            "messages",
            {"model": "m", "messages": USER, "max_tokens": 1, "priority": 1},
            "'priority'",
        ),
        (
            "responses",
            {"model": "m", "input": "x", "chat_template_kwargs": {}},
            "'chat_template_kwargs'",
        ),
        (
            "embeddings",
            {"model": "m", "input": "x", "dimensions": 0},
            "'dimensions' must be between",
        ),
        (
            "count_tokens",
            {"model": "m", "messages": USER, "max_tokens": 1},
            "to /v1/messages/count_tokens",
        ),
    ],
)
def test_bodies_are_refused_naming_the_field(kind: Any, body: dict[str, Any], message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        _parse(kind, body)


def test_streams_ask_usage_only_where_the_protocol_has_stream_options() -> None:
    chat = _parse("chat", {"model": "m", "messages": USER, "stream": True})
    messages = _parse("messages", {"model": "m", "messages": USER, "max_tokens": 1, "stream": True})
    assert chat.usage_in_stream and not chat.wants_usage
    assert not messages.usage_in_stream and messages.wants_usage  # nothing of it dropped
    assert "stream_options" not in engine_body(messages.body, stream=False, served_model="m")
    assert _parse("responses", {"model": "m", "input": "x"}).body["stream"] is False


def test_which_engines_serve_which_paths() -> None:
    served = {
        kind: sorted(
            e for e in ("vllm", "transformers", "llamacpp") if protocols.unserved(kind, e) is None
        )
        for kind in protocols.PROTOCOLS
    }
    assert served["responses"] == ["llamacpp", "transformers", "vllm"]
    assert (
        served["messages"] == served["count_tokens"] == served["embeddings"] == ["llamacpp", "vllm"]
    )
    assert protocols.unserved("messages", "transformers") == (
        "this deployment runs on transformers serve, which does not serve /v1/messages"
    )


def test_the_responses_meter_reads_a_stream_and_tells_the_id_once() -> None:
    seen: list[str] = []
    meter = ResponsesMeter(started_s=0.0, on_id=seen.append)
    created = {"id": "resp_1", "object": "response", "status": "in_progress", "usage": None}
    done = {**created, "status": "completed", "usage": {"input_tokens": 7, "output_tokens": 2}}
    meter.observe({"type": "response.created", "response": created}, 0.1)
    meter.observe({"type": "response.output_text.delta", "delta": "a"}, 0.2)
    meter.observe({"type": "response.output_text.delta", "delta": "b"}, 0.3)
    meter.observe({"type": "response.completed", "response": done}, 0.4)
    timings = meter.timings(0.5)
    assert seen == ["resp_1"] and meter.answer == "ab" and meter.finish_reason == "completed"
    assert (timings["prompt_tokens"], timings["completion_tokens"], timings["ttft_ms"]) == (
        7,
        2,
        200.0,
    )
    whole = ResponsesMeter(started_s=0.0)
    text = {"type": "output_text", "text": "hello"}
    whole.observe({**done, "output": [{"type": "message", "content": [text]}]}, 1.0)
    assert whole.answer == "hello" and whole.response_id == "resp_1"
    failed = ResponsesMeter(started_s=0.0)
    failed.observe({"type": "error", "code": "x", "message": "engine died"}, 1.0)
    assert failed.error == "engine died"


def test_the_messages_meter_counts_cached_prompt_tokens_and_the_last_output() -> None:
    meter = MessagesMeter(started_s=0.0)
    start = {"usage": {"input_tokens": 2, "cache_read_input_tokens": 30, "output_tokens": 0}}
    meter.observe({"type": "message_start", "message": start}, 0.1)
    delta = {"type": "text_delta", "text": "x"}
    meter.observe({"type": "content_block_delta", "index": 0, "delta": delta}, 0.2)
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 4},
    }
    meter.observe(end, 0.3)
    assert (meter.prompt_tokens, meter.completion_tokens) == (32, 4)
    assert meter.finish_reason == "end_turn" and meter.answer == "x"
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    meter.observe(error, 0.4)
    assert meter.error == "busy"


def test_error_frames_in_each_protocols_stream_shape() -> None:
    anthropic = protocols.PROTOCOLS["messages"].error_frame("gone", "engine_error", 502)
    assert anthropic.startswith(b"event: error\ndata: ")
    assert json.loads(anthropic.split(b"data: ", 1)[1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "gone"},
    }
    responses = protocols.PROTOCOLS["responses"].error_frame("slow", "engine_timeout", 504)
    assert json.loads(responses.split(b"data: ", 1)[1])["type"] == "error"
    assert protocols.PROTOCOLS["messages"].stream_end == b""
    assert protocols.PROTOCOLS["chat"].stream_end == b"data: [DONE]\n\n"


def test_an_error_answer_in_anthropics_shape_keeps_its_headers() -> None:
    from playground.gateway.errors import error_response, in_anthropic_shape

    refused = error_response(429, "rate_limit_exceeded", "slow down")
    refused["Retry-After"] = "7"
    shaped = in_anthropic_shape(refused)
    assert json.loads(shaped.content) == {  # type: ignore[attr-defined]
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }
    assert shaped.status_code == 429 and shaped["Retry-After"] == "7"


def test_responses_and_messages_bodies_have_a_prefix_to_route_by() -> None:
    from playground.gateway import routing

    header = "You are a careful assistant. " * 50
    text = routing.prefix_key({"input": header + "one"})
    assert text != "" and text == routing.prefix_key({"input": header + "two"})
    items = [{"role": "user", "content": header}]
    assert routing.prefix_key({"input": items}) == routing.prefix_key({"messages": items})
    blocks = [{"role": "user", "content": [{"type": "text", "text": header}]}]
    assert routing.prefix_key({"messages": blocks, "max_tokens": 5}) != ""
    assert routing.prefix_key({"input": "x", "prompt": {"id": "pmpt_1"}}) == routing.prefix_key(
        {"input": "x"}
    )
