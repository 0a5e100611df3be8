"""Automatic restarts with a real host worker and real transformers engines."""

from __future__ import annotations

import os
import signal

import httpx
import pytest
import time_machine
from django.test import Client, override_settings
from django.utils import timezone

from deployments import planning
from deployments.host import engine_control as runner
from deployments.host import restart_policy as outcomes
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Host
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "restarthost"


def start_worker(host_worker, model_root, **env: str):
    return start_sim_worker(host_worker, HOST, model_root, **env)


def launch(operator, name: str, auto_restart: bool | None = True) -> Deployment:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
        auto_restart=auto_restart,
    )
    return deployment_create(user=operator, request=request)


def status_of(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def wait_running(d: Deployment, worker) -> None:
    try:
        wait_for(lambda: status_of(d) in ("running", "failed"), timeout_s=120, interval_s=0.3)
    except AssertionError:
        print(worker.log())
        raise
    assert d.status == "running", d.failure_reason


def active_lease_gpus(d: Deployment) -> list[int]:
    return sorted(
        GpuLease.objects.filter(deployment=d, active=True).values_list("gpu__index", flat=True)
    )


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)  # a launch alone may wait 120 s for its own message
def test_killed_engine_comes_back_then_gives_up(host_worker, model_root, operator) -> None:
    worker = start_worker(
        host_worker,
        model_root,
        SHARDBOARD_RESTART_BACKOFF_S="1",
        SHARDBOARD_RESTART_MAX_ATTEMPTS="1",
    )
    d = launch(operator, "phoenix")
    assert d.auto_restart
    wait_running(d, worker)
    gpus, first_pid = active_lease_gpus(d), d.pid
    assert len(gpus) == 1

    os.killpg(d.pgid, signal.SIGKILL)
    wait_for(lambda: status_of(d) == "restarting", interval_s=0.1)
    assert active_lease_gpus(d) == gpus  # the GPUs stay leased through the backoff
    restart_event = d.events.get(new_status="restarting")
    assert "exited unexpectedly" in restart_event.reason
    assert "Restart 1 of 1 in 1 s" in restart_event.reason
    wait_running(d, worker)
    assert d.pid != first_pid and d.restart_count == 1
    assert active_lease_gpus(d) == gpus
    assert "restart 1 of 1" in d.events.filter(new_status="starting").last().reason
    answer = httpx.post(
        f"{d.base_url}/v1/completions", json={"prompt": "1 + 1 =", "max_tokens": 4}, timeout=30
    )
    assert answer.status_code == 200

    os.killpg(d.pgid, signal.SIGKILL)  # no attempts left
    wait_for(lambda: status_of(d) == "failed", interval_s=0.1)
    assert "gave up after 1 automatic restarts" in d.failure_reason
    assert d.diagnosis.get("title")
    assert active_lease_gpus(d) == []
    statuses = list(d.events.values_list("new_status", flat=True))
    assert statuses == [
        "pending",
        "starting",
        "running",
        "restarting",
        "starting",
        "running",
        "failed",
    ]


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)  # a launch alone may wait 120 s for its own message
def test_stop_during_backoff_cancels_the_restart(host_worker, model_root, operator) -> None:
    worker = start_worker(host_worker, model_root, SHARDBOARD_RESTART_BACKOFF_S="60")
    d = launch(operator, "stopme")
    wait_running(d, worker)
    os.killpg(d.pgid, signal.SIGKILL)
    wait_for(lambda: status_of(d) == "restarting", interval_s=0.1)
    assert "in 60 s" in d.events.get(new_status="restarting").reason
    assert d.restart_at is not None
    client = Client()
    client.force_login(operator)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert ">Restarting</span>" in page and "next attempt at" in page
    assert 'id="stop-button"' in page  # a stop cancels the pending restart

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: status_of(d) == "stopped", interval_s=0.1)
    assert active_lease_gpus(d) == []
    assert d.restart_at is None
    # The countdown task is still queued; when it arrives, or arrives twice, nothing starts.
    assert "skipped" in runner.restart(d.pk, 1)
    assert "skipped" in runner.restart(d.pk, 1)
    d.refresh_from_db()
    assert d.status == "stopped"
    assert list(d.events.values_list("new_status", flat=True))[-3:] == [
        "restarting",
        "stopping",
        "stopped",
    ]


@pytest.mark.django_db
def test_backoff_doubles_and_is_capped() -> None:
    with override_settings(SHARDBOARD_RESTART_BACKOFF_S=5, SHARDBOARD_RESTART_BACKOFF_MAX_S=60):
        assert [outcomes.backoff_s(n) for n in range(1, 7)] == [5, 10, 20, 40, 60, 60]
        assert outcomes.backoff_s(10_000) == 60


def test_restart_moves_are_compare_and_set() -> None:
    from deployments.models import can_move

    assert can_move(Status.RUNNING, Status.RESTARTING)
    assert can_move(Status.STARTING, Status.RESTARTING)
    assert can_move(Status.RESTARTING, Status.STOPPING)
    assert can_move(Status.RESTARTING, Status.STARTING)
    assert not can_move(Status.STOPPED, Status.RESTARTING)
    assert not can_move(Status.FAILED, Status.RESTARTING)
    assert not can_move(Status.RESTARTING, Status.RUNNING)


@pytest.fixture
def row(operator):
    host = Host.objects.create(name="policyhost", queue="host.policyhost", simulated=True)
    return Deployment.objects.create(
        name="policy",
        model_id="/m",
        engine="transformers",
        host=host,
        created_by=operator,
        auto_restart=True,
        status=Status.RUNNING,
    )


@pytest.mark.django_db
def test_restart_policy(row, settings) -> None:
    settings.SHARDBOARD_RESTART_MAX_ATTEMPTS = 3
    assert outcomes.next_attempt(row) is None  # never ran: a first start is not retried
    with time_machine.travel("2026-12-01 10:00:00+00:00", tick=False):
        row.events.create(new_status=Status.RUNNING, created_at=timezone.now())
    with time_machine.travel("2026-12-01 10:01:00+00:00", tick=False):
        assert outcomes.next_attempt(row) == 1
        row.restart_count = 3
        assert outcomes.next_attempt(row) is None  # attempts used up
    with time_machine.travel("2026-12-01 10:11:00+00:00", tick=False):
        assert outcomes.next_attempt(row) == 1  # ran ten minutes: the count starts over
    row.auto_restart = False
    assert outcomes.next_attempt(row) is None


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)  # a launch alone may wait 120 s for its own message
def test_restart_survives_a_worker_crash_during_backoff(host_worker, model_root, operator) -> None:
    env = {"SHARDBOARD_RESTART_BACKOFF_S": "6"}
    worker = start_worker(host_worker, model_root, **env)
    d = launch(operator, "crashy")
    wait_running(d, worker)
    old_pid = d.pid
    os.killpg(d.pgid, signal.SIGKILL)
    wait_for(lambda: status_of(d) == "restarting", interval_s=0.1)
    worker.stop(signal.SIGKILL)  # the countdown task dies with it, unacknowledged
    again = start_worker(host_worker, model_root, **env)
    wait_for(lambda: "'restarts_resent': 1" in again.log())
    wait_running(d, again)
    assert d.pid != old_pid and d.restart_count == 1
    assert d.events.filter(new_status="starting").count() == 2  # one restart, not two
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: status_of(d) == "stopped", interval_s=0.2)
    assert active_lease_gpus(d) == []
