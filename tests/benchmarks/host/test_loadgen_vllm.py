"""The load generator against a stand-in speaking vLLM's dialect (vLLM cannot run on these
machines): the API key, model and ignore_eos it sends, the usage chunk and [DONE] it reads, and
the /metrics gauges it polls, which make the KV-cache reading when the cache fills."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from aiohttp import web

from benchmarks.bottleneck import LevelEvidence, read_level
from benchmarks.host.loadgen.client import Target
from benchmarks.host.loadgen.runner import GONE, LevelPlan, run_level
from benchmarks.host.loadgen.stats import summarize
from benchmarks.workload import parse_workload, request_stream

KEY = "sekret"
SLOTS = 2  # the stand-in's "KV cache" holds two requests; more wait and preempt


class Engine:
    def __init__(self) -> None:
        self.in_flight = 0
        self.preemptions = 0
        self.bodies: list[dict[str, Any]] = []

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        body = await request.json()
        self.bodies.append(body)
        self.in_flight += 1
        self.preemptions += self.in_flight > SLOTS
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i in range(body["max_tokens"]):
                await asyncio.sleep(0.004 * max(1, self.in_flight - SLOTS + 1))
                chunk = {"choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}]}
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            usage = {"prompt_tokens": 9, "completion_tokens": body["max_tokens"]}
            await response.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode())
            await response.write(b"\n\ndata: [DONE]\n\n")
        finally:
            self.in_flight -= 1
        return response

    async def metrics(self, request: web.Request) -> web.Response:
        labels = '{engine="0",model_name="m"}'
        text = "\n".join(
            [
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{labels} {min(self.in_flight, SLOTS)}",
                f"vllm:num_requests_waiting{labels} {max(0, self.in_flight - SLOTS)}",
                f"vllm:kv_cache_usage_perc{labels} {min(1.0, self.in_flight / SLOTS)}",
                f"vllm:num_preemptions_total{labels} {float(self.preemptions)}",
            ]
        )
        return web.Response(text=text + "\n")


@pytest.fixture
async def engine() -> AsyncIterator[tuple[Engine, str]]:
    stand_in = Engine()
    app = web.Application()
    app.router.add_post("/v1/completions", stand_in.completions)
    app.router.add_get("/metrics", stand_in.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield stand_in, f"http://127.0.0.1:{port}"
    await runner.cleanup()


class Hooks:
    def __init__(self) -> None:
        self.ticks: list[dict[str, Any]] = []

    def tick(self, progress: dict[str, Any]) -> bool:
        self.ticks.append(progress)
        return False

    def level_load(self, concurrency: int | None) -> None:
        return None


WORKLOAD = parse_workload({"prompt": 12, "output": 40, "levels": "1,6", "requests_per_level": 12})


async def level(url: str, concurrency: int, key: str = KEY) -> tuple[dict[str, Any], Hooks]:
    hooks = Hooks()
    target = Target(url, model="m", api_key=key, ignore_eos=True)
    with ThreadPoolExecutor(1) as executor:
        plan = LevelPlan(0, concurrency, requests=12)
        out = await run_level(target, plan, request_stream(WORKLOAD, 0), hooks, executor)
    return {**summarize(out.results, out.duration_s), "engine": out.engine}, hooks


async def test_vllm_dialect_gauges_and_the_kv_cache_reading(engine) -> None:
    stand_in, url = engine
    low, hooks = await level(url, 1)
    high, _ = await level(url, 6)
    assert stand_in.bodies[0]["model"] == "m" and stand_in.bodies[0]["ignore_eos"] is True
    assert stand_in.bodies[0]["stream_options"] == {"include_usage": True}
    assert hooks.ticks and hooks.ticks[0]["load"] == 1
    for figures in (low, high):
        assert figures["completed"] == 12 and figures["output_tokens"] == 12 * 40
        assert figures["prompt_tokens"] == 12 * 9 and figures["tpot_ms"]["mean"] > 0
    assert low["engine"]["available"] and low["engine"]["kv_usage_max"] <= 0.5
    assert high["engine"]["kv_usage_max"] == 1.0 and high["engine"]["waiting_max"] >= 1
    readings = [
        read_level(
            LevelEvidence(
                load=c,
                gpu_count=1,
                output_throughput=f["output_throughput"],
                requests=f["requests"],
                kv_usage=f["engine"]["kv_usage_max"],
                waiting=f["engine"]["waiting_mean"],
                preemptions=f["engine"]["preemptions"],
                previous_load=None if c == 1 else 1,
                previous_throughput=None if c == 1 else low["output_throughput"],
            )
        )
        for c, f in ((1, low), (6, high))
    ]
    assert readings[0].kind != "kv_cache" and readings[1].kind == "kv_cache"
    assert dict(readings[1].evidence)["KV-cache usage (max)"] == "100 %"


async def test_refusals_are_counted_and_a_closed_port_is_gone(engine) -> None:
    _, url = engine
    refused, _ = await level(url, 2, key="wrong")
    assert refused["completed"] == 0 and refused["failed"] == 12
    assert refused["errors"][0]["error"].startswith("HTTP 401")
    hooks = Hooks()
    with ThreadPoolExecutor(1) as executor:
        out = await run_level(
            Target("http://127.0.0.1:9"),  # nothing listens on the discard port
            LevelPlan(0, 2, duration_s=30),
            request_stream(WORKLOAD, 0),
            hooks,
            executor,
        )
    assert out.stopped == GONE and out.duration_s < 5
    assert all(r.engine_gone for r in out.results)


async def test_request_rate_levels_arrive_open_loop_under_a_cap(engine) -> None:
    _, url = engine
    target = Target(url, model="m", api_key=KEY, ignore_eos=True)
    outcomes = []
    with ThreadPoolExecutor(1) as executor:
        for rate, cap in ((20.0, 50), (1000.0, 3)):
            plan = LevelPlan(0, cap, requests=16, rate=rate)
            outcomes.append(
                await run_level(target, plan, request_stream(WORKLOAD, 0), Hooks(), executor)
            )
    slow, fast = outcomes
    assert len(slow.results) == len(fast.results) == 16
    assert all(r.ok for r in slow.results + fast.results)
    # 16 arrivals at 20/s take about 0.75 s (15 exponential gaps) before the last answer.
    assert slow.duration_s > 0.3 and slow.peak_in_flight < 16
    assert fast.peak_in_flight == 3  # the cap holds an arrival rate far above the engine's
    starts = sorted(r.started_s for r in fast.results)
    assert starts[-1] - starts[0] > 0.05  # queued behind the cap, not sent at once
