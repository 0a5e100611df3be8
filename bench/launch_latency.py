"""Launch and stop latency through the real stack.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/launch_latency.py \
        [--launches 20] [--engine stub|transformers]

Uses the configured database (DATABASE_URL; migrated here) and Redis (REDIS_URL), starts a
real host worker process (`manage.py hostworker`) on a simulated 4-GPU host, and drives the
real services from this process: `deployment_create` → on commit the Celery task on the host
queue → the worker spawns the engine; `deployment_stop` → task → SIGTERM to the group → leases
released. Per launch, sequentially:

* launch: `deployment_create` called → engine process created (its start time in
  /proc/<pid>/stat; 10 ms clock-tick resolution). Target p95 <= 1 s.
* stop: the engine's exit (this process polls its pid every 2 ms) → the leases' released_at.
  Target <= 1 s. Also stop request → exit, and stop request → released.

`--engine stub` (default) runs tests/support/stub_engine.py through SHARDBOARD_TRANSFORMERS_BIN,
which is ready at once, so the figures are the panel's own path; `--engine transformers` runs
the real `transformers serve` on the tiny demo model (fewer launches: each loads a model).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
from engine_spawn import report  # noqa: E402  (the same figures' format)

STUB_ENGINE = ROOT / "tests" / "support" / "stub_engine.py"
HOST = f"bench-{os.getpid()}"


def worker_log(work: Path, name: str) -> Path:
    return work / f"worker-{name}.log"


def start_worker(
    work: Path,
    engine: str = "",
    *,
    name: str = HOST,
    gpus: str = "4xH100-80GB@nvlink",
    **extra_env: str,
) -> subprocess.Popen[bytes]:
    """A real host worker on simulated GPUs, in a session of its own; ``engine`` "stub" runs
    the stub engine in place of transformers. Its output goes to ``worker_log(work, name)``."""
    env = dict(os.environ)
    env.update(
        GPU_BACKEND="simulated",
        SIMULATED_GPUS=gpus,
        MODEL_ROOTS=str(work / "models"),
        HEARTBEAT_INTERVAL_S="1",
        HF_HOME=str(work / "hf"),
        **extra_env,
    )
    if engine == "stub":
        env["SHARDBOARD_TRANSFORMERS_BIN"] = str(STUB_ENGINE)
    cmd = [sys.executable, str(ROOT / "manage.py"), "hostworker", "--name", name]
    cmd += ["--loglevel", "WARNING", "--no-default-queue"]
    with worker_log(work, name).open("wb") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def boot_clock_s() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_since_boot_s(pid: int) -> float:
    """/proc/<pid>/stat starttime (clock ticks since boot): the same clock as CLOCK_BOOTTIME.

    psutil's create_time adds it to the boot time, which /proc/stat gives in whole seconds,
    so it cannot be compared with time.time() to better than a second.
    """
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate: Any, timeout_s: float, interval_s: float = 0.005) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


class ExitWatch:
    """Polls a pid from outside (it is the worker's child) and notes when it is gone."""

    def __init__(self, pid: int, create_time: float) -> None:
        from deployments.host import supervisor as sv

        self.exited_at: float | None = None
        self._alive = lambda: sv.is_alive(pid, create_time)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._alive():
            time.sleep(0.002)
        self.exited_at = time.time()

    def join(self, timeout_s: float) -> float:
        self._thread.join(timeout_s)
        if self.exited_at is None:
            raise RuntimeError("the engine did not exit")
        return self.exited_at


def operator() -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


def one_round(user: Any, i: int, ready_timeout_s: float) -> dict[str, float]:
    from deployments import planning
    from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
    from deployments.models import Deployment, GpuLease, Status

    request = LaunchRequest(
        name=f"bench-{os.getpid()}-{i}",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",  # the stub or transformers serve (SHARDBOARD_TRANSFORMERS_BIN)
        plan_request=planning.PlanRequest(tensor_parallel_size=1),
    )
    t_request, boot_request = time.time(), boot_clock_s()
    d = deployment_create(user=user, request=request)
    t_created = time.time()
    row = wait_for(lambda: Deployment.objects.filter(pk=d.pk, pid__isnull=False).first(), 10)
    spawned_s = started_since_boot_s(row.pid) - boot_request
    wait_for(
        lambda: Deployment.objects.filter(pk=d.pk, status__in=["running", "failed"]).exists(),
        ready_timeout_s,
        0.02,
    )
    row.refresh_from_db()
    if row.status != Status.RUNNING:
        raise RuntimeError(f"deployment {d.pk} failed: {row.failure_reason}")
    ready_s = time.time() - t_request
    watch = ExitWatch(row.pid, row.process_started_at)
    t_stop = time.time()
    deployment_stop(user=user, deployment=row)
    exited_at = watch.join(60)
    wait_for(lambda: not GpuLease.objects.filter(deployment=d, active=True).exists(), 60)
    released_at = max(
        lease.released_at.timestamp() for lease in GpuLease.objects.filter(deployment=d)
    )
    return {
        "create": t_created - t_request,
        "spawned": spawned_s,
        "ready": ready_s,
        "stop_exit": exited_at - t_stop,
        "exit_released": released_at - exited_at,
        "stop_released": released_at - t_stop,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--engine", choices=("stub", "transformers"), default="stub")
    args = parser.parse_args()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from deployments.catalog.demo_model import make_tiny_llama
    from monitoring.models import Host

    call_command("migrate", verbosity=0)
    print(f"database: {connection.vendor}; engine: {args.engine}; launches: {args.launches}")
    with tempfile.TemporaryDirectory(prefix="shardboard-launch-") as tmp:
        work = Path(tmp)
        make_tiny_llama(work / "models" / "tiny")
        (work / "hf" / "hub").mkdir(parents=True)
        from django.conf import settings

        settings.MODEL_ROOTS = [work / "models"]
        worker = start_worker(work, args.engine)
        try:
            wait_for(lambda: Host.objects.filter(name=HOST, gpus__isnull=False).exists(), 90, 0.2)
            time.sleep(1.0)  # let the worker finish starting (reconcile, sampler)
            user = operator()
            timeout_s = 30 if args.engine == "stub" else 180
            rounds = [one_round(user, i, timeout_s) for i in range(args.launches)]
        except Exception:
            print(worker_log(work, HOST).read_text(errors="replace")[-4000:])
            raise
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(30)
    report("deployment_create() returns", [r["create"] for r in rounds])
    report("launch request -> engine process spawned", [r["spawned"] for r in rounds])
    report("launch request -> running (ready + smoke)", [r["ready"] for r in rounds])
    report("stop request -> engine exited", [r["stop_exit"] for r in rounds])
    report("engine exited -> leases released", [r["exit_released"] for r in rounds])
    report("stop request -> leases released", [r["stop_released"] for r in rounds])


if __name__ == "__main__":
    main()
