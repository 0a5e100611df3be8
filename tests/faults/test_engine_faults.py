"""Engines that hang or never get ready, and a database that drops the host worker's
connections while an engine starts."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.db import connection

from deployments.lifecycle.services import deployment_stop
from deployments.models import GpuLease
from tests.faults.support import (
    FAST_HOST,
    check_after,
    engine_alive,
    launch,
    status_of,
    wait_status,
)
from tests.support.workers import start_sim_worker

HOST = "enginehost"
FAST_HEALTH = {
    "SHARDBOARD_HEALTH_INTERVAL_S": "0.5",
    "SHARDBOARD_HEALTH_TIMEOUT_S": "0.5",
    "SHARDBOARD_HEALTH_FAILURES": "3",
}


def _signal_group(pgid: int | None, sig: int) -> None:
    if pgid:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_hung_engine_is_failed(host_worker, model_root, operator) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root, **FAST_HOST, **FAST_HEALTH)
    d = launch(operator, "hangs", HOST, auto_restart=False)
    wait_status(d, {"running"}, 150, worker)
    pid, pgid = d.pid, d.pgid
    try:
        _signal_group(pgid, signal.SIGSTOP)
        start_s = time.monotonic()
        wait_status(d, {"failed"}, 30, worker)  # `running` for ever before the fix
        act_again_s = time.monotonic() - start_s
        assert "not answering its health check" in d.failure_reason
        reasons = list(d.events.values_list("reason", flat=True))
        assert any("not answering its health check" in r for r in reasons), reasons
        assert not GpuLease.objects.filter(deployment=d, active=True).exists()
        assert not engine_alive(pid)
        check_after("engine SIGSTOPped while running", act_again_s, [pid], ["deployment.spawn"])
    finally:
        _signal_group(pgid, signal.SIGCONT)
        _signal_group(pgid, signal.SIGKILL)


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_engine_that_never_gets_ready_fails(host_worker, model_root, operator) -> None:
    worker = start_sim_worker(
        host_worker, HOST, model_root, SHARDBOARD_READY_TIMEOUT_S="5", **FAST_HOST
    )
    d = launch(operator, "never-ready", HOST)
    wait_status(d, {"starting"}, 120, worker)
    pgid = d.pgid
    try:
        _signal_group(pgid, signal.SIGSTOP)  # alive, never answering
        start_s = time.monotonic()
        wait_status(d, {"failed"}, 60, worker)
        act_again_s = time.monotonic() - start_s
        assert "not ready after" in d.failure_reason, d.failure_reason
        check_after("engine never ready", act_again_s, [d.pid], ["deployment.spawn"])
    finally:
        _signal_group(pgid, signal.SIGCONT)
        _signal_group(pgid, signal.SIGKILL)


def _drop_other_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_database_drops_connections_while_starting(host_worker, model_root, operator) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    # No sweeper to hide behind: the launch task itself must outlive the dropped connection.
    worker = start_sim_worker(
        host_worker, HOST, model_root, SHARDBOARD_SWEEP_AFTER_S="3600", **FAST_HEALTH
    )
    d = launch(operator, "db-drop", HOST)
    wait_status(d, {"starting"}, 120, worker)
    start_s = time.monotonic()
    dropped = _drop_other_connections()
    assert dropped >= 1
    assert status_of(d) == "starting"
    wait_status(d, {"running", "failed"}, 120, worker)  # the task died in `starting` before
    act_again_s = time.monotonic() - start_s
    assert d.status == "running", d.failure_reason
    assert "database call failed" in worker.log()
    pid = d.pid
    deployment_stop(user=operator, deployment=d)
    wait_status(d, {"stopped"}, 60, worker)
    check_after("database connections dropped in starting", act_again_s, [pid], [])
