"""Host-worker side of a benchmark run: drive the levels against the engine next door, store
each level's figures as it ends, read the bottleneck once the GPU samples are in.

Runs in the host worker that owns the engine (queue host.<name>), so the requests do not cross
the network and the host's CPU figures are the engine's host's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
from django.conf import settings
from django.db import connection

from benchmarks import events
from benchmarks.host.level_readings import add_readings
from benchmarks.host.loadgen.client import Target
from benchmarks.host.loadgen.runner import (
    CANCELLED,
    GONE,
    LevelOutcome,
    LevelPlan,
    RunFailed,
    run_level,
    warm_up,
)
from benchmarks.host.loadgen.stats import summarize
from benchmarks.models import BenchmarkRun, RunStatus
from benchmarks.workload import (
    MAX_CONCURRENCY,
    Workload,
    WorkloadError,
    parse_workload,
    request_stream,
)
from deployments.models import Deployment, Engine, Status
from monitoring.host import worker as monitoring_worker

log = logging.getLogger(__name__)

SIM_SATURATION = 8  # simulated GPUs: 100 % utilization at this concurrency (or req/s), linear
SIM_IDLE_UTIL_PCT = 80.0  # what a simulated engine shows outside a benchmark (attach's default)


def target_for(d: Deployment) -> Target:
    vllm = d.engine == Engine.VLLM
    return Target(
        base_url=d.base_url,
        model=d.served_model_name if vllm else None,  # transformers serve: pinned to its model
        api_key=d.engine_api_key() if vllm else None,
        ignore_eos=vllm,  # transformers serve refuses the field
    )


class RunHooks:
    """What the load generator calls back: progress and cancel (database), simulated load."""

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self.deployment = run.deployment
        self.last_push = 0.0

    def tick(self, progress: dict[str, Any]) -> bool:
        BenchmarkRun.objects.filter(pk=self.run.pk).update(progress=progress)
        self.run.progress = progress
        if time.monotonic() - self.last_push >= 0.5:
            self.last_push = time.monotonic()
            events.publish(self.run)
        return bool(BenchmarkRun.objects.filter(pk=self.run.pk, cancel_requested=True).exists())

    def level_load(self, load: float | None) -> None:
        d = self.deployment
        if not d.host.simulated or not d.pid or not psutil.pid_exists(d.pid):
            return  # no simulation, or an engine gone (its GPUs were released)
        backend = monitoring_worker.current_backend()
        attach = getattr(backend, "attach", None)
        if attach is None:
            return
        util = SIM_IDLE_UTIL_PCT if load is None else min(100.0, 100 * load / SIM_SATURATION)
        indices = self.run.layout.get("gpu_indices", [])
        try:
            attach(
                d.pid,
                indices,
                int(self.run.layout.get("memory_bytes_per_gpu", 0)),
                util,
                name=d.name,
            )
        except Exception as exc:  # the simulation is a display aid: never fail the run for it
            log.warning("simulated GPUs could not follow benchmark %s: %s", self.run.pk, exc)


def run(run_id: int) -> dict[str, Any]:
    r = BenchmarkRun.objects.select_related("deployment__host").get(pk=run_id)
    if r.status != RunStatus.PENDING:
        return {"skipped": f"status is {r.status}"}
    d = r.deployment
    if d.status != Status.RUNNING:
        _end(r, RunStatus.FAILED, f"{d.name} is {d.status}, not running.")
        return {"failed": r.error}
    try:
        workload = parse_workload(r.workload)
    except WorkloadError as exc:
        _end(r, RunStatus.FAILED, str(exc))
        return {"failed": r.error}
    if not r.transition(RunStatus.RUNNING):
        return {"skipped": "cancelled before start"}
    events.publish(r)
    hooks = RunHooks(r)
    executor = ThreadPoolExecutor(1, thread_name_prefix=f"bench-{r.pk}")
    try:
        status, error = asyncio.run(_drive(r, workload, target_for(d), hooks, executor))
    except RunFailed as exc:
        status, error = RunStatus.FAILED, str(exc)
    except Exception as exc:  # the run must end, with the figures it has, whatever broke
        log.exception("benchmark %s broke", r.pk)
        status, error = RunStatus.FAILED, f"The benchmark broke: {type(exc).__name__}: {exc}"
    finally:
        executor.submit(_close_db).result()
        executor.shutdown()
    try:
        _finish(r, status, error)
    finally:
        hooks.level_load(None)  # after the readings: the last level's samples keep its load
    return {"status": r.status, "levels": len(r.levels)}


async def _drive(
    r: BenchmarkRun,
    workload: Workload,
    target: Target,
    hooks: RunHooks,
    executor: ThreadPoolExecutor,
) -> tuple[RunStatus, str]:
    first = await warm_up(target, next(request_stream(workload, -1)))
    if not first.ok:
        raise RunFailed(f"The engine did not answer a first request: {first.error}")
    loop = asyncio.get_running_loop()
    for index, value in enumerate(workload.levels):
        plan = level_plan(workload, index, value)
        await loop.run_in_executor(executor, hooks.level_load, value)
        cpu_before = psutil.cpu_times()
        outcome = await run_level(target, plan, request_stream(workload, index), hooks, executor)
        host_cpu = busy_pct(cpu_before, psutil.cpu_times())
        await loop.run_in_executor(executor, _store_level, r, outcome, host_cpu)
        if outcome.stopped == CANCELLED:
            return RunStatus.CANCELLED, ""
        if outcome.stopped == GONE:
            return RunStatus.FAILED, _gone_text(outcome)
        if outcome.results and not any(res.ok for res in outcome.results):
            return RunStatus.FAILED, f"Every request of level {value:g} failed."
    return RunStatus.SUCCEEDED, ""


def fail_interrupted() -> int:
    """At a host worker's start: its runs still `running` lost their task with the old worker
    (a redelivered task finds them running and does nothing), so they end here, failed."""
    interrupted = BenchmarkRun.objects.filter(
        status=RunStatus.RUNNING, deployment__host__name=settings.SHARDBOARD_HOST_NAME
    )
    ended = 0
    for r in interrupted:
        text = "The host worker stopped during the run; the levels measured before are kept."
        ended += r.transition(RunStatus.FAILED, error=text)
        events.publish(r)
    return ended


def busy_pct(before: Any, after: Any) -> float | None:
    """The host's CPU busy share between two psutil.cpu_times() (all cores, 0..100)."""
    total = sum(after) - sum(before)
    idle = after.idle - before.idle + getattr(after, "iowait", 0) - getattr(before, "iowait", 0)
    return round(100 * (1 - idle / total), 1) if total > 0 else None


def level_plan(workload: Workload, index: int, value: float) -> LevelPlan:
    requests, duration_s, seed = workload.requests_per_level, workload.duration_s, workload.seed
    if workload.mode == "rate":
        cap = workload.max_concurrency or MAX_CONCURRENCY
        return LevelPlan(index, cap, requests, duration_s, rate=value, seed=seed)
    return LevelPlan(index, int(value), requests, duration_s, seed=seed)


def _close_db() -> None:
    connection.close()


def _gone_text(outcome: LevelOutcome) -> str:
    failed = sum(1 for res in outcome.results if not res.ok)
    return (
        f"{GONE[0].upper()}{GONE[1:]} during the level at {_load_text(outcome.plan)}: "
        f"{failed} of {len(outcome.results)} requests failed; the figures so far are kept."
    )


def _load_text(plan: LevelPlan) -> str:
    return f"{plan.rate:g} req/s" if plan.rate is not None else f"concurrency {plan.concurrency}"


def _store_level(r: BenchmarkRun, outcome: LevelOutcome, host_cpu_pct: float | None) -> None:
    figures = summarize(outcome.results, outcome.duration_s)
    figures.update(
        {
            "load": outcome.plan.load,  # the level's concurrency or request rate
            "rate": outcome.plan.rate,
            "concurrency": outcome.plan.concurrency if outcome.plan.rate is None else None,
            "peak_in_flight": outcome.peak_in_flight,
            "started_ms": outcome.started_ms,
            "ended_ms": outcome.ended_ms,
            "stopped": outcome.stopped,
            "engine": outcome.engine,
            "host_cpu_pct": host_cpu_pct,
            "client_cpu_pct": outcome.client_cpu_pct,
        }
    )
    r.levels = [*r.levels, figures]
    BenchmarkRun.objects.filter(pk=r.pk).update(levels=r.levels)


def _finish(r: BenchmarkRun, status: RunStatus, error: str) -> None:
    if r.levels:
        time.sleep(settings.SAMPLE_INTERVAL_S + 0.2)  # the last level's GPU samples land
        r.levels = add_readings(r.levels, r.layout, r.workload)
    _end(r, status, error, levels=r.levels)


def _end(r: BenchmarkRun, status: RunStatus, error: str, **fields: Any) -> None:
    if not r.transition(status, error=error, **fields):
        r.refresh_from_db()
        if not r.ended:  # moved by someone else: end it from where it is now
            r.transition(status, error=error, **fields)
    events.publish(r)
