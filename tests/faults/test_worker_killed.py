"""The host worker SIGKILLed in `starting`, `running` and `stopping`, and a launch held by a
consumer that died (acks_late): on restart every deployment gets to a state a user can act
on, with nothing leaked or orphaned."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from controlpanel.celery import host_queue
from deployments.host.watchdog import WATCH_INTERVAL_S
from deployments.lifecycle.services import DeploymentError, deployment_stop
from deployments.models import LaunchPhase
from tests.faults.support import FAST_HOST, check_after, launch, status_of, wait_status
from tests.support.processes import ROOT
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "killhost"


def start(host_worker, model_root, broker, **env: str):
    return start_sim_worker(
        host_worker, HOST, model_root, REDIS_URL=broker.url, **{**FAST_HOST, **env}
    )


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_worker_killed_while_starting(host_worker, model_root, operator, broker) -> None:
    worker = start(host_worker, model_root, broker)
    d = launch(operator, "killed-starting", HOST)
    wait_status(d, {"starting"}, 120, worker)
    worker.stop(signal.SIGKILL)
    assert status_of(d) == "starting"  # killed before it was promoted
    start_s = time.monotonic()
    again = start(host_worker, model_root, broker)
    wait_status(d, {"running", "failed"}, 150, again)  # stayed `starting` before the fix
    assert d.status == "running", d.failure_reason
    act_again_s = time.monotonic() - start_s
    assert d.events.filter(new_status="running").exists()
    # the new worker took the start's steps over: they end with ready, none left open
    steps = LaunchPhase.objects.filter(deployment=d, attempt=d.restart_count)
    assert steps.filter(phase="ready").exists(), list(steps.values_list("phase", flat=True))
    assert not steps.filter(ended_at=None).exists()
    deployment_stop(user=operator, deployment=d)
    wait_status(d, {"stopped"}, 60, again)
    check_after("host worker SIGKILLed in starting", act_again_s, [d.pid], ["deployment.stop"])


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_worker_killed_while_running(host_worker, model_root, operator, broker) -> None:
    worker = start(host_worker, model_root, broker)
    d = launch(operator, "killed-running", HOST)
    wait_status(d, {"running"}, 150, worker)
    pid = d.pid
    worker.stop(signal.SIGKILL)
    start_s = time.monotonic()
    again = start(host_worker, model_root, broker)
    wait_for(lambda: "reconciled engines" in again.log())
    # A window for the sweep and a few watchdog passes: one that restarted it would show.
    time.sleep(3 * WATCH_INTERVAL_S)
    assert status_of(d) == "running" and d.pid == pid  # adopted, not restarted
    deployment_stop(user=operator, deployment=d)
    wait_status(d, {"stopped"}, 60, again)
    act_again_s = time.monotonic() - start_s
    check_after("host worker SIGKILLed in running", act_again_s, [pid], ["deployment.stop"])


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_worker_killed_while_stopping(host_worker, model_root, operator, broker) -> None:
    worker = start(host_worker, model_root, broker)
    d = launch(operator, "killed-stopping", HOST)
    wait_status(d, {"running"}, 150, worker)
    worker.stop(signal.SIGKILL)
    start_s = time.monotonic()
    deployment_stop(user=operator, deployment=d)
    assert status_of(d) == "stopping"
    try:  # Stop again on a deployment stuck in `stopping`: refused before the fix
        deployment_stop(user=operator, deployment=d)
    except DeploymentError as exc:
        pytest.fail(f"Stop again was refused: {exc}")
    again = start(host_worker, model_root, broker)
    wait_status(d, {"stopped"}, 60, again)
    act_again_s = time.monotonic() - start_s
    check_after("host worker SIGKILLed in stopping", act_again_s, [d.pid], ["deployment.stop"])


# A consumer that takes the launch message unacknowledged (as an acks_late worker does) and
# dies: Redis gives the message back only after the 4 h visibility timeout.
DYING_CONSUMER = """
import os, sys
from kombu import Connection
with Connection(sys.argv[1]) as conn:
    queue = conn.SimpleQueue(sys.argv[2])
    message = queue.get(timeout=20)
    print("held", message.delivery_tag, flush=True)
    os._exit(0)
"""


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_launch_held_by_a_dead_consumer(host_worker, model_root, operator, broker) -> None:
    worker = start(host_worker, model_root, broker)
    worker.stop(signal.SIGKILL)  # the host stays online until its heartbeat is stale
    d = launch(operator, "held-launch", HOST)
    held = subprocess.run(
        [sys.executable, "-c", DYING_CONSUMER, broker.url, host_queue(HOST)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "held" in held.stdout, held.stderr
    start_s = time.monotonic()
    again = start(host_worker, model_root, broker)
    wait_status(d, {"running", "failed"}, 150, again)  # pending for 4 h before the fix
    assert d.status == "running", d.failure_reason
    act_again_s = time.monotonic() - start_s
    deployment_stop(user=operator, deployment=d)
    wait_status(d, {"stopped"}, 60, again)
    check_after("launch held by a dead worker (acks_late)", act_again_s, [d.pid], [])
