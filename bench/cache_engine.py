"""A stand-in engine with a prefix cache and a fixed capacity, for bench/routing_live.py.

`cache_engine.py --port P [--slots 4] [--cache 4] [--prefill-ms 200] [--decode-ms 300]`

Answers /health, /v1/models and non-streamed /v1/completions and /v1/chat/completions. At most
`--slots` requests are served at once (continuous batching's concurrency), the rest queue. A
prompt's header is what precedes its first "|" (the bench's shared system prompts); the engine
keeps the last `--cache` headers it prefilled (LRU, as vLLM's prefix cache keeps blocks), and a
request whose header is cached skips the prefill: so the router's choice shows in the latency
and in the engine's hit count. `GET /stats` reports requests, cache hits, requests in the
engine now (queued or served) and the peak; `POST /stats/reset` zeroes them and the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import OrderedDict
from typing import Any

from aiohttp import web


class Engine:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.slots = asyncio.Semaphore(args.slots)
        self.reset()

    def reset(self) -> None:
        self.cache: OrderedDict[str, None] = OrderedDict()
        self.requests = self.hits = self.inside = self.peak = 0

    def stats(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "hits": self.hits,
            "inside": self.inside,
            "peak": self.peak,
        }

    async def serve(self, prompt: str) -> bool:
        header = prompt.split("|", 1)[0]
        self.requests += 1
        self.inside += 1
        self.peak = max(self.peak, self.inside)
        try:
            async with self.slots:
                hit = header in self.cache
                self.hits += hit
                if not hit:
                    await asyncio.sleep(self.args.prefill_ms / 1000)
                self.cache[header] = None
                self.cache.move_to_end(header)
                while len(self.cache) > self.args.cache:
                    self.cache.popitem(last=False)
                await asyncio.sleep(self.args.decode_ms / 1000)
                return hit
        finally:
            self.inside -= 1


def _prompt(body: dict[str, Any]) -> str:
    if isinstance(body.get("prompt"), str):
        return str(body["prompt"])
    messages = body.get("messages") or [{}]
    return str(messages[-1].get("content", ""))


def app(engine: Engine) -> web.Application:
    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "cached", "object": "model"}]})

    async def complete(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        hit = await engine.serve(_prompt(body))
        text = {"text": " ok"} if "prompt" in body else {"message": {"content": " ok"}}
        return web.json_response(
            {
                "object": "text_completion",
                "choices": [{"index": 0, "finish_reason": "stop", **text}],
                "usage": {"prompt_tokens": 500, "completion_tokens": 1, "total_tokens": 501},
                "cache_hit": hit,
            }
        )

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(engine.stats())

    async def reset(_: web.Request) -> web.Response:
        engine.reset()
        return web.json_response({})

    application = web.Application(client_max_size=4 * 1024 * 1024)
    application.add_routes(
        [
            web.get("/health", health),
            web.get("/v1/models", models),
            web.post("/v1/completions", complete),
            web.post("/v1/chat/completions", complete),
            web.get("/stats", stats),
            web.post("/stats/reset", reset),
        ]
    )
    return application


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--cache", type=int, default=4)
    parser.add_argument("--prefill-ms", type=float, default=200)
    parser.add_argument("--decode-ms", type=float, default=300)
    args = parser.parse_args()
    web.run_app(app(Engine(args)), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
