"""Gateway request bodies: parse what the client sent, cap it, shape it for one engine. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from playground.gateway.fields import FieldError, check_fields
from playground.gateway.fields import Kind as Kind

PATHS: dict[Kind, str] = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
_LENGTH_KEYS: dict[Kind, tuple[str, ...]] = {
    "chat": ("max_tokens", "max_completion_tokens"),
    "completion": ("max_tokens",),
}


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
    return GatewayCall(kind, model, bool(body.get("stream")), wants_usage, body)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")  # Python's json reads NaN, Infinity


def _check_input(body: dict[str, Any], kind: Kind) -> None:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise PayloadError("'messages' must be a non-empty list")
    elif not isinstance(body.get("prompt"), str | list):
        raise PayloadError("'prompt' must be a string or a list")


@dataclass(frozen=True, slots=True)
class LengthCap:
    asked: int | None
    sent: int


def cap_length(call: GatewayCall, cap: int) -> tuple[dict[str, Any], LengthCap]:
    """A copy of the body whose length fields are at most `cap` (set to `cap` when absent)."""
    body = dict(call.body)
    asked = [_positive_int(key, body[key]) for key in _LENGTH_KEYS[call.kind] if key in body]
    largest = max(asked) if asked else None
    sent = min(largest, cap) if largest is not None else cap
    for key in _LENGTH_KEYS[call.kind]:
        body.pop(key, None)
    body["max_tokens"] = sent
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
    return call.body.get("messages") if call.kind == "chat" else call.body.get("prompt")
