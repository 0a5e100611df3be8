"""Finding engines again after a worker restart: by the deployment marker in their env."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from deployments.engines.base import MARKER_ENV
from deployments.supervisor.processes import EngineHandle


@dataclass(frozen=True, slots=True)
class FoundEngine:
    deployment_id: str
    pgid: int
    pids: tuple[int, ...]
    leader_alive: bool  # False: the API server died and left children behind
    create_time: float  # of the leader, or of the oldest member when the leader is gone
    cmdline: tuple[str, ...]


def adopt(pid: int, deployment_id: str, log_path: Path) -> EngineHandle | None:
    """A handle for an engine started by an earlier worker, if it is alive and really ours."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if proc.environ().get(MARKER_ENV) != deployment_id:
            return None
        return EngineHandle(
            deployment_id=deployment_id,
            pid=pid,
            pgid=os.getpgid(pid),
            started_at=datetime.fromtimestamp(proc.create_time(), UTC),
            create_time=proc.create_time(),
            log_path=log_path,
        )
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None


def find_engines() -> list[FoundEngine]:
    """Live processes carrying the deployment marker, one entry per process group."""
    groups: dict[tuple[str, int], list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        found = _marked(proc)
        if found is not None:
            groups.setdefault(found, []).append(proc)
    return [_found_engine(dep, pgid, procs) for (dep, pgid), procs in sorted(groups.items())]


def _marked(proc: psutil.Process) -> tuple[str, int] | None:
    if proc.pid == os.getpid():
        return None
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        deployment_id = proc.environ().get(MARKER_ENV)
        return None if deployment_id is None else (deployment_id, os.getpgid(proc.pid))
    except (psutil.AccessDenied, psutil.NoSuchProcess, ProcessLookupError):
        return None  # another user's process, or gone: not an engine of ours


def _found_engine(deployment_id: str, pgid: int, procs: list[psutil.Process]) -> FoundEngine:
    by_pid = {p.pid: p for p in procs}
    leader = by_pid.get(pgid) or min(procs, key=lambda p: p.create_time())
    try:
        cmdline = tuple(leader.cmdline())
        create_time = leader.create_time()
    except psutil.NoSuchProcess:
        cmdline, create_time = (), 0.0
    return FoundEngine(
        deployment_id, pgid, tuple(sorted(by_pid)), pgid in by_pid, create_time, cmdline
    )
