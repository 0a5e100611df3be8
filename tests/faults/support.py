"""What every fault test checks after its fault, and the row it adds to the suite's table.

After each fault: every deployment reaches a state a user can act on (running, stopped or
failed, never left pending, starting or stopping), no lease is held by a finished
deployment, no engine process is orphaned and no audit row is lost. The figures go to
``var/test/faults.json``; the suite's summary (and ``bench/faults.py``) prints them.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease, Status
from tests.support.waiting import wait_for

SETTLED = {Status.RUNNING, Status.STOPPED, Status.FAILED}
# The host worker's sweeper and health probe, fast enough for a test.
FAST_HOST = {
    "SHARDBOARD_SWEEP_AFTER_S": "2",
    "SHARDBOARD_SWEEP_INTERVAL_S": "0.5",
    "SHARDBOARD_STOP_GRACE_S": "5",
}


@dataclass
class FaultRow:
    fault: str
    act_again_s: float
    stuck: int
    leases_leaked: int
    orphaned: int
    audit_lost: int


def results_path() -> Path:
    return Path(settings.VAR_DIR) / "faults.json"


def launch(
    operator: Any, name: str, host: str, engine: str = "transformers", **kwargs: Any
) -> Deployment:
    """The tiny model on `host`: the faults are the subject, so the engine is the one that
    starts fastest on the CPU unless a test asks for another."""
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=host,
        engine=engine,
        plan_request=planning.PlanRequest(),
        **kwargs,
    )
    return deployment_create(user=operator, request=request)


def status_of(d: Deployment) -> str:
    d.refresh_from_db()
    return str(d.status)


def wait_status(d: Deployment, wanted: set[str], timeout_s: float, worker: Any = None) -> float:
    """Seconds until ``d`` is in one of ``wanted``."""
    start = time.monotonic()
    try:
        wait_for(lambda: status_of(d) in wanted, timeout_s=timeout_s, interval_s=0.2)
    except AssertionError:
        if worker is not None:
            print(worker.log()[-6000:])
        raise
    return time.monotonic() - start


def engine_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def check_after(fault: str, act_again_s: float, pids: list[int], audit_actions: list[str]) -> None:
    """Assert nothing is stuck, leaked, orphaned or lost; record the row of the table."""
    stuck = Deployment.objects.exclude(status__in=list(SETTLED)).count()
    leaked = GpuLease.objects.filter(
        active=True, deployment__status__in=[Status.STOPPED, Status.FAILED]
    ).count()
    running_pids = set(
        Deployment.objects.filter(status=Status.RUNNING).values_list("pid", flat=True)
    )
    orphaned = sum(1 for pid in pids if pid not in running_pids and engine_alive(pid))
    found = list(AuditEvent.objects.values_list("action", flat=True))
    lost = sum(1 for action in audit_actions if action not in found)
    row = FaultRow(fault, round(act_again_s, 1), stuck, leaked, orphaned, lost)
    path = results_path()
    rows = json.loads(path.read_text()) if path.exists() else []
    rows = [r for r in rows if r["fault"] != fault] + [asdict(row)]
    path.write_text(json.dumps(rows, indent=1))
    assert (stuck, leaked, orphaned, lost) == (0, 0, 0, 0), row
