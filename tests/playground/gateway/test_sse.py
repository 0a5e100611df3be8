"""Server-sent events, as the gateway splits and reads them (pure)."""

from __future__ import annotations

import pytest

from playground.gateway.sse import EventSplitter, event_data, must_read


@pytest.mark.parametrize(
    ("event", "data"),
    [
        (b'data: {"a":1}\n\n', b'{"a":1}'),
        (b'data:{"a":1}\n\n', b'{"a":1}'),
        (b"data: a\ndata: b\n\n", b"a\nb"),
        (b": keep-alive comment\n\n", b""),
        (b"event: shardboard\ndata: y\n\n", b"y"),
        (b"data: \n\n", b""),
        (b"data: [DONE]\n\n", b"[DONE]"),
    ],
)
def test_event_data(event: bytes, data: bytes) -> None:
    assert event_data(event) == data


def test_events_split_across_reads_come_out_whole() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: on") == []
    assert splitter.feed(b"e\n\ndata: two\r\n\r\nda") == [b"data: one\n\n", b"data: two\n\n"]
    assert splitter.rest() == b"da"


@pytest.mark.parametrize(
    ("data", "read"),
    [
        (b'{"choices":[{"index":0,"delta":{"content":"t1 "},"finish_reason":null}]}', False),
        (b'{"choices": [{"delta": {"content": "t1 "}, "finish_reason": null}]}', False),
        (b'{"choices":[{"delta":{"content":""},"finish_reason":"length"}]}', True),
        (b'{"choices": [{"delta": {}, "finish_reason": "stop"}]}', True),
        (b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}', True),
        (b'{"error":{"message":"engine failed"}}', True),
    ],
)
def test_a_token_is_counted_unread_what_ends_or_fails_the_answer_is_read(
    data: bytes, read: bool
) -> None:
    assert must_read(data) is read
