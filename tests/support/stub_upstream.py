"""A stand-in OpenAI-compatible engine that streams slowly and reports what its client did.

Used where a real engine cannot show the property under test: when exactly chunks leave the
engine, whether the client went away, how a failing engine answers. Speaks both streaming
dialects: "transformers" (usage on the last chunk, no [DONE]) and "vllm" ([DONE], usage chunk);
/v1/messages streams Anthropic Messages events whatever the dialect.

    python -m tests.support.stub_upstream --port 0 --tokens 64 --interval-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class StubUpstream:
    dialect: str = "transformers"
    tokens: int = 5
    interval_s: float = 0.0
    hold_after_first: threading.Event | None = None
    fail_status: int | None = None
    fail_body: bytes = b'{"detail": "stub failure"}'
    close_after_response: bool = False  # hang up on an idle keep-alive connection, unannounced
    connections: int = 0
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    first_sent: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StubUpstream:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stub upstream did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _run(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def serve_forever(self) -> None:
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        print(f"listening {self.port}", flush=True)
        async with server:
            await server.serve_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while await self._one_request(reader, writer) and not self.close_after_response:
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnected.set()
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
        if not head:
            return False
        lines = head.decode("latin1").split("\r\n")
        path = lines[0].split(" ")[1]
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)
        }
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        body = json.loads(raw or b"{}")
        self.seen.append(Seen(path, headers, body))
        if self.fail_status is not None:
            await _send_whole(writer, self.fail_status, self.fail_body)
        elif body.get("stream"):
            await self._stream(reader, writer, path, body)
        else:
            await _send_whole(writer, 200, json.dumps(_whole(path, self.tokens)).encode())
        return True

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        path: str,
        body: dict[str, Any],
    ) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        watch = asyncio.ensure_future(reader.read(1))  # b"" once the client hangs up
        try:
            for i, event in enumerate(_events(path, self.tokens, self.dialect, body)):
                if watch.done():
                    raise ConnectionResetError("client went away")
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
                if i == 0:
                    self.first_sent.set()
                    await self._hold(watch)
                elif self.interval_s:
                    await _sleep_or_hangup(watch, self.interval_s)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.finished.set()
        finally:
            watch.cancel()
            # Its end, not its CancelledError: a cancellation of this task (stop()) must not
            # be swallowed here, or the connection would wait for another request forever.
            await asyncio.wait([watch])

    async def _hold(self, watch: asyncio.Future[bytes]) -> None:
        if self.hold_after_first is not None:
            while not self.hold_after_first.is_set():
                await _sleep_or_hangup(watch, 0.01)
        elif self.interval_s:
            await _sleep_or_hangup(watch, self.interval_s)


async def _sleep_or_hangup(watch: asyncio.Future[bytes], seconds: float) -> None:
    await asyncio.wait([watch], timeout=seconds)
    if watch.done():
        raise ConnectionResetError("client went away")


async def _send_whole(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


def _chunk(path: str, text: str, finish: str | None) -> dict[str, Any]:
    if path.endswith("/chat/completions"):
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return {"object": "chat.completion.chunk", "choices": [choice]}
    return {
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }


def _usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}


def _events(path: str, n: int, dialect: str, body: dict[str, Any]) -> list[bytes]:
    usage = bool((body.get("stream_options") or {}).get("include_usage"))
    return _events_of(path, n, dialect, usage)


@functools.lru_cache(maxsize=64)
def _events_of(path: str, n: int, dialect: str, include_usage: bool) -> list[bytes]:
    if path.endswith("/v1/messages"):
        return _message_events(n)
    chunks = [_chunk(path, f"t{i} ", "length" if i == n - 1 else None) for i in range(n)]
    if dialect == "transformers":
        chunks[-1]["usage"] = _usage(n)
    elif include_usage:
        chunks.append({"object": "chat.completion.chunk", "choices": [], "usage": _usage(n)})
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    return events + ([b"data: [DONE]\n\n"] if dialect == "vllm" else [])


def _message_events(n: int) -> list[bytes]:
    """An Anthropic Messages stream as vLLM 0.33 sends it: message_start, one text block of
    `n` deltas, message_delta with the usage, message_stop (each with its `event:` line)."""
    message = {"id": "msg_stub", "type": "message", "role": "assistant", "content": []}
    message |= {"model": "stub", "usage": {"input_tokens": 3, "output_tokens": 0}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"message": message})]
    events.append(
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    )
    for i in range(n):
        delta = {"type": "text_delta", "text": f"t{i} "}
        events.append(("content_block_delta", {"index": 0, "delta": delta}))
    events.append(("content_block_stop", {"index": 0}))
    stop = {"stop_reason": "max_tokens", "stop_sequence": None}
    events.append(("message_delta", {"delta": stop, "usage": {"output_tokens": n}}))
    events.append(("message_stop", {}))
    return [
        b"event: %s\ndata: %s\n\n" % (name.encode(), json.dumps({"type": name, **data}).encode())
        for name, data in events
    ]


def _whole(path: str, n: int) -> dict[str, Any]:
    text = "".join(f"t{i} " for i in range(n))
    key = {"message": {"role": "assistant", "content": text}} if "chat" in path else {"text": text}
    return {
        "object": "completion",
        "choices": [{"index": 0, **key, "finish_reason": "length"}],
        "usage": _usage(n),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--dialect", default="vllm")
    args = parser.parse_args()
    stub = StubUpstream(
        dialect=args.dialect, tokens=args.tokens, interval_s=args.interval_ms / 1000, port=args.port
    )
    asyncio.run(stub.serve_forever())


if __name__ == "__main__":
    main()
