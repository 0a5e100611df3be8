from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from monitoring import worker
from monitoring.gpus.simulated import SimulatedBackend
from monitoring.history import minute_key, owners_key, raw_key

SPEC4 = "4xH100-80GB@nvlink"


def unique_host(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.ping()
    yield client
    client.close()


@pytest.fixture
def host_name(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh host name; its Redis keys are removed afterwards (Redis outlives test DBs)."""
    name = unique_host("mon")
    yield name
    redis_client.delete(raw_key(name), minute_key(name), owners_key(name))


@pytest.fixture
def sim4(tmp_path: Path) -> SimulatedBackend:
    return SimulatedBackend(SPEC4, state_dir=tmp_path / "simgpus", seed=3)


@pytest.fixture
def engine_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real process in its own process group, standing in for an engine."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    yield proc
    proc.kill()
    proc.wait()


def registered(host: str, backend: SimulatedBackend) -> Any:
    from monitoring.models import Host

    worker.register(host, backend)
    return Host.objects.get(name=host)


def fill_history(host: str, backend: SimulatedBackend, seconds: int = 10) -> list[Any]:
    """``seconds`` samples one second apart, ending now, appended through History."""
    from monitoring.selectors import history

    store = history()
    now_ms = time.time_ns() // 1_000_000
    samples = []
    for k in range(seconds, 0, -1):
        sample = backend.sample()
        sample = type(sample)(ts_ms=now_ms - k * 1000, gpus=sample.gpus)
        store.append(host, sample)
        samples.append(sample)
    return samples
