"""The measuring client of bench/proxy_overhead.py: a hand-written keep-alive HTTP/1.1 client,
cheap enough not to starve the server it measures, and the figures of one level."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from proxy_procs import cpu_all

BODY = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
# A token's mark in a streamed event: chat completions' delta, Anthropic Messages' text_delta
# (its message_start already holds "content": [], so the chat mark would time the wrong event).
MARKS = {"/v1/messages": b'"text_delta"'}
CHAT_MARK = b'"content"'


@dataclass
class Stream:
    ttft_s: float
    total_s: float
    chunks: int


class Connection:
    """A keep-alive HTTP/1.1 connection, spoken by hand: the load generator must cost far less
    CPU than what it measures (httpx spent about as much as the proxy per chunk)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], mark: bytes = CHAT_MARK
    ) -> Stream:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        head += "Content-Type: application/json\r\n" + f"Content-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        self.writer.write(head.encode() + body)
        status, response_headers = await self._head()
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
        first, chunks = None, 0
        async for data in self._body(response_headers):
            if first is None and mark in data:
                first = time.perf_counter()
            chunks += data.count(mark)
        ended = time.perf_counter()
        if response_headers.get("connection", "").lower() == "close":
            self.close()
        return Stream((first or ended) - started, ended - started, chunks)

    async def _head(self) -> tuple[int, dict[str, str]]:
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(" ")[1]), headers

    async def _body(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        assert self.reader is not None
        if "content-length" in headers:
            yield await self.reader.readexactly(int(headers["content-length"]))
            return
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return
            yield data[:-2]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class Level:
    ttfts_s: list[float]
    tokens: int
    wall_s: float
    cpu_s: dict[str, float]

    @property
    def throughput(self) -> float:
        return self.tokens / self.wall_s

    @staticmethod
    def joined(levels: list[Level]) -> Level:
        cpu: dict[str, float] = {}
        for level in levels:
            for name, used in level.cpu_s.items():
                cpu[name] = cpu.get(name, 0.0) + used
        return Level(
            [t for level in levels for t in level.ttfts_s],
            sum(level.tokens for level in levels),
            sum(level.wall_s for level in levels),
            cpu,
        )


async def run_level(
    url: str | Sequence[str],
    headers: dict[str, str],
    concurrency: int,
    rounds: int,
    pids: dict[str, int],
    stagger_s: float | None = None,
    model: str = "bench",
    extra_body: dict[str, object] | None = None,
) -> Level:
    """`rounds` requests on each of `concurrency` keep-alive connections (to ``url``, or,
    given several, connection i to the i-th modulo their number: the same path on each).

    Burst (stagger_s None): every round starts all streams at once and waits for all.
    Staggered: connection i starts i * stagger_s later and then sends its requests back to
    back, so that streams start evenly spread, as in a steady state of that many streams.
    `extra_body`: more fields of every request (a real engine's max_tokens, ignore_eos).
    """
    urls = [urlsplit(u) for u in ([url] if isinstance(url, str) else url)]
    parts = urls[0]
    mark = MARKS.get(parts.path, CHAT_MARK)
    extra = {"max_tokens": 4096} if parts.path in MARKS else {}  # Messages requires it
    body = json.dumps({**BODY, "model": model, **extra, **(extra_body or {})}).encode()
    conns = [
        Connection(u.hostname or "127.0.0.1", u.port or 80)
        for u in (urls[i % len(urls)] for i in range(concurrency))
    ]

    async def one_connection(index: int, conn: Connection) -> list[Stream]:
        await asyncio.sleep(index * (stagger_s or 0.0))
        return [await conn.post(parts.path, body, headers, mark) for _ in range(rounds)]

    try:
        await asyncio.gather(*(c.post(parts.path, body, headers, mark) for c in conns))  # warm up
        ttfts, tokens = [], 0
        cpu_before = cpu_all(pids)
        started = time.perf_counter()
        if stagger_s is None:
            for _ in range(rounds):
                streams = await asyncio.gather(
                    *(c.post(parts.path, body, headers, mark) for c in conns)
                )
                ttfts += [s.ttft_s for s in streams]
                tokens += sum(s.chunks for s in streams)
        else:
            runs = await asyncio.gather(*(one_connection(i, c) for i, c in enumerate(conns)))
            ttfts = [s.ttft_s for run in runs for s in run]
            tokens = sum(s.chunks for run in runs for s in run)
        wall_s = time.perf_counter() - started
        used = {name: cpu - cpu_before[name] for name, cpu in cpu_all(pids).items()}
        return Level(ttfts, tokens, wall_s, used)
    finally:
        for conn in conns:
            conn.close()


def p(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def spread(values: list[float], scale: float, fmt: str) -> str:
    """A table cell: the median over blocks and their range, scaled and formatted."""
    m, lo, hi = (f(values) * scale for f in (statistics.median, min, max))
    return f"{m:{fmt}} ({lo:{fmt}}–{hi:{fmt}})"
