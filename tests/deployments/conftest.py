"""Shared by the tests that launch real engines: a simulated host (the tiny model is in tests/conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from monitoring.models import Host
from tests.conftest import wait_for


def start_sim_worker(host_worker: Any, host: str, model_root: Path, **env: str) -> Any:
    """A real host worker on four simulated H100s, returned once its GPUs are registered."""
    env = {
        "GPU_BACKEND": "simulated",
        "SIMULATED_GPUS": "4xH100-80GB@nvlink",
        "MODEL_ROOTS": str(model_root),
        "HEARTBEAT_INTERVAL_S": "1",
        **env,
    }
    proc = host_worker(host, **env)
    wait_for(lambda: Host.objects.filter(name=host, gpus__isnull=False).exists(), timeout_s=60)
    return proc
