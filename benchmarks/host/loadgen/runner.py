"""Levels, one after another: N closed-loop clients, each sending its next request when its
last one is answered (`vllm bench serve --max-concurrency N`, guidellm's concurrent profile),
or requests arriving at N per second with exponential gaps, a Poisson process
(`vllm bench serve --request-rate N`, burstiness 1; guidellm's poisson profile), at most
`concurrency` of them in flight. No Django: the host task hands in its hooks (progress,
cancel, the GPU simulation).

A level ends when its requests are sent and answered, or its duration is over and the requests
in flight are answered; early when the run is cancelled (in-flight requests are dropped) or the
engine is gone (a refused connection: nothing listens on its port any more).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from benchmarks.host.loadgen.client import Target, send
from benchmarks.host.loadgen.metrics_poll import EngineMetricsPoller
from benchmarks.host.loadgen.stats import RequestResult
from benchmarks.workload import PromptSpec

TICK_S = 0.5
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
GONE = "the engine stopped answering (connection refused)"
CANCELLED = "cancelled"


class RunFailed(Exception):
    """The run cannot go on; the message says why."""


class Hooks(Protocol):
    def tick(self, progress: dict[str, Any]) -> bool:
        """Show progress; True when the run is to stop (cancelled)."""
        ...

    def level_load(self, load: float | None) -> None:
        """The load starts (a concurrency or a rate) or ends (None): simulated GPUs follow it."""
        ...


@dataclass(frozen=True, slots=True)
class LevelPlan:
    index: int
    concurrency: int  # clients (closed loop), or the most requests in flight (rate)
    requests: int | None = None
    duration_s: float | None = None
    rate: float | None = None  # requests per second: open loop
    seed: int = 0

    @property
    def load(self) -> float:
        return self.concurrency if self.rate is None else self.rate


@dataclass
class LevelOutcome:
    plan: LevelPlan
    results: list[RequestResult] = field(default_factory=list)
    duration_s: float = 0.0
    started_ms: int = 0
    ended_ms: int = 0
    stopped: str = ""  # "", CANCELLED or GONE
    peak_in_flight: int = 0
    engine: dict[str, Any] = field(default_factory=dict)
    client_cpu_pct: float | None = None


class _Level:
    def __init__(self, plan: LevelPlan, prompts: Iterator[PromptSpec]) -> None:
        self.plan, self.prompts = plan, prompts
        self.outcome = LevelOutcome(plan)
        self.issued = 0
        self.in_flight = 0
        self.deadline = 0.0

    def next_prompt(self) -> PromptSpec | None:
        if self.outcome.stopped:
            return None
        if self.plan.requests is not None:
            if self.issued >= self.plan.requests:
                return None
        elif time.perf_counter() >= self.deadline:
            return None
        self.issued += 1
        return next(self.prompts)

    def progress(self) -> dict[str, Any]:
        results = self.outcome.results
        return {
            "level": self.plan.index,
            "load": self.plan.load,
            "done": len(results),
            "failed": sum(1 for r in results if not r.ok),
            "total": self.plan.requests,
            "duration_s": self.plan.duration_s,
        }


async def _one(
    session: aiohttp.ClientSession, target: Target, level: _Level, spec: PromptSpec
) -> None:
    level.in_flight += 1
    level.outcome.peak_in_flight = max(level.outcome.peak_in_flight, level.in_flight)
    try:
        result = await send(session, target, spec.text, spec.max_tokens)
    finally:
        level.in_flight -= 1
    level.outcome.results.append(result)
    if result.engine_gone:
        level.outcome.stopped = level.outcome.stopped or GONE


async def _client(session: aiohttp.ClientSession, target: Target, level: _Level) -> None:
    while (spec := level.next_prompt()) is not None:
        await _one(session, target, level, spec)


async def _arrivals(
    session: aiohttp.ClientSession, target: Target, level: _Level, rate: float
) -> None:
    """Send at exponential gaps (seeded), never more than `concurrency` at once."""
    rng = random.Random(level.plan.seed * 1_000_003 + level.plan.index)  # noqa: S311
    slots = asyncio.Semaphore(level.plan.concurrency)
    sent: set[asyncio.Task[None]] = set()
    next_s = time.perf_counter()

    async def limited(spec: PromptSpec) -> None:
        async with slots:
            await _one(session, target, level, spec)

    try:
        while (spec := level.next_prompt()) is not None:
            sent.add(asyncio.create_task(limited(spec)))
            next_s += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, next_s - time.perf_counter()))
        await asyncio.gather(*sent)
    finally:
        for task in sent:
            task.cancel()  # a cancelled level drops what is in flight
        await asyncio.gather(*sent, return_exceptions=True)


async def _watch(
    level: _Level, hooks: Hooks, clients: list[asyncio.Task[None]], executor: Executor
) -> None:
    loop = asyncio.get_running_loop()
    while not all(c.done() for c in clients):
        if await loop.run_in_executor(executor, hooks.tick, level.progress()):
            level.outcome.stopped = CANCELLED
            for client in clients:
                client.cancel()
            return
        await asyncio.wait(clients, timeout=TICK_S)


def session_for(concurrency: int) -> aiohttp.ClientSession:
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S
    )
    connector = aiohttp.TCPConnector(limit=concurrency + 1, keepalive_timeout=30)
    return aiohttp.ClientSession(connector=connector, timeout=timeout)


async def run_level(
    target: Target,
    plan: LevelPlan,
    prompts: Iterator[PromptSpec],
    hooks: Hooks,
    executor: Executor,
) -> LevelOutcome:
    """`executor` runs the hooks (they may touch the database): one thread for the whole run."""
    level = _Level(plan, prompts)
    out = level.outcome
    async with session_for(plan.concurrency) as session:
        poller = EngineMetricsPoller(session, target.base_url)
        polling = asyncio.create_task(poller.run())
        cpu_started = time.process_time()
        started = time.perf_counter()
        level.deadline = started + (plan.duration_s or 0)
        out.started_ms = time.time_ns() // 1_000_000
        if plan.rate is not None:
            clients = [asyncio.create_task(_arrivals(session, target, level, plan.rate))]
        else:
            clients = [
                asyncio.create_task(_client(session, target, level))
                for _ in range(plan.concurrency)
            ]
        await _watch(level, hooks, clients, executor)
        await asyncio.gather(*clients, return_exceptions=True)
        out.duration_s = time.perf_counter() - started
        out.ended_ms = time.time_ns() // 1_000_000
        out.client_cpu_pct = round(100 * (time.process_time() - cpu_started) / out.duration_s, 1)
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        out.engine = poller.summary()
    return out


async def warm_up(target: Target, prompt: PromptSpec) -> RequestResult:
    """One request before the levels (not counted): the engine answers, connections are up."""
    async with session_for(1) as session:
        return await send(session, target, prompt.text, min(prompt.max_tokens, 16))
