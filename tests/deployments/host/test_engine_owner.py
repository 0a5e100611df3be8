"""Reconcile on a machine shared with other installations: only this worker's engines count.

Real host worker process; the "engines" are marked sleeping processes, which is all that
reconcile looks at (the markers in their environment and their process groups).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.engines import MARKER_ENV, OWNER_ENV
from deployments.host import owner as identity
from deployments.host import supervisor as sv
from deployments.models import Deployment, Status
from monitoring.models import Host
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.worker]
HOST = "ownerhost"
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def fake_engine(tmp_path: Path, deployment_id: str, owner: str | None) -> sv.EngineHandle:
    env = {MARKER_ENV: deployment_id, **({OWNER_ENV: owner} if owner else {})}
    return sv.spawn(SLEEP, env, tmp_path / f"engine-{deployment_id}-{owner}.log")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def stale_row(operator) -> Deployment:
    """A row this installation thinks is running, whose engine died with the old worker."""
    host = Host.objects.create(name=HOST, queue=f"host.{HOST}", backend="simulated")
    return Deployment.objects.create(
        name="stale",
        model_id="/nowhere/tiny",
        engine="transformers",
        host=host,
        status=Status.RUNNING,
        pid=dead_pid(),
        pgid=None,
        process_started_at=1.0,
        created_by=operator,
    )


def test_owner_marker_names_host_and_installation(db) -> None:
    owner = identity.engine_owner(HOST)
    host, _, install = owner.partition("@")
    assert host == HOST and len(install) == 12 and int(install, 16) >= 0
    assert identity.engine_owner(HOST) == owner  # stable: a restarted worker finds its engines


def test_reconcile_leaves_other_installations_engines_alone(
    host_worker, stale_row, tmp_path
) -> None:
    ours = identity.engine_owner(HOST)
    other_install = f"{HOST}@{'0' * 12}" if not ours.endswith("0" * 12) else f"{HOST}@{'f' * 12}"
    # Another installation's engine with the very id of our stale row (ids are small integers).
    same_id = fake_engine(tmp_path, str(stale_row.pk), f"otherbox@{'a' * 12}")
    foreign = fake_engine(tmp_path, "424242", other_install)
    legacy = fake_engine(tmp_path, "434343", None)  # spawned before the owner marker existed
    orphan = fake_engine(tmp_path, "444444", ours)  # ours, but no row claims it
    survivors = (same_id, foreign, legacy)
    try:
        worker = host_worker(HOST, GPU_BACKEND="simulated", SIMULATED_GPUS="1xH100-80GB")
        wait_for(lambda: "reconciled engines" in worker.log())
        wait_for(lambda: not _alive(orphan))
        assert "'orphans_stopped': 1" in worker.log()
        assert all(_alive(h) for h in survivors), worker.log()
        stale_row.refresh_from_db()
        assert stale_row.status == Status.FAILED  # our own row is still reconciled
        assert "not running when the host worker started again" in stale_row.failure_reason
    finally:
        for handle in (*survivors, orphan):
            sv.stop(handle, grace_s=2.0)


def _failed(d: Deployment) -> bool:
    sv.reap_children()  # the test process spawned it: collect the zombie
    d.refresh_from_db()
    return d.status == Status.FAILED


def _alive(handle: sv.EngineHandle) -> bool:
    sv.reap_children()
    return sv.handle_alive(handle)


def test_stop_refuses_a_group_of_another_owner(tmp_path) -> None:
    foreign = fake_engine(tmp_path, "7", f"otherbox@{'b' * 12}")
    try:
        refused = sv.stop(foreign.pgid, 1.0, owner=f"thisbox@{'c' * 12}", deployment_id="7")
        assert not refused.was_running and _alive(foreign)
        assert "7" not in {e.deployment_id for e in sv.find_engines(f"thisbox@{'c' * 12}")}
        assert "7" in {e.deployment_id for e in sv.find_engines()}
    finally:
        assert sv.stop(foreign, grace_s=2.0).was_running


def test_an_engine_without_owner_marker_is_adopted_by_pid_and_start_time(
    host_worker, stale_row, tmp_path
) -> None:
    legacy = fake_engine(tmp_path, str(stale_row.pk), None)  # an older version spawned it
    Deployment.objects.filter(pk=stale_row.pk).update(
        pid=legacy.pid, pgid=legacy.pgid, process_started_at=legacy.create_time
    )
    try:
        worker = host_worker(HOST, GPU_BACKEND="simulated", SIMULATED_GPUS="1xH100-80GB")
        wait_for(lambda: "reconciled engines" in worker.log())
        assert "'adopted': 1" in worker.log() and _alive(legacy)
        stale_row.refresh_from_db()
        assert stale_row.status == Status.RUNNING
        os.kill(legacy.pid, signal.SIGKILL)  # the worker is not its parent: status unknowable
        wait_for(lambda: _failed(stale_row))
        assert "unknown status (adopted after a worker restart)" in stale_row.failure_reason
    finally:
        sv.stop(legacy, grace_s=2.0)
