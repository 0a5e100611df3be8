"""Engines a test's host workers started and left running.

A host worker that stops leaves its engines serving by design (the next start adopts them), so
a test that kills or stops its worker without stopping the deployment leaves an engine behind,
holding a port and a CPU for the rest of the run. Every engine carries the environment of the
worker that spawned it, PYTEST_CURRENT_TEST included: that names the test it belongs to.
"""

from __future__ import annotations

import os
import signal

import psutil


def engines_of(nodeid: str) -> list[psutil.Process]:
    """Orphaned engine processes (SHARDBOARD_DEPLOYMENT_ID set) spawned during the test
    ``nodeid``. Only orphans: an engine whose parent lives (this process, or a worker of a
    module-scoped fixture) is still owned by a fixture that later tests share."""
    found = []
    for proc in psutil.process_iter(["pid", "ppid"]):
        try:
            if proc.info["ppid"] not in (0, 1):
                continue
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        test = env.get("PYTEST_CURRENT_TEST", "")
        if "SHARDBOARD_DEPLOYMENT_ID" in env and test.startswith(f"{nodeid} "):
            found.append(proc)
    return found


def reap(nodeid: str) -> list[int]:
    """Kill the process groups of the engines ``nodeid`` left; the pids killed."""
    reaped = []
    for proc in engines_of(nodeid):
        try:
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        except ProcessLookupError:
            continue
        reaped.append(proc.pid)
    return reaped
