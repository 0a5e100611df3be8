"""Benchmark fixtures: deployment rows on a simulated host, recorded runs, GPU history."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.host.level_readings import add_readings
from benchmarks.host.loadgen.stats import RequestResult, summarize
from benchmarks.models import BenchmarkRun
from deployments.models import Deployment
from monitoring.gpus.base import GpuSample, HostSample
from monitoring.history import raw_key
from monitoring.host.worker import history_writer
from monitoring.models import Gpu, Host
from monitoring.selectors import redis_client

GIB = 1024**3
HOST = "bench-pages"


@pytest.fixture
def sim_host(transactional_db: None) -> Host:
    host = Host.objects.create(name=HOST, queue=f"host.{HOST}", backend="simulated", simulated=True)
    for i in range(2):
        Gpu.objects.create(
            host=host, index=i, uuid=f"GPU-b{i}", name="H100-80GB", memory_total_bytes=80 * GIB
        )
    redis_client().delete(raw_key(HOST))
    return host


@pytest.fixture
def make_deployment(sim_host: Host, operator: Any) -> Callable[..., Deployment]:
    def make(name: str = "tiny", status: str = "running", tp: int = 1) -> Deployment:
        return Deployment.objects.create(
            name=name,
            model_id="/models/tiny",
            engine="transformers",
            host=sim_host,
            status=status,
            bind_host="127.0.0.1",
            port=1,
            plan={
                "tensor_parallel_size": tp,
                "pipeline_parallel_size": 1,
                "max_concurrency": 3.5,
                "kv_cache_tokens": 2400,
                "command": ["vllm", "serve", "/models/tiny", f"--tensor-parallel-size={tp}"],
            },
            created_by=operator,
        )

    return make


def record_samples(start_ms: int, seconds: int, util: float) -> None:
    store = history_writer()
    for s in range(seconds):
        gpus = tuple(
            GpuSample(i, f"GPU-b{i}", util, None, 20 * GIB, 60 * GIB, 80 * GIB, 50, 300_000,
                      700_000, 1800, None, (), 0, (), False, None)
            for i in range(2)
        )  # fmt: skip
        store.append(HOST, HostSample(ts_ms=start_ms + 1000 * s, gpus=gpus))


def recorded_level(concurrency: int, ttft_s: float, start_ms: int, failed: int = 0) -> dict:
    results = [
        RequestResult(True, 0.0, ttft_s * (1 + i / 10), [0.01 * concurrency] * 9,
                      ttft_s + 0.09 * concurrency, 10, 20)
        for i in range(8)
    ] + [RequestResult(error="HTTP 500: boom") for _ in range(failed)]  # fmt: skip
    figures = summarize(results, duration_s=2.0 / concurrency)
    figures.update(
        load=concurrency,
        concurrency=concurrency,
        rate=None,
        peak_in_flight=concurrency,
        started_ms=start_ms,
        ended_ms=start_ms + 3000,
        stopped="",
        engine={"available": False},
        host_cpu_pct=30.0,
        client_cpu_pct=10.0,
    )
    return figures


@pytest.fixture
def recorded_run(operator: Any) -> Callable[..., BenchmarkRun]:
    clock = {"next_ms": time.time_ns() // 1_000_000 - 60_000}  # streams take samples in order

    def make(d: Deployment, label: str, speed: float = 1.0) -> BenchmarkRun:
        now_ms = clock["next_ms"]
        clock["next_ms"] += 13_000
        levels = []
        for n, c in enumerate((1, 2, 4)):
            start = now_ms + n * 4000
            record_samples(start, 3, util=min(100.0, 25.0 * c))
            levels.append(recorded_level(c, 0.05 * c / speed, start))
        layout = {
            "deployment": d.name,
            "host": HOST,
            "engine": d.engine,
            "simulated": True,
            "gpu_indices": [0, 1][: d.snapshot.engine_args.tensor_parallel_size],
            "tensor_parallel_size": d.snapshot.engine_args.tensor_parallel_size,
            "pipeline_parallel_size": 1,
            "plan_max_concurrency": 3.5,
            "plan_kv_cache_tokens": 2400,
            "command": list(d.planned_argv),
        }
        workload = {"prompt": {"mean": 20}, "output": {"mean": 10}, "levels": [1, 2, 4],
                    "requests_per_level": 8, "sla_ttft_p95_ms": 150.0}  # fmt: skip
        return BenchmarkRun.objects.create(
            deployment=d,
            label=label,
            status="succeeded",
            workload=workload,
            layout=layout,
            levels=add_readings(levels, layout, workload),
            created_by=operator,
        )

    return make
