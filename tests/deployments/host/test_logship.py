"""Shipping engine output to Redis: lines cleaned and cut, secrets masked, the stream bounded,
each batch published once, a Redis outage costing the engine nothing. Real Redis, real files,
the real follower thread; the engine is a file being appended to, as a real engine's log is."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deployments.host.logship import _saved_offset, _shipping_client
from deployments.host.logship.cleaning import (
    MAX_LINE_CHARS,
    LineSplitter,
    Masker,
    clean_line,
    clean_text,
)
from deployments.host.logship.follower import Follower
from deployments.live import enginelog
from tests.support.waiting import wait_for

API_KEY = "9f2c" * 16  # shaped like Deployment.engine_api_key(): 64 hex characters
HUB_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"


@pytest.fixture
def pk() -> Iterator[int]:
    number = 900_000_000 + os.getpid() % 100_000
    keys = (enginelog.stream_key(number), enginelog.position_key(number))
    enginelog.client().delete(*keys)
    yield number
    enginelog.client().delete(*keys)


def follower(pk: int, path: Path, **kwargs: object) -> Follower:
    options: dict[str, object] = {
        "pk": pk,
        "path": path,
        "mask": Masker([API_KEY]),
        "client": enginelog.client(),
        "channel": enginelog.channel(pk),
        "poll_s": 0.05,
        **kwargs,
    }
    return Follower(**options)  # type: ignore[arg-type]


def stream_texts(pk: int) -> list[str]:
    entries = enginelog.client().xrange(enginelog.stream_key(pk))
    return [fields[b"l"].decode() for _, fields in entries]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"GET /health?key={API_KEY} HTTP/1.1", "GET /health?key=*** HTTP/1.1"),
        (f"token {HUB_TOKEN} rejected", "token *** rejected"),
        ("Authorization: Bearer sk-live-abcdef123456", "Authorization: Bearer ***"),
        (
            "argv: vllm serve m --api-key s3cr3t-value --port 8000",
            "argv: vllm serve m --api-key *** --port 8000",
        ),
        ("--hf-token=abcdefgh1234", "--hf-token=***"),
        (
            "env HF_TOKEN=abcdefgh1234 VLLM_API_KEY: 'zz99zz99zz'",
            "env HF_TOKEN=*** VLLM_API_KEY: '***'",
        ),
        (
            "INFO: Uvicorn running on http://127.0.0.1:8000",
            "INFO: Uvicorn running on http://127.0.0.1:8000",
        ),
        (
            "tokenizer has 32000 tokens; key cache 1.5 GiB",
            "tokenizer has 32000 tokens; key cache 1.5 GiB",
        ),
    ],
)
def test_masker(line: str, expected: str) -> None:
    assert Masker([API_KEY, None, "", "abc"])(line) == expected  # short values are not secrets


def test_clean_line_masks_before_it_cuts() -> None:
    mask = Masker([API_KEY])
    cut_at_secret = b"x" * (MAX_LINE_CHARS - 10) + API_KEY.encode() + b"y" * 5000
    text = clean_line(cut_at_secret, mask)
    assert text == "x" * (MAX_LINE_CHARS - 10) + "***yyyyyyy … [4993 more characters]"
    assert clean_line(b"\x1b[32mINFO\x1b[0m ready", mask) == "INFO ready"
    assert clean_line(b"Loading:  10%\rLoading:  90%\rLoading: 100%", mask) == "Loading: 100%"
    assert clean_line("caf\u00e9 \u2713".encode()[:-1], mask) == "caf\u00e9 \ufffd"
    assert clean_text(f"a {API_KEY}\nb", mask) == "a ***\nb"


def test_splitter_joins_reads_and_cuts_an_endless_line() -> None:
    splitter = LineSplitter(max_line_bytes=10)
    assert splitter.feed(b"one\ntw") == [b"one"]
    assert splitter.pending_bytes == 2
    assert splitter.feed("o \u2713\nthree".encode()) == ["two \u2713".encode()]
    assert splitter.feed(b"-and-more-and-more") == []
    assert splitter.feed(b"-end\nfour\n") == [b"three-and- \xe2\x80\xa6 [17 more bytes]", b"four"]
    assert splitter.feed(b"five") == [] and splitter.flush() == [b"five"] and splitter.flush() == []


def test_stream_is_bounded_and_secrets_never_reach_it(pk: int, tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    lines = [f"line {i}" + (f" key={API_KEY}" if i % 100 == 0 else "") for i in range(3000)]
    path.write_text("\n".join(lines) + "\n" + "z" * 100_000 + "\n")
    pubsub = enginelog.client().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(enginelog.channel(pk))
    ship = follower(pk, path, max_lines=500).start()
    try:
        wait_for(lambda: ship.shipped_lines == 3001)
        with path.open("a") as engine:  # the engine goes on writing: shipped as it comes
            engine.write(f"late {HUB_TOKEN}\nno newline at the end")
        wait_for(lambda: ship.shipped_lines == 3002)
    finally:
        assert ship.stop(5)
    texts = stream_texts(pk)
    assert 500 <= len(texts) <= 600, len(texts)  # MAXLEN ~: trimmed a whole node at a time
    endless = texts[-3]
    assert endless.startswith("z" * MAX_LINE_CHARS + " … [") and len(endless) < MAX_LINE_CHARS + 40
    assert texts[-2] == "late ***"
    assert texts[-1] == "no newline at the end"  # flushed when the follower stops
    assert texts[-4] == "line 2999" and f"key={API_KEY}" not in "".join(texts)
    assert "line 2900 key=***" in texts
    assert ship.shipped_lines == 3003 and ship.dropped_lines == 0
    published: list[list[str]] = []
    deadline = time.monotonic() + 5
    while len(published) < 3003 and time.monotonic() < deadline:
        if (message := pubsub.get_message(timeout=0.2)) is not None:
            published += json.loads(message["data"])["lines"]
    pubsub.close()
    stream_ids = [i.decode() for i, _ in enginelog.client().xrange(enginelog.stream_key(pk))]
    assert len(published) == 3003 and [t for _, t in published[-len(texts) :]] == texts
    assert [i for i, _ in published[-len(texts) :]] == stream_ids  # the ids pages dedupe by
    assert _saved_offset(enginelog.client(), pk, path) == path.stat().st_size  # all shipped
    assert enginelog.recent(pk, 2) == list(zip(stream_ids[-2:], texts[-2:], strict=True))
    assert enginelog.after(pk, stream_ids[-3]) == enginelog.recent(pk, 2)


def test_resumes_where_an_earlier_worker_stopped(pk: int, tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    path.write_text("first\nsecond\n")
    ship = follower(pk, path).start()
    wait_for(lambda: ship.shipped_lines == 2)
    assert ship.stop(5)
    with path.open("a") as engine:
        engine.write("written while no worker ran\n")
    offset = _saved_offset(enginelog.client(), pk, path)
    assert offset == len("first\nsecond\n")
    assert _saved_offset(enginelog.client(), pk, tmp_path / "other.log") == 0
    again = follower(pk, path, start_offset=offset).start()
    wait_for(lambda: again.shipped_lines == 1)
    assert again.stop(5)
    assert stream_texts(pk) == ["first", "second", "written while no worker ran"]


def test_redis_down_costs_the_engine_nothing(pk: int, tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    path.write_text("a\n")
    down = _shipping_client("redis://127.0.0.1:1/0")  # as the host worker's, retries and all
    ship = follower(pk, path, client=down).start()
    started = time.monotonic()
    with path.open("a") as engine:  # an engine writing to its file never waits on the shipper
        for i in range(20_000):
            engine.write(f"busy engine line {i}\n")
    assert time.monotonic() - started < 2.0
    wait_for(lambda: ship.dropped_lines >= 20_001)
    assert ship.stop(5) and ship.shipped_lines == 0
    assert path.read_text().count("\n") == 20_001  # the host's own file keeps every line


def test_a_flood_is_skipped_not_chased(pk: int, tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    path.write_text("".join(f"flood line {i:07d} " + "x" * 40 + "\n" for i in range(120_000)))
    ship = follower(pk, path).start()
    try:
        wait_for(lambda: any("flood line 0119999" in t for t in stream_texts(pk)))
    finally:
        assert ship.stop(5)
    texts = stream_texts(pk)
    notes = [t for t in texts if t.startswith("[shardboard] ")]
    assert len(notes) == 1 and "bytes of engine output skipped" in notes[0], notes
    assert ship.skipped_bytes > path.stat().st_size - 300 * 1024
    assert ship.shipped_lines < 6000  # the last RESUME_BYTES of it, not 120,000 lines
    after_note = texts[texts.index(notes[0]) + 1 :]
    assert after_note[0].startswith("flood line ") and len(after_note[0]) == 59  # a whole line
    assert after_note[-1].startswith("flood line 0119999")


def test_catch_up_reads_every_line_written_before_it(pk: int, tmp_path: Path) -> None:
    """The launch asks for the lines that led to ready before it records ready: with a poll
    far longer than the test, only catch_up can have read the line."""
    path = tmp_path / "engine.log"
    path.write_text("starting\n")
    seen: list[str] = []
    shipper = follower(pk, path, poll_s=3600.0, on_lines=seen.extend).start()
    try:
        assert shipper.catch_up(5.0)
        assert seen == ["starting"]
        with path.open("a") as engine:
            engine.write("INFO:     Application startup complete.\n")
        assert shipper.catch_up(5.0)
        assert seen == ["starting", "INFO:     Application startup complete."]
        assert stream_texts(pk) == seen
    finally:
        assert shipper.stop()
    assert not shipper.catch_up(0.1)  # an ended follower reads nothing more
