"""A real `manage.py hostworker` process registers its simulated host and publishes samples."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest
import redis
from django.conf import settings

from monitoring import live, selectors
from monitoring.models import CPU_INDEX, Host
from tests.support.monitoring import SPEC4
from tests.support.waiting import STATE_WAIT_S, wait_for

pytestmark = [pytest.mark.worker]


def _registered(name: str) -> Host | None:
    host = Host.objects.filter(name=name).first()
    return host if host is not None and host.gpus.filter(present=True).count() == 5 else None


def _one_message(name: str, kind: str) -> dict:
    """The next message of ``kind`` on a live stream, read as an ASGI process's hub reads it."""
    pubsub = redis.Redis.from_url(settings.REDIS_URL).pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(name)
    try:
        deadline = time.monotonic() + STATE_WAIT_S
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=1)
            if message and json.loads(message["data"])["type"] == kind:
                return json.loads(message["data"])
        raise AssertionError(f"no {kind} message on {name}")
    finally:
        pubsub.close()


def test_worker_registers_heartbeats_samples_and_publishes(host_worker, host_name) -> None:
    proc = host_worker(
        host_name, GPU_BACKEND="simulated", SIMULATED_GPUS=SPEC4, HEARTBEAT_INTERVAL_S="0.5"
    )
    try:
        host = wait_for(lambda: _registered(host_name))
    except AssertionError:
        print(proc.log())
        raise
    assert host.simulated and host.backend == "simulated" and host.queue == f"host.{host_name}"
    assert SPEC4 in host.backend_note
    assert [(g.index, g.name) for g in host.gpus.gpus()] == [
        (i, "NVIDIA H100 80GB HBM3") for i in range(4)
    ]
    # beside the simulated GPUs, the host's own CPU and RAM, real (vLLM's CPU build runs there)
    cpu = host.gpus.cpus().get()
    assert (cpu.index, cpu.kind) == (CPU_INDEX, "cpu") and cpu.name.startswith("CPU · ")
    assert cpu.memory_total_bytes == psutil.virtual_memory().total
    assert host.info["cpu"]["cores"] == len(os.sched_getaffinity(0))
    assert len(host.topology) == 6
    assert {(lk["a"], lk["b"], lk["label"]) for lk in host.topology} >= {
        (0, 1, "NV18"),
        (2, 3, "NV18"),
    }
    assert host.is_online()

    store = selectors.history()
    first = wait_for(lambda: store.latest(host_name))
    assert [g.index for g in first.gpus] == [0, 1, 2, 3, CPU_INDEX]
    ram = first.gpus[-1]
    assert ram.memory_total_bytes == psutil.virtual_memory().total
    assert (
        0 < (ram.memory_used_bytes or 0) < ram.memory_total_bytes and ram.gpu_util_pct is not None
    )
    assert abs(first.ts_ms - time.time() * 1000) < 5000
    wait_for(lambda: store.latest(host_name).ts_ms > first.ts_ms)

    beat = host.last_heartbeat
    wait_for(lambda: Host.objects.get(name=host_name).last_heartbeat > beat)

    sample = _one_message(live.stream(host_name), "sample")
    assert sample["h"] == host_name and sample["sim"] is True and len(sample["g"]) == 5
    assert [r["name"] for r in sample["rows"]][:4] == ["NVIDIA H100 80GB HBM3"] * 4
    assert [(r["kind"], r["simulated"]) for r in sample["rows"]][-1] == ("cpu", False)

    proc.stop()
    assert proc.proc.returncode == 0, proc.log()
    assert Host.objects.get(name=host_name).last_heartbeat is None  # offline at once
