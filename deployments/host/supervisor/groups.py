"""Process groups: stop an engine's whole group (SIGTERM, then SIGKILL) and list its members."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil

from deployments.engines.base import MARKER_ENV, OWNER_ENV
from deployments.host.supervisor.processes import (
    EngineHandle,
    ExitInfo,
    final_exit,
    reap_children,
    unreaped_child,
)


@dataclass(frozen=True, slots=True)
class StopResult:
    pgid: int
    was_running: bool
    signal_sent: str | None  # the last signal sent to the group
    duration_s: float
    exit: ExitInfo | None
    remaining_pids: tuple[int, ...]  # alive even after SIGKILL (uninterruptible sleep)


def group_pids(pgid: int) -> tuple[int, ...]:
    """Members of a process group that still run (a zombie whose threads are gone does not)."""
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and _still_running(psutil.Process(pid)):
                members.append(pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue  # exited while we looked
    return tuple(members)


def _still_running(proc: psutil.Process) -> bool:
    if proc.status() != psutil.STATUS_ZOMBIE:
        return True
    # The main thread exited first; the other threads (holding memory) are still winding down.
    return bool(proc.num_threads() > 1)


def stop(
    target: EngineHandle | int,
    grace_s: float = 30.0,
    *,
    kill_wait_s: float = 5.0,
    poll_s: float = 0.05,
    owner: str | None = None,
    deployment_id: str | None = None,
) -> StopResult:
    """SIGTERM to the engine's process group, SIGKILL after `grace_s`, wait until it is gone.

    `target` is a handle or a bare pgid (an orphan found by `find_engines`). The group is only
    signalled when one of its members carries the marker (this `deployment_id` and `owner`,
    when given; a handle gives its own), so a reused pgid, or another installation's engine
    behind it, is never hit. An engine without an owner marker (older version) passes.
    """
    start = time.monotonic()
    pgid = target.pgid if isinstance(target, EngineHandle) else target
    if isinstance(target, EngineHandle):
        deployment_id, owner = target.deployment_id, target.owner or owner
    if not _group_is_an_engine(pgid, deployment_id, owner):
        return StopResult(pgid, False, None, time.monotonic() - start, final_exit(target), ())
    sent = "SIGTERM"
    _killpg(pgid, signal.SIGTERM)
    if not _wait_group_gone(pgid, grace_s, poll_s):
        sent = "SIGKILL"
        _killpg(pgid, signal.SIGKILL)
        _wait_group_gone(pgid, kill_wait_s, poll_s)
    remaining = group_pids(pgid)
    return StopResult(pgid, True, sent, time.monotonic() - start, final_exit(target), remaining)


def _group_is_an_engine(pgid: int, deployment_id: str | None, owner: str | None) -> bool:
    """Some member carries the marker (with this deployment's id and owner, when given)."""
    for pid in group_pids(pgid):
        try:
            env = psutil.Process(pid).environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone, or another user's process: not an engine of ours
        marker, marked_owner = env.get(MARKER_ENV), env.get(OWNER_ENV)
        if (
            marker is not None
            and deployment_id in (None, marker)
            and (owner is None or marked_owner in (None, owner))
        ):
            return True
    return False


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return  # the group emptied between the check and the signal: nothing to do


def _wait_group_gone(pgid: int, timeout_s: float, poll_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    delay_s = 0.002  # most engines are gone within milliseconds of SIGKILL: poll fast first
    while True:
        reap_children()
        if not group_pids(pgid) and not unreaped_child(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(delay_s, poll_s))
        delay_s *= 2
