"""End to end with real parts: Redis, a real host worker process, real engines: the real vLLM
(its CPU build, in place of the simulated GPUs) for the launch a user makes by default, the
quicker-starting transformers serve where the lifecycle, not the engine, is the subject."""

from __future__ import annotations

import os
import signal
import uuid

import httpx
import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.planned_vs_measured import memory_table
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.live import enginelog
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Host
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

# A launch may wait 90 s and a stop 60 s for their own messages: more than the default.
pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "e2ehost"


@pytest.fixture
def worker(host_worker, model_root):
    return start_sim_worker(host_worker, HOST, model_root)


def launch(operator, name="tiny", engine="transformers", **plan) -> Deployment:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=HOST,
        engine=engine,
        plan_request=planning.PlanRequest(**plan),
    )
    return deployment_create(user=operator, request=request)


def status_of(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def measured_row(d: Deployment) -> dict | None:
    rows = memory_table(d)["rows"]
    return rows[0] if rows and rows[0]["measured_bytes"] is not None else None


@pytest.mark.timeout(420)  # a real vLLM start: ~45 s alone, minutes on a loaded CI machine
def test_launch_answer_stop(worker, operator, viewer, asgi_server) -> None:
    """The default engine, asked for on simulated GPUs, is the real vLLM (on the CPU): never
    another engine in its place."""
    d = launch(operator, engine="vllm")
    assert d.status == Status.PENDING and d.engine == "vllm"
    assert GpuLease.objects.filter(deployment=d, active=True).count() == 1
    try:
        wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=300, interval_s=0.5)
    except AssertionError:
        print(worker.log())
        raise
    assert d.status == "running", d.failure_reason
    assert d.argv[0].endswith("/vllm") and d.argv[1] == "serve" and "--enforce-eager" in d.argv
    assert d.env["CUDA_VISIBLE_DEVICES"] == ""  # on the CPU, in place of the simulated GPUs
    chat = httpx.post(
        f"{asgi_server.url}/v1/chat/completions",
        json={"model": d.name, "messages": [{"role": "user", "content": "1 + 1 ="}],
              "max_tokens": 4},
        headers=bearer_for(operator),
        timeout=120,
    )  # fmt: skip
    assert chat.status_code == 200, chat.text
    answered = chat.json()
    assert answered["system_fingerprint"].startswith("vllm-")  # vLLM itself answered
    assert answered["usage"]["completion_tokens"] > 0
    lease = GpuLease.objects.get(deployment=d, active=True)
    # Planned vs measured: the simulated GPU shows the engine holding the plan's memory.
    row = wait_for(lambda: measured_row(d), interval_s=0.5)
    assert row["gpu"] == lease.gpu.index and row["planned_bytes"] == lease.memory_bytes > 0
    assert row["measured_bytes"] == lease.memory_bytes and row["difference_bytes"] == 0
    client = Client(HTTP_HOST="127.0.0.1")  # asgi_server narrows ALLOWED_HOSTS to its own
    client.force_login(viewer)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert f'<tr data-gpu="{lease.gpu.index}">' in page and "+0.00 GiB" in page
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: status_of(d) == "stopped", interval_s=0.2)
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    assert memory_table(d)["rows"][0]["measured_bytes"] is None  # nothing measured once ended
    # vLLM's EngineCore and worker outlive the API server by a moment, reparented to init,
    # which reaps them: the group empties (bounded), none of it left running.
    wait_for(lambda: group_gone(d.pgid), interval_s=0.2)
    actions = set(AuditEvent.objects.filter(target_id=str(d.pk)).values_list("action", flat=True))
    assert {"deployment.create", "deployment.spawn", "deployment.stop"} <= actions
    statuses = list(d.events.values_list("new_status", flat=True))
    assert statuses == ["pending", "starting", "running", "stopping", "stopped"]


def test_engine_killed_is_failed_quickly(worker, operator) -> None:
    d = launch(operator, name="killme")
    wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason
    os.killpg(d.pgid, signal.SIGKILL)
    wait_for(lambda: status_of(d) == "failed", interval_s=0.1)
    assert "exited unexpectedly" in d.failure_reason
    assert "signal 9 (SIGKILL)" in d.failure_reason  # the worker spawned it: the real status
    assert "unknown status" not in d.failure_reason
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    # The page of the failed deployment: the diagnosis and the tail saved on the row.
    assert "Application startup complete." in d.log_tail and d.diagnosis["title"]
    client = Client()
    client.force_login(operator)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert 'id="diagnosis"' in page and "Application startup complete." in page
    assert "saved when it ended" in page


def test_engine_terminated_from_outside_names_sigterm(worker, operator) -> None:
    d = launch(operator, name="termme")
    wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason
    os.kill(d.pid, signal.SIGTERM)  # not through Shardboard: an operator's kill, a shutdown
    wait_for(lambda: status_of(d) == "failed", interval_s=0.1)
    assert "killed by signal 15 (SIGTERM)" in d.failure_reason, d.failure_reason
    assert "adopted" not in d.failure_reason
    assert d.diagnosis["title"] == "The engine was killed (SIGTERM)"


def test_worker_killed_then_reconciled(host_worker, worker, operator) -> None:
    d = launch(operator, name="survivor")
    wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason
    wait_for(lambda: any("Uvicorn running on" in t for _, t in enginelog.recent(d.pk)))
    worker.stop(signal.SIGKILL)
    os.killpg(d.pgid, 0)  # the engine lives on in its own session
    marker = uuid.uuid4().hex  # a line the engine writes while no worker ships its log
    assert httpx.get(f"{d.base_url}/health", params={"seen": marker}, timeout=10).is_success
    again = host_worker(HOST, **worker.extra_env)
    wait_for(lambda: "reconciled engines" in again.log())
    assert status_of(d) == "running"  # adopted
    # The new worker ships the log on from where the old one stopped: nothing twice.
    texts = wait_for(
        lambda: (t := [x for _, x in enginelog.recent(d.pk, 1000)]) and marker in str(t) and t
    )
    assert sum(marker in x for x in texts) == 1
    assert sum("Uvicorn running on" in x for x in texts) == 1
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: status_of(d) == "stopped", interval_s=0.2)


def test_a_worker_told_to_stop_its_engines_on_exit_does(host_worker, model_root, operator) -> None:
    # `make run`'s worker: Ctrl-C (SIGTERM or SIGINT to the worker) ends the engines too.
    worker = start_sim_worker(host_worker, HOST, model_root, SHARDBOARD_STOP_ENGINES_ON_EXIT="1")
    d = launch(operator, name="ctrl-c")
    wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason
    pgid = d.pgid
    worker.stop(signal.SIGTERM, timeout_s=60)
    assert status_of(d) == "stopped"
    assert d.events.filter(reason__contains="SHARDBOARD_STOP_ENGINES_ON_EXIT").exists()
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # no engine left behind


def test_bad_input_is_refused_before_anything_starts(worker, operator, viewer) -> None:
    with pytest.raises(DeploymentError, match="Unknown host"):
        deployment_create(
            user=operator,
            request=LaunchRequest(name="x", model_ref="local:0/tiny", host_name="nope"),
        )
    with pytest.raises(DeploymentError, match="divisible"):
        launch(operator, name="tp3", tensor_parallel_size=3)
    with pytest.raises(DeploymentError):
        launch(operator, name="toolong", max_model_len=10_000_000)
    with pytest.raises(DeploymentError, match="role"):
        launch(viewer, name="viewer")
    with pytest.raises(DeploymentError, match="simulated"):
        deployment_create(
            user=operator,
            request=LaunchRequest(name="hub", model_ref="Qwen/Qwen3-14B", host_name=HOST),
        )
    assert not Deployment.objects.exists()
    worker.stop()
    Host.objects.filter(name=HOST).update(last_heartbeat=None)
    with pytest.raises(DeploymentError, match="offline"):
        launch(operator, name="offline")
