"""Gateway request bodies: parse what the client sent, cap it, shape it for one engine. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from playground.gateway.fields import ENDPOINTS, FieldError, check_fields
from playground.gateway.fields import Kind as Kind
from playground.gateway.protocols import PROTOCOLS, Protocol

PATHS: dict[Kind, str] = ENDPOINTS


class PayloadError(ValueError):
    """The request body is not something the gateway can forward (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class GatewayCall:
    kind: Kind
    model: str
    stream: bool
    wants_usage: bool
    body: dict[str, Any] = field(repr=False)

    @property
    def path(self) -> str:
        return PATHS[self.kind]

    @property
    def protocol(self) -> Protocol:
        return PROTOCOLS[self.kind]

    @property
    def usage_in_stream(self) -> bool:
        """A stream whose usage the engine reports only when asked (stream_options)."""
        return self.stream and PROTOCOLS[self.kind].stream_usage


def parse_call(raw: bytes, kind: Kind, *, max_choices: int) -> GatewayCall:
    try:
        body = json.loads(raw or b"null", parse_constant=_not_json)
    except ValueError as exc:
        raise PayloadError(f"the body is not valid JSON: {exc}") from None
    except RecursionError:  # the C parser recurses per level: `[[[[…` exhausts the stack
        raise PayloadError("the body is not valid JSON: it nests too deeply") from None
    if not isinstance(body, dict):
        raise PayloadError("the body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > 200 or not model.isprintable():
        raise PayloadError("'model' must name a running deployment")
    _check_input(body, kind)
    try:
        check_fields(body, kind, max_choices=max_choices)
    except FieldError as exc:
        raise PayloadError(str(exc)) from None
    options = body.get("stream_options")
    wants_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    wants_usage = wants_usage or not PROTOCOLS[kind].stream_usage  # nothing added to drop
    if "stream" not in body and PROTOCOLS[kind].says_stream:
        body = {**body, "stream": False}
    return GatewayCall(kind, model, bool(body.get("stream")), wants_usage, body)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")  # Python's json reads NaN, Infinity


def _check_input(body: dict[str, Any], kind: Kind) -> None:
    key = PROTOCOLS[kind].input_key
    if key == "messages":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise PayloadError("'messages' must be a non-empty list")
    elif not isinstance(body.get(key), str | list):
        raise PayloadError(f"'{key}' must be a string or a list")
    if kind == "messages" and "max_tokens" not in body:  # Anthropic's API requires it
        raise PayloadError("'max_tokens' is required")


@dataclass(frozen=True, slots=True)
class LengthCap:
    asked: int | None
    sent: int


def cap_length(call: GatewayCall, cap: int) -> tuple[dict[str, Any], LengthCap | None]:
    """A copy of the body whose length fields are at most `cap` (set to `cap` when absent);
    the body as it is (and None) for a path that generates nothing."""
    protocol = PROTOCOLS[call.kind]
    if protocol.length_field is None:
        return call.body, None
    body = dict(call.body)
    asked = [_positive_int(key, body[key]) for key in protocol.length_keys if key in body]
    largest = max(asked) if asked else None
    sent = min(largest, cap) if largest is not None else cap
    for key in protocol.length_keys:
        body.pop(key, None)
    body[protocol.length_field] = sent
    return body, LengthCap(largest, sent)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PayloadError(f"'{key}' must be a positive integer")
    return value


def engine_body(body: dict[str, Any], *, stream: bool, served_model: str | None) -> dict[str, Any]:
    """The body for the engine: its own model name (or none), usage asked for when streaming."""
    out = {k: v for k, v in body.items() if k not in ("model", "stream_options")}
    if served_model is not None:
        out["model"] = served_model
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def prompt_of(call: GatewayCall) -> Any:
    """What the user asked, for the audit trail when AUDIT_PROMPTS=1."""
    return call.body.get(PROTOCOLS[call.kind].input_key)
