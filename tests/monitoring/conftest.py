from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from monitoring.gpus.simulated import SimulatedBackend


@pytest.fixture
def sim_state_dir(tmp_path: Path) -> Path:
    return tmp_path / "simgpus"


@pytest.fixture
def sim4(sim_state_dir: Path) -> SimulatedBackend:
    return SimulatedBackend("4xH100-80GB@nvlink", state_dir=sim_state_dir, seed=7)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing in for an engine."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set: these tests need a real Redis")
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {urlparse(url).netloc} unreachable: {exc}")
    yield client
    client.close()
