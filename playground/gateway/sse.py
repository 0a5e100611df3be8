"""Server-sent events between engine and client, for both streaming dialects. Pure.

vLLM ends with `data: [DONE]` and, when asked, a usage chunk with empty `choices`;
transformers serve puts usage on its last chunk and just ends the stream. Downstream, every
stream ends the same way: our optional `event: shardboard` metrics frame, then `[DONE]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"
ANSWER_MAX_CHARS = 200_000


class EventSplitter:
    """Bytes as they arrive → complete events (each ending in a blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        self._buffer += data
        if b"\n\n" not in self._buffer:
            return []
        *events, self._buffer = self._buffer.split(b"\n\n")
        return [event + b"\n\n" for event in events if event.strip()]

    def rest(self) -> bytes:
        return self._buffer


def event_data(event: bytes) -> bytes:
    """The joined `data:` lines of one event (b"" for comments and bare fields)."""
    if event[:6] == b"data: " and event.find(b"\n", 6) == len(event) - 2:
        return event[6:-2]  # what engines send: one data line per event
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line[:5] == b"data:"]
    return b"\n".join(lines)


@dataclass(slots=True)
class StreamMeter:
    """Server-side timings and counts of one streamed answer."""

    started_s: float
    first_s: float | None = None
    last_s: float | None = None
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    parts: list[str] = field(default_factory=list)
    _chars: int = 0

    def observe(self, payload: dict[str, Any], now_s: float) -> None:
        if isinstance(payload.get("error"), dict | str):
            self.error = error_message(payload["error"])
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int_or(usage.get("prompt_tokens"), self.prompt_tokens)
            self.completion_tokens = _int_or(usage.get("completion_tokens"), self.completion_tokens)
        for choice in payload.get("choices") or ():
            self._observe_choice(choice, now_s)

    def _observe_choice(self, choice: dict[str, Any], now_s: float) -> None:
        text = choice_text(choice)
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        if not text:
            return
        if self.first_s is None:
            self.first_s = now_s
        self.last_s = now_s
        self.chunks += 1
        if self._chars < ANSWER_MAX_CHARS:
            self.parts.append(text)
            self._chars += len(text)

    def count_token(self, now_s: float) -> None:
        """A content chunk after the first, its JSON left unread (see must_read)."""
        self.last_s = now_s
        self.chunks += 1

    @property
    def answer(self) -> str:
        return "".join(self.parts)[:ANSWER_MAX_CHARS]

    def timings(self, ended_s: float) -> dict[str, Any]:
        generated = self.completion_tokens if self.completion_tokens is not None else self.chunks
        return {
            "ttft_ms": _ms(self.first_s - self.started_s) if self.first_s is not None else None,
            "duration_ms": _ms(ended_s - self.started_s),
            "tokens_per_s": rate_per_s(generated, self.first_s, self.last_s),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": generated,
            "chunks": self.chunks,
            "finish_reason": self.finish_reason,
        }


def rate_per_s(generated: int, first_s: float | None, last_s: float | None) -> float | None:
    """Decode speed: tokens after the first over the time between first and last."""
    if first_s is None or last_s is None or generated < 2 or last_s <= first_s:
        return None
    return round((generated - 1) / (last_s - first_s), 1)


def choice_text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")


def error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def _int_or(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def parse_payload(data: bytes) -> dict[str, Any] | None:
    if not data or data == b"[DONE]":
        return None
    try:
        payload = orjson.loads(data)  # once per relayed event: orjson, several times json's speed
    except orjson.JSONDecodeError:
        return None
    return payload if isinstance(payload, dict) else None


# What only the JSON can tell: usage (read from the event carrying it, usually the last), an
# error, a finish reason (its value a string, not null). Responses and Anthropic Messages
# (meters.py) carry their stop reason with their usage (`response.completed`, `message_delta`)
# and name what comes before the first token in events that are read anyway (first_s unset).
_MUST_READ = (b'"usage"', b'"error"', b'"finish_reason":"', b'"finish_reason": "')


def must_read(data: bytes) -> bool:
    """Whether an event after the first token must be parsed when the answer's text is not
    kept (an API caller's: the audit row has timings and counts, not the text)."""
    return any(marker in data for marker in _MUST_READ)


def is_usage_only(payload: dict[str, Any]) -> bool:
    return not payload.get("choices") and isinstance(payload.get("usage"), dict)


def metrics_frame(metrics: dict[str, Any]) -> bytes:
    return b"event: shardboard\ndata: " + json.dumps(metrics).encode() + b"\n\n"


def error_frame(message: str, kind: str, code: int) -> bytes:
    body = {"error": {"message": message, "type": kind, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"
