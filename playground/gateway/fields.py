"""Which body fields the gateway forwards, and their bounds. Pure.

An allowlist: OpenAI's fields and vLLM's usual sampling extensions. vLLM also accepts request
fields that reach past sampling (`chat_template`, a Jinja template rendered on the server;
`kv_transfer_params`, `vllm_xargs`, `priority`, `prompt_logprobs`, ...): those are refused by
name rather than passed on. `n`, `best_of` and the log-probability counts multiply the engine's
work per request, so they have caps; an answer past a cap names the field and the cap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

Kind = Literal["chat", "completion", "responses", "messages", "count_tokens", "embeddings"]
MAX_DEPTH = 64  # JSON nesting: a tool's schema is a dozen levels, not hundreds
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs; it refuses more itself, after the queue
MAX_STOPS = 16
MAX_LIST_ITEMS = 4096  # stop_token_ids, logit_bias


class FieldError(ValueError):
    """A field the gateway does not forward as it is; the message names it."""


Check = Callable[[str, Any], None]


def _number(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FieldError(f"'{key}' must be a number")


def _integer(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**63:
        raise FieldError(f"'{key}' must be an integer")


def _boolean(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise FieldError(f"'{key}' must be true or false")


def _text(key: str, value: Any) -> None:
    if not isinstance(value, str):
        raise FieldError(f"'{key}' must be a string")


def _object(key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise FieldError(f"'{key}' must be a JSON object")


def _anything(key: str, value: Any) -> None:
    """Checked by the engine (messages, tools, schemas); only the nesting depth here."""


def _between(low: int, high: int, setting: str = "") -> Check:
    def check(key: str, value: Any) -> None:
        _integer(key, value)
        if not low <= value <= high:
            where = f" ({setting})" if setting else ""
            raise FieldError(f"'{key}' must be between {low} and {high}{where}; got {value}")

    return check


def _stop(key: str, value: Any) -> None:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise FieldError(f"'{key}' must be a string or a list of strings")
    if len(items) > MAX_STOPS:
        raise FieldError(f"'{key}' has {len(items)} sequences; at most {MAX_STOPS}")


def _token_ids(key: str, value: Any) -> None:
    if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
        raise FieldError(f"'{key}' must be a list of at most {MAX_LIST_ITEMS} token ids")
    for item in value:
        _integer(key, item)


def _logit_bias(key: str, value: Any) -> None:
    _object(key, value)
    if len(value) > MAX_LIST_ITEMS:
        raise FieldError(f"'{key}' has {len(value)} entries; at most {MAX_LIST_ITEMS}")
    for bias in value.values():
        _number(key, bias)


def _choice(key: str, value: Any) -> None:
    if not isinstance(value, str | dict):
        raise FieldError(f"'{key}' must be a string or a JSON object")


_COMMON: dict[str, Check] = {
    "model": _text,
    "stream": _boolean,
    "stream_options": _object,
    "max_tokens": _anything,  # capped, with its own message, by payload.cap_length
    "n": _anything,  # with best_of, in _check_choices
    "temperature": _number,
    "top_p": _number,
    "top_k": _integer,
    "min_p": _number,
    "frequency_penalty": _number,
    "presence_penalty": _number,
    "repetition_penalty": _number,
    "seed": _integer,
    "stop": _stop,
    "stop_token_ids": _token_ids,
    "logit_bias": _logit_bias,
    "user": _text,
    "ignore_eos": _boolean,
    "min_tokens": _between(0, 2**31 - 1),
    "skip_special_tokens": _boolean,
    "spaces_between_special_tokens": _boolean,
    "include_stop_str_in_output": _boolean,
    "response_format": _object,
    "structured_outputs": _object,
}
_CHAT: dict[str, Check] = {
    "messages": _anything,
    "max_completion_tokens": _anything,
    "logprobs": _boolean,
    "top_logprobs": _between(0, MAX_LOGPROBS),
    "tools": _anything,
    "tool_choice": _choice,
    "parallel_tool_calls": _boolean,
    "add_generation_prompt": _boolean,
    "continue_final_message": _boolean,
}
_COMPLETION: dict[str, Check] = {
    "prompt": _anything,
    "best_of": _anything,
    "logprobs": _between(0, MAX_LOGPROBS),
    "echo": _boolean,
    "suffix": _text,
}
# The other protocols' request fields, from vLLM 0.33's protocol classes (cited per table), less
# the same kind of fields as above: the chat template's arguments, KV/EC transfer, vllm_xargs,
# priority, request ids, multimodal processor arguments, cache salts, watermarking.
# vllm/entrypoints/openai/responses/protocol.py:246-370 (ResponsesRequest).
_RESPONSES: dict[str, Check] = {
    "model": _text,
    "input": _anything,
    "instructions": _text,
    "max_output_tokens": _anything,  # capped by payload.cap_length
    "max_tool_calls": _between(0, MAX_LIST_ITEMS),
    "metadata": _object,
    "parallel_tool_calls": _boolean,
    "previous_response_id": _text,
    "prompt": _object,
    "reasoning": _object,
    "include": _anything,
    "include_reasoning": _boolean,
    "background": _boolean,
    "service_tier": _text,
    "store": _boolean,
    "stream": _boolean,
    "temperature": _number,
    "text": _object,
    "tool_choice": _choice,
    "tools": _anything,
    "top_logprobs": _between(0, MAX_LOGPROBS),
    "top_p": _number,
    "top_k": _integer,
    "min_p": _number,
    "truncation": _text,
    "user": _text,
    "prompt_cache_key": _text,
    "safety_identifier": _text,
    "skip_special_tokens": _boolean,
    "spaces_between_special_tokens": _boolean,
    "include_stop_str_in_output": _boolean,
    "presence_penalty": _number,
    "frequency_penalty": _number,
    "repetition_penalty": _number,
    "seed": _integer,
    "stop": _stop,
    "stop_token_ids": _token_ids,
    "ignore_eos": _boolean,
    "logit_bias": _logit_bias,
    "structured_outputs": _object,
}
# vllm/entrypoints/anthropic/protocol.py:438-446 (AnthropicCountTokensRequest)
_COUNT_TOKENS: dict[str, Check] = {
    "model": _text,
    "messages": _anything,
    "system": _anything,  # a string or content blocks
    "output_config": _object,
    "thinking": _object,
    "tool_choice": _object,
    "tools": _anything,
}
# vllm/entrypoints/anthropic/protocol.py:240-258 (AnthropicMessagesRequest)
_MESSAGES: dict[str, Check] = _COUNT_TOKENS | {
    "max_tokens": _anything,  # capped by payload.cap_length
    "metadata": _object,
    "stop_sequences": _stop,
    "stream": _boolean,
    "temperature": _number,
    "top_k": _integer,
    "top_p": _number,
}
# vllm/entrypoints/pooling/embed/protocol.py:35 (EmbeddingCompletionRequest) and its mixins in
# vllm/entrypoints/pooling/base/protocol.py:35-42,212-218,320-361
_EMBEDDINGS: dict[str, Check] = {
    "model": _text,
    "input": _anything,
    "user": _text,
    "encoding_format": _text,
    "dimensions": _between(1, 2**31 - 1),
    "truncate_prompt_tokens": _between(-1, 2**31 - 1),
    "add_special_tokens": _boolean,
    "embed_dtype": _text,
    "endianness": _text,
    "use_activation": _boolean,
}
FIELDS: dict[Kind, dict[str, Check]] = {
    "chat": _COMMON | _CHAT,
    "completion": _COMMON | _COMPLETION,
    "responses": _RESPONSES,
    "messages": _MESSAGES,
    "count_tokens": _COUNT_TOKENS,
    "embeddings": _EMBEDDINGS,
}
ENDPOINTS: dict[Kind, str] = {
    "chat": "/v1/chat/completions",
    "completion": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "embeddings": "/v1/embeddings",
}


def check_fields(body: dict[str, Any], kind: Kind, *, max_choices: int) -> None:
    """Raise FieldError naming the first field the gateway will not forward as it is."""
    allowed = FIELDS[kind]
    for key, value in body.items():
        check = allowed.get(key)
        if check is None:
            raise FieldError(_unknown(key, kind))
        if value is None:  # JSON null: the engine's default, as OpenAI's clients send it
            continue
        check(key, value)
        if isinstance(value, dict | list) and _too_deep(value):
            raise FieldError(f"'{key}' nests deeper than {MAX_DEPTH} levels")
    _check_choices(body, kind, max_choices)


def shown_key(key: str) -> str:
    """The key as a message quotes it: escaped if it is not printable, cut if it is long."""
    printable = key if key.isprintable() else key.encode("unicode_escape").decode("ascii")
    return printable if len(printable) <= 40 else printable[:40] + "…"


def _unknown(key: str, kind: Kind) -> str:
    return f"'{shown_key(key)}' is not a field the gateway forwards to {ENDPOINTS[kind]}"


def _check_choices(body: dict[str, Any], kind: Kind, max_choices: int) -> None:
    n = body.get("n")
    if n is not None:
        _between(1, max_choices, "PLAYGROUND_MAX_CHOICES")("n", n)
    best_of = body.get("best_of") if kind == "completion" else None
    if best_of is not None:
        _between(1, max_choices, "PLAYGROUND_MAX_CHOICES")("best_of", best_of)
        if best_of < (n or 1):
            raise FieldError(f"'best_of' ({best_of}) must be at least 'n' ({n})")


def _too_deep(value: dict[str, Any] | list[Any]) -> bool:
    """Iterative, so that a deep value cannot exhaust the stack that checks it."""
    level: list[Any] = [value]
    for _ in range(MAX_DEPTH):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True
