"""A real Celery host worker process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitoring.models import Host
from tests.support.processes import ROOT, child_env
from tests.support.waiting import STATE_WAIT_S, wait_for


@dataclass
class WorkerProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STATE_WAIT_S) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def spawn_worker(name: str, log_dir: Path, **extra_env: str) -> WorkerProcess:
    log_path = log_dir / f"worker-{name}-{time.monotonic_ns()}.log"
    cmd = [
        sys.executable,
        str(ROOT / "manage.py"),
        "hostworker",
        "--name",
        name,
        "--loglevel",
        "INFO",
        "--no-default-queue",
    ]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(**extra_env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return WorkerProcess(name, proc, log_path, extra_env)


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
    wait_for(lambda: Host.objects.filter(name=host, gpus__isnull=False).exists())
    return proc


def start_fetch_worker(
    host_worker: Any, host: str, model_root: Path, hub_url: str, hf_home: Path, **env: str
) -> Any:
    """A simulated-GPU host worker that downloads Hub weights from the stand-in at `hub_url`
    into `hf_home` (no disk floor; its cache rescanned every 2 s)."""
    fetch_env = {
        "HF_HOME": str(hf_home),
        "HF_ENDPOINT": hub_url,
        "HF_HUB_OFFLINE": "0",
        "SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES": "0",
        "SHARDBOARD_CACHE_SCAN_INTERVAL_S": "2",
        **env,
    }
    return start_sim_worker(host_worker, host, model_root, **fetch_env)
