"""The fault suite's own cleanup: an engine a failed test leaves behind is killed, with its
whole process group, even when the database no longer has its row."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from deployments.models import Deployment
from tests.faults.support import engine_alive, reap_engines
from tests.support.waiting import wait_for

# An "engine" with a child of its own, in a group of its own, as the host worker starts one.
ENGINE = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def test_a_left_engine_and_its_group_are_killed() -> None:
    engine = subprocess.Popen([sys.executable, "-c", ENGINE], start_new_session=True)
    try:
        wait_for(lambda: len(_group(engine.pid)) == 2, timeout_s=10, interval_s=0.05)
        left = Deployment(name="left", pid=engine.pid, pgid=engine.pid)  # no row: not saved
        assert reap_engines([left]) == [engine.pid]
        engine.wait(10)
        wait_for(lambda: not _group(engine.pid), timeout_s=10, interval_s=0.05)
        assert not engine_alive(engine.pid)
    finally:
        if engine.poll() is None:
            engine.kill()


def _group(pgid: int) -> list[int]:
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                alive.append(p.pid)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    return alive
