"""Token usage and answer text of the Responses and Anthropic Messages protocols. Pure.

sse.StreamMeter reads OpenAI's chat/completions shapes (and embeddings' `usage.prompt_tokens`,
which is the same block); these read each protocol's own, streamed or not:

- Responses (vLLM 0.33: vllm/entrypoints/openai/responses/api_router.py:34-45 sends each event
  as `event: <type>` + `data: <json>`): text in `response.output_text.delta` events, usage
  `{input_tokens, output_tokens}` on the response that `response.completed` (or `.incomplete`,
  `.failed`) carries; a whole answer is that response object itself.
- Anthropic Messages (vllm/entrypoints/anthropic/serving.py:1030-1083): `message_start` carries
  the message with the prompt's usage, `message_delta` the stop reason and the usage so far,
  `content_block_delta` the text. Prompt tokens read from the prefix cache are reported apart
  (`cache_read_input_tokens`, serving.py:75-110) and counted here as prompt tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from playground.gateway.sse import StreamMeter, error_message

_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.reasoning_text.delta"})
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(slots=True)
class ResponsesMeter(StreamMeter):
    response_id: str | None = None
    on_id: Callable[[str], None] | None = None  # told the id as soon as it is seen

    def observe(self, payload: dict[str, Any], now_s: float) -> None:
        kind = payload.get("type")
        if kind in _TEXT_DELTAS:
            self._text(str(payload.get("delta") or ""), now_s)
        elif kind == "error":
            self.error = str(payload.get("message") or payload)
        elif kind == "response.created" or kind in _FINAL:
            self._response(payload.get("response"), now_s, whole=False)
        elif payload.get("object") == "response":
            self._response(payload, now_s, whole=True)

    def _response(self, response: Any, now_s: float, *, whole: bool) -> None:
        if not isinstance(response, dict):
            return
        if isinstance(response.get("id"), str) and self.response_id is None:
            self.response_id = response["id"]
            if self.on_id is not None:
                self.on_id(self.response_id)
        if isinstance(response.get("error"), dict):
            self.error = error_message(response["error"])
        status = response.get("status")
        if isinstance(status, str) and status not in ("queued", "in_progress"):
            self.finish_reason = status
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("input_tokens"))
            self.completion_tokens = _count(usage.get("output_tokens"))
        if whole:
            for item in response.get("output") or ():
                for part in (item.get("content") or ()) if isinstance(item, dict) else ():
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        self._text(str(part.get("text") or ""), now_s)

    def _text(self, text: str, now_s: float) -> None:
        self._observe_choice({"text": text}, now_s)


@dataclass(slots=True)
class MessagesMeter(StreamMeter):
    def observe(self, payload: dict[str, Any], now_s: float) -> None:
        kind = payload.get("type")
        if kind == "content_block_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict):
                text = delta.get("text") or delta.get("thinking") or delta.get("partial_json")
                self._observe_choice({"text": str(text or "")}, now_s)
        elif kind == "message_start":
            message = payload.get("message")
            if isinstance(message, dict):
                self._usage(message.get("usage"))
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])
            self._usage(payload.get("usage"))
        elif kind == "error":
            self.error = error_message(payload.get("error"))
        elif kind == "message":
            self._whole(payload, now_s)

    def _whole(self, message: dict[str, Any], now_s: float) -> None:
        self._usage(message.get("usage"))
        if message.get("stop_reason"):
            self.finish_reason = str(message["stop_reason"])
        for block in message.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "text":
                self._observe_choice({"text": str(block.get("text") or "")}, now_s)

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if "input_tokens" in usage:
            self.prompt_tokens = (
                _count(usage.get("input_tokens"))
                + _count(usage.get("cache_read_input_tokens"))
                + _count(usage.get("cache_creation_input_tokens"))
            )
        if "output_tokens" in usage:
            self.completion_tokens = _count(usage.get("output_tokens"))
