"""The suite's cleanup (tests/support/reaper.py): an engine a test's worker left behind is
killed with its whole process group; an engine a fixture still owns is not."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from tests.support import reaper
from tests.support.waiting import wait_for

# An "engine" with a child of its own, in a group of its own, as the host worker starts one.
ENGINE = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def _engine_env(request: pytest.FixtureRequest) -> dict[str, str]:
    test = f"{request.node.nodeid} (call)"
    return {**os.environ, "SHARDBOARD_DEPLOYMENT_ID": "1", "PYTEST_CURRENT_TEST": test}


def test_an_orphaned_engine_and_its_group_are_killed(request: pytest.FixtureRequest) -> None:
    # started by a process that then exits, as a stopped host worker leaves its engines
    spawner = (
        "import subprocess, sys; print(subprocess.Popen(sys.argv[1:], start_new_session=True,"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )
    out = subprocess.run(
        [sys.executable, "-c", spawner, sys.executable, "-c", ENGINE],
        env=_engine_env(request),
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout)
    try:
        wait_for(lambda: len(_group(pid)) == 2, interval_s=0.05)
        assert reaper.reap("tests/elsewhere.py::test_other") == []
        assert reaper.reap(request.node.nodeid) == [pid]
        wait_for(lambda: not _group(pid), interval_s=0.05)
    finally:
        for p in _group(pid):
            os.kill(p, 9)


def test_an_engine_with_a_living_parent_is_left(request: pytest.FixtureRequest) -> None:
    # a module-scoped fixture's engine, shared by the tests after the one that started it
    engine = subprocess.Popen(
        [sys.executable, "-c", ENGINE], env=_engine_env(request), start_new_session=True
    )
    try:
        wait_for(lambda: len(_group(engine.pid)) == 2, interval_s=0.05)
        assert reaper.reap(request.node.nodeid) == []
        assert engine.poll() is None
    finally:
        os.killpg(engine.pid, 9)
        engine.wait(10)


def _group(pgid: int) -> list[int]:
    alive = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                alive.append(p.pid)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return alive
