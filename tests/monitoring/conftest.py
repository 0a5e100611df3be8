"""Monitoring fixtures: simulated GPUs, a stand-in engine process, Redis, fresh host names."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis
from django.conf import settings

from monitoring.gpus.simulated import SimulatedBackend
from monitoring.history import minute_key, owners_key, raw_key
from tests.support.monitoring import SPEC4, unique_host


@pytest.fixture
def sim_state_dir(tmp_path: Path) -> Path:
    return tmp_path / "simgpus"


@pytest.fixture
def sim4(sim_state_dir: Path) -> SimulatedBackend:
    return SimulatedBackend(SPEC4, state_dir=sim_state_dir, seed=7)


@pytest.fixture
def engine_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real process in its own process group, standing in for an engine."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The Redis the suite runs on (REDIS_URL); unreachable is a failure, not a skip."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {urlparse(settings.REDIS_URL).netloc} unreachable: {exc}")
    yield client
    client.close()


@pytest.fixture
def host_name(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh host name; its Redis keys are removed afterwards (Redis outlives test DBs)."""
    name = unique_host("mon")
    yield name
    redis_client.delete(raw_key(name), minute_key(name), owners_key(name))
