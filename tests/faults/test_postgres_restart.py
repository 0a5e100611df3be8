"""PostgreSQL restarted while an engine starts: the host worker's launch outlives it and
promotes the engine, the pages say the database is away instead of failing, and answer again
at once after it is back (no stale connection kept)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connections

from deployments.lifecycle.services import deployment_stop
from deployments.models import Deployment
from tests.faults.support import check_after, launch
from tests.support.gateway import session_for
from tests.support.live_server import start_server, stop_server
from tests.support.personas import make_user
from tests.support.private_postgres import PrivatePostgres
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "pghost"
DOWN_S = 4.0
# No sweeper to hide behind: the launch and stop tasks themselves must outlive the restarts.
TASKS_ONLY = {"SHARDBOARD_SWEEP_AFTER_S": "3600", "SHARDBOARD_STOP_GRACE_S": "5"}


@pytest.fixture
def web(private_postgres: PrivatePostgres, settings: Any) -> Iterator[str]:
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    server = start_server()
    yield f"http://127.0.0.1:{server.port.value}"
    stop_server(server)


def _status(d: Deployment) -> str:
    """The row's status; this process's own connection may be the one the restart cut."""
    try:
        d.refresh_from_db()
    except Exception:
        connections.close_all()
        return ""
    return str(d.status)


@pytest.mark.postgres
@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(240)
def test_postgres_restarted_during_launch(
    private_postgres: PrivatePostgres, web: str, host_worker: Any, model_root: Any
) -> None:
    operator = make_user("otto-operator", "operator")
    cookies, _ = session_for(operator)
    page = httpx.Client(base_url=web, cookies=cookies, timeout=15)
    worker = start_sim_worker(host_worker, HOST, model_root, **TASKS_ONLY)
    d = launch(operator, "pg-restart", HOST)
    wait_for(lambda: _status(d) == "starting", timeout_s=120, interval_s=0.2)
    assert page.get(f"/deployments/{d.pk}/").status_code == 200  # the server has a connection

    _restart_while_starting(private_postgres, page, d, worker, operator)


def _restart_while_starting(
    server: PrivatePostgres, page: httpx.Client, d: Deployment, worker: Any, operator: Any
) -> None:
    server.stop()
    start_s = time.monotonic()
    away = page.get(f"/deployments/{d.pk}/", headers={"Accept": "text/html"})
    assert away.status_code == 503, away.text[:300]  # a bare 500 before the fix
    assert "database" in away.text.lower() and "Traceback" not in away.text
    api = page.get(f"/deployments/{d.pk}/log/", headers={"Accept": "application/json"})
    assert api.status_code == 503 and "database" in api.json()["error"].lower(), api.text[:300]
    time.sleep(DOWN_S)
    server.start()

    wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=150, interval_s=0.2)
    act_again_s = time.monotonic() - start_s
    assert d.status == "running", (d.failure_reason, worker.log()[-4000:])
    assert "database call failed" in worker.log()  # the outage was seen, and outlived
    again = page.get(f"/deployments/{d.pk}/")
    assert again.status_code == 200 and "running" in again.text

    # A restart nobody saw: connections kept open across requests and tasks are dead now.
    server.stop()
    server.start()
    connections.close_all()
    after = page.get(f"/deployments/{d.pk}/")
    assert after.status_code == 200, after.text[:300]

    pid = d.pid
    deployment_stop(user=operator, deployment=d)
    try:
        wait_for(lambda: _status(d) == "stopped", interval_s=0.2)
    except AssertionError:
        pytest.fail(f"not stopped: {d.status}\n{worker.log()[-3000:]}")
    audit = ["deployment.create", "deployment.spawn", "deployment.stop"]
    check_after("PostgreSQL restarted during launch", act_again_s, [pid], audit)
