"""A LoRA replica restarted after its engine died loads its adapters before it runs again
(issue 39): the real vLLM (its CPU build, in place of simulated GPUs) launched by a real host
worker, an adapter loaded, the engine's process group killed; the worker's watchdog and
restart path start a new engine, which lists the adapter, its placement loaded before the
replica's move to running.

Two vLLM starts (the launch and the restart): 45 s each on two quiet cores, minutes on loaded
ones. (A first start with adapters wanted: the relaunch in test_lora_flows_browser; a wake:
test_lora_engine.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments import planning
from deployments.lifecycle import adapters
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import AdapterReplica, AdapterStatus, Deployment, Status
from tests.support.lora import DEMO_BASE, wait_state
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine]
HOST = "lorarestart"
START_S = 600.0  # one vLLM start on shared cores


def engine_models(d: Deployment) -> list[str]:
    key = {"Authorization": f"Bearer {d.engine_api_key()}"}
    answer = httpx.get(f"{d.base_url}/v1/models", headers=key, timeout=30)
    return [m["id"] for m in answer.json()["data"]]


def state(d: Deployment) -> tuple[str, int | None]:
    d.refresh_from_db()
    return d.status, d.pid


def running(d: Deployment, worker: Any, other_than: int | None = None) -> Deployment:
    try:
        wait_state(
            lambda: state(d)[0] in (Status.RUNNING, Status.FAILED) and d.pid != other_than,
            True,
            timeout_s=START_S,
        )
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    assert d.status == Status.RUNNING, d.failure_reason
    return d


@pytest.mark.timeout(1500)  # two real vLLM starts, one after the other, on shared cores
def test_a_restarted_replica_loads_its_adapters_before_it_runs_again(
    root: Path, host_worker: Any, operator: Any
) -> None:
    worker = start_sim_worker(host_worker, HOST, root, SHARDBOARD_RESTART_BACKOFF_S="1")
    lora = planning.PlanRequest(enable_lora=True, max_loras=2, max_lora_rank=8)
    request = LaunchRequest(
        name="tuned",
        model_ref=f"local:0/{DEMO_BASE}",
        host_name=HOST,
        engine="vllm",
        plan_request=lora,
        auto_restart=True,
    )
    d = running(deployment_create(user=operator, request=request), worker)
    adapter = adapters.adapter_load(
        user=operator, deployment=d, name="good", source="local:0/adapters/good"
    )
    placement = AdapterReplica.objects.get(adapter=adapter, replica=d)
    wait_state(lambda: AdapterReplica.objects.get(pk=placement.pk).status, AdapterStatus.LOADED)
    assert "good" in engine_models(d)

    first_pid, first_port = d.pid, d.port
    assert d.pgid
    os.killpg(d.pgid, signal.SIGKILL)
    running(d, worker, other_than=first_pid)
    assert d.restart_count == 1 and d.port != first_port
    restarted = d.events.filter(new_status=Status.STARTING).order_by("created_at").last()
    assert restarted is not None and "restart 1 of" in restarted.reason
    assert "good" in engine_models(d)  # the new engine, loaded by the restart path itself
    placement.refresh_from_db()
    assert placement.status == AdapterStatus.LOADED
    back = d.events.filter(new_status=Status.RUNNING).order_by("created_at").last()
    assert back is not None and restarted.created_at < placement.updated_at <= back.created_at
    adapter.refresh_from_db()
    assert adapter.status == AdapterStatus.LOADED

    deployment_stop(user=operator, deployment=d)
    wait_state(lambda: state(d)[0], Status.STOPPED, timeout_s=180)
