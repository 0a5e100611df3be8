"""Engine output in Redis: where the host worker ships it and where the web reads it.

The host worker (``deployments.host.logship``) follows each engine's log file on its own disk
and appends every line, cleaned and with secrets masked, to a bounded stream per deployment
(``XADD … MAXLEN ~ STREAM_MAX_LINES``); after each batch it PUBLISHes the batch, encoded once,
on the deployment's pub/sub channel, which every web process's ``monitoring.live`` hub fans out
to the log websockets. When the engine ends, its last ``TAIL_LINES`` lines are saved on the
row (``Deployment.log_tail``) and the stream expires. The web reads only this module's keys
and the row: it never opens a path on a host.

Keys: ``shardboard:englog:<pk>`` (the stream; field ``l`` = one line) and
``shardboard:englog:<pk>:pos`` (a hash: the file being shipped and the byte offset shipped so
far, so a restarted host worker goes on where it stopped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from typing import Any

import redis
from django.conf import settings
from redis.connection import parse_url

from controlpanel import redisconn

KEY_PREFIX = "shardboard:englog"
STREAM_MAX_LINES = 5000  # per deployment; approximate trimming may keep up to ~100 more
TAIL_LINES = 200  # shown on load, and saved on the row when the engine ends
BACKFILL_MAX_LINES = 1000  # sent to a websocket that (re)connects after a given line
ENDED_TTL_S = 24 * 3600  # a stream outlives its engine this long (a late page, a restart)
_ID = re.compile(r"\d{1,20}-\d{1,20}")

Line = tuple[str, str]  # (stream id, text)


def stream_key(pk: int) -> str:
    return f"{KEY_PREFIX}:{pk}"


def position_key(pk: int) -> str:
    return f"{KEY_PREFIX}:{pk}:pos"


def channel(pk: int) -> str:
    """Pub/sub channels are global to a Redis server, not per database: the name carries it."""
    return f"{KEY_PREFIX}:live:{_db_of(settings.REDIS_URL)}:{pk}"


@cache
def _db_of(url: str) -> int:
    return int(parse_url(url).get("db", 0))  # type: ignore[no-untyped-call]  # untyped in redis-py


@cache
def _client(url: str) -> redis.Redis:
    return redisconn.client(url=url, connect_timeout_s=1, timeout_s=5)


def client() -> redis.Redis:
    """One pooled client per process (redis-py clients are thread-safe)."""
    return _client(settings.REDIS_URL)


def is_stream_id(value: str) -> bool:
    return bool(_ID.fullmatch(value))


def id_key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def encode_batch(pk: int, lines: Iterable[Line]) -> str:
    return json.dumps({"type": "log.lines", "id": pk, "lines": [list(x) for x in lines]})


def decode_batch(text: str) -> list[Line]:
    lines = json.loads(text).get("lines", [])
    return [(str(i), str(t)) for i, t in lines]


def _decoded(entries: Any) -> list[Line]:
    """XREVRANGE's entries (newest first) → lines, oldest first."""
    out = []
    for entry_id, fields in reversed(entries or []):
        raw = fields.get(b"l", b"")
        out.append((entry_id.decode(), raw.decode("utf-8", errors="replace")))
    return out


def recent(pk: int, count: int = TAIL_LINES) -> list[Line]:
    """The last `count` lines shipped, oldest first. Raises redis.RedisError."""
    return _decoded(client().xrevrange(stream_key(pk), count=count))


def after(pk: int, last_id: str, count: int = BACKFILL_MAX_LINES) -> list[Line]:
    """Lines shipped after `last_id` (at most the last `count` of them), oldest first."""
    entries = client().xrevrange(stream_key(pk), min=f"({last_id}", count=count)
    return _decoded(entries)
