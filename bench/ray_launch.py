"""Two-host launch on a real Ray cluster: launch -> running, and stop -> no process left.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/ray_launch.py [--launches 10]

Uses the configured database (DATABASE_URL; migrated here) and Redis (REDIS_URL), starts two
real host worker processes on loopback, each with its own var directory, one simulated GPU
and its own Ray port range, and launches the tiny model as TP 1 x PP 2 over both: the lead's
worker starts the Ray head, the other's joins it, and the test engine
(tests/support/ray_engine.py, standing in for `vllm serve --distributed-executor-backend ray`
through the same adapter) places one bundle per rank on the cluster. Per launch, in turn:

* launch: `deployment_create` called -> the deployment `running` (cluster formed, engine
  connected, its placement group placed, readiness and smoke test passed).
* stop: `deployment_stop` called -> `stopped`, every Ray node row stopped, and no process
  carrying the deployment's engine or Ray node marker left on the machine (both hosts).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
from engine_spawn import report  # noqa: E402  (the same figures' format)
from launch_latency import operator, start_worker, wait_for, worker_log  # noqa: E402

HOSTS = (f"bench-lead-{os.getpid()}", f"bench-follower-{os.getpid()}")
RAY_ENGINE = ROOT / "tests" / "support" / "ray_engine.py"


def vllm_env(work: Path) -> Path:
    bindir = work / "vllm-env" / "bin"
    bindir.mkdir(parents=True)
    vllm = bindir / "vllm"
    vllm.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{RAY_ENGINE}" "$@"\n')
    vllm.chmod(0o755)
    (bindir / "ray").symlink_to(Path(sys.executable).parent / "ray")
    return vllm


def start_ray_worker(work: Path, name: str, n: int, vllm: Path) -> subprocess.Popen[bytes]:
    low = 21000 + (os.getpid() % 25) * 400 + n * 200  # below the ephemeral ports
    return start_worker(
        work,
        name=name,
        gpus="1xH100-80GB",
        SHARDBOARD_VAR_DIR=str(work / f"{name}-var"),
        SHARDBOARD_VLLM_BIN=str(vllm),
        SHARDBOARD_RAY_PORTS=f"{low}-{low + 199}",
    )


def left_behind(pk: int) -> list[int]:
    import psutil

    from deployments.engines import MARKER_ENV

    markers, found = {str(pk), f"ray-node:{pk}"}, []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER_ENV) in markers and proc.status() != "zombie":
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def one_round(user: Any, i: int) -> dict[str, float]:
    from deployments import planning
    from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
    from deployments.models import Deployment, RayNode

    request = LaunchRequest(
        name=f"bench-ray-{os.getpid()}-{i}",
        model_ref="local:0/tiny",
        host_name=HOSTS[0],
        hosts=HOSTS[1:],
        plan_request=planning.PlanRequest(tensor_parallel_size=1, pipeline_parallel_size=2),
    )
    t_request = time.time()
    d = deployment_create(user=user, request=request)
    done = ["running", "failed"]
    wait_for(lambda: Deployment.objects.filter(pk=d.pk, status__in=done).exists(), 180, 0.05)
    d.refresh_from_db()
    if d.status != "running":
        raise RuntimeError(f"deployment {d.pk} failed: {d.failure_reason}")
    running_s = time.time() - t_request
    t_stop = time.time()
    deployment_stop(user=user, deployment=d)
    wait_for(lambda: Deployment.objects.filter(pk=d.pk, status="stopped").exists(), 60, 0.05)
    stopped_s = time.time() - t_stop
    nodes = RayNode.objects.filter(deployment=d)
    wait_for(lambda: not nodes.exclude(state="stopped").exists() and not left_behind(d.pk), 60)
    return {"running": running_s, "stopped": stopped_s, "clean": time.time() - t_stop}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=10)
    args = parser.parse_args()
    import django

    django.setup()
    from django.core.management import call_command

    from deployments.catalog.demo_model import make_tiny_llama
    from monitoring.models import Host

    call_command("migrate", verbosity=0)
    with tempfile.TemporaryDirectory(prefix="shardboard-ray-") as tmp:
        work = Path(tmp)
        make_tiny_llama(work / "models" / "tiny")
        (work / "hf" / "hub").mkdir(parents=True)
        from django.conf import settings

        settings.MODEL_ROOTS = [work / "models"]
        vllm = vllm_env(work)
        workers = [start_ray_worker(work, name, n, vllm) for n, name in enumerate(HOSTS)]
        try:
            for name in HOSTS:
                wait_for(lambda n=name: Host.objects.filter(name=n, gpus__isnull=False), 90, 0.2)
            time.sleep(1.0)
            user = operator()
            rounds = [one_round(user, i) for i in range(args.launches)]
        except Exception:
            for name in HOSTS:
                print(worker_log(work, name).read_text(errors="replace")[-3000:])
            raise
        finally:
            for worker in workers:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(30)
    report("launch request -> running (two hosts, Ray)", [r["running"] for r in rounds])
    report("stop request -> stopped", [r["stopped"] for r in rounds])
    report("stop request -> no process left, nodes down", [r["clean"] for r in rounds])


if __name__ == "__main__":
    main()
