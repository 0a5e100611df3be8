"""The protocols the gateway speaks, one row per path. Pure.

Every path goes through the same handler (auth, limits, routing, relay, audit); what differs is
data: which fields it forwards (fields.FIELDS), where its prompt and length bound are, how its
stream ends and reports an error, how its usage is read (meters), the shape of its errors and
which engines answer it at all (a path an engine lacks is refused before anything is sent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from playground.gateway import sse
from playground.gateway.fields import ENDPOINTS, Kind
from playground.gateway.meters import MessagesMeter, ResponsesMeter

ErrorShape = Literal["openai", "anthropic"]
ALL_ENGINES = frozenset({"vllm", "transformers", "llamacpp"})
ENGINE_LABELS = {"vllm": "vLLM", "transformers": "transformers serve", "llamacpp": "llama-server"}


def _responses_error_frame(message: str, kind: str, code: int) -> bytes:
    """Responses' `error` event (openai-python: types/responses/response_error_event.py)."""
    body = {"type": "error", "code": kind, "message": message, "param": None}
    return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"


def anthropic_error_type(status: int) -> str:
    """Anthropic's error.type for an HTTP status, as vLLM 0.33 maps it
    (vllm/entrypoints/anthropic/protocol.py:33-53)."""
    known = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        503: "overloaded_error",
    }
    return known.get(status, "api_error" if status >= 500 else "invalid_request_error")


def anthropic_error_body(status: int, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": anthropic_error_type(status), "message": message}}


def _anthropic_error_frame(message: str, kind: str, code: int) -> bytes:
    body = anthropic_error_body(code, message)
    return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"


@dataclass(frozen=True, slots=True)
class Protocol:
    kind: Kind
    input_key: str  # the field that holds the prompt (checks, the audit trail)
    length_keys: tuple[str, ...] = ()  # the fields that bound the answer's length, if any
    length_field: str | None = None  # the one sent to the engine (None: nothing generated)
    stream_usage: bool = False  # ask OpenAI's stream_options.include_usage of the engine
    stream_end: bytes = b""  # the last frame of a relayed stream
    error_frame: Callable[[str, str, int], bytes] = sse.error_frame
    error_shape: ErrorShape = "openai"
    engines: frozenset[str] = ALL_ENGINES
    meter: type[sse.StreamMeter] = sse.StreamMeter
    keeps_responses: bool = False  # the engine keeps answers by id (GET, cancel: followup)
    # An absent `stream` sent as false: transformers serve 5.23 streams a Responses answer
    # unless told not to (transformers/cli/serving/response.py, handle_request).
    says_stream: bool = False

    @property
    def path(self) -> str:
        return ENDPOINTS[self.kind]


# Engines per path: transformers serve 5.23 answers chat, completions and responses only
# (../shared/reference/apis.md §2); llama-server b11434 routes all four of these
# (tools/server/server.cpp:276-298), /v1/embeddings only when started with --embeddings.
_GENERATE = frozenset({"vllm", "llamacpp"})
PROTOCOLS: dict[Kind, Protocol] = {
    "chat": Protocol(
        "chat",
        "messages",
        ("max_tokens", "max_completion_tokens"),
        "max_tokens",
        stream_usage=True,
        stream_end=sse.DONE,
    ),
    "completion": Protocol(
        "completion",
        "prompt",
        ("max_tokens",),
        "max_tokens",
        stream_usage=True,
        stream_end=sse.DONE,
    ),
    "responses": Protocol(
        "responses",
        "input",
        ("max_output_tokens",),
        "max_output_tokens",
        error_frame=_responses_error_frame,
        meter=ResponsesMeter,
        keeps_responses=True,
        says_stream=True,
    ),
    "messages": Protocol(
        "messages",
        "messages",
        ("max_tokens",),
        "max_tokens",
        error_frame=_anthropic_error_frame,
        error_shape="anthropic",
        engines=_GENERATE,
        meter=MessagesMeter,
    ),
    "count_tokens": Protocol(
        "count_tokens", "messages", error_shape="anthropic", engines=_GENERATE
    ),
    "embeddings": Protocol("embeddings", "input", engines=_GENERATE),
}


def unserved(kind: Kind, engine: str) -> str | None:
    """Why `engine` cannot answer `kind` (None: it can)."""
    protocol = PROTOCOLS[kind]
    if engine in protocol.engines:
        return None
    label = ENGINE_LABELS.get(engine, engine)
    return f"this deployment runs on {label}, which does not serve {protocol.path}"
