"""Finding engines again after a worker restart: by the deployment and owner markers in their env.

An engine's owner (OWNER_ENV, `<host>@<installation>`) says which worker may adopt or stop it.
Engines started before the owner marker existed have none (`owner` None): the worker adopts
such an engine only when its row names the same pid and start time, and never stops one as
an orphan (it may belong to another installation on this machine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from deployments.engines.base import MARKER_ENV, OWNER_ENV
from deployments.host.supervisor.processes import EngineHandle


@dataclass(frozen=True, slots=True)
class FoundEngine:
    deployment_id: str
    pgid: int
    pids: tuple[int, ...]
    leader_alive: bool  # False: the API server died and left children behind
    create_time: float  # of the leader, or of the oldest member when the leader is gone
    cmdline: tuple[str, ...]
    owner: str | None = None  # the leader's OWNER_ENV; None: no owner marker (older version)


def adopt(
    pid: int, deployment_id: str, log_path: Path, owner: str | None = None
) -> EngineHandle | None:
    """A handle for an engine started by an earlier worker, if it is alive and really ours.

    With `owner`, the engine must carry that owner marker, or none at all (an older version's
    engine; the caller has matched its pid and start time against the row).
    """
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        env = proc.environ()
        if env.get(MARKER_ENV) != deployment_id:
            return None
        if owner is not None and env.get(OWNER_ENV, owner) != owner:
            return None
        return EngineHandle(
            deployment_id=deployment_id,
            pid=pid,
            pgid=os.getpgid(pid),
            started_at=datetime.fromtimestamp(proc.create_time(), UTC),
            create_time=proc.create_time(),
            log_path=log_path,
            owner=env.get(OWNER_ENV),
        )
    except (psutil.AccessDenied, psutil.NoSuchProcess, ProcessLookupError):
        return None


def find_engines(owner: str | None = None) -> list[FoundEngine]:
    """Live processes carrying the deployment marker, one entry per process group.

    With `owner`: only groups marked with that owner, and unowned ones (older engines); an
    engine of another owner (another host name or installation) is never listed.
    """
    groups: dict[tuple[str, int], list[psutil.Process]] = {}
    owners: dict[tuple[str, int], str | None] = {}
    for proc in psutil.process_iter():
        found = _marked(proc)
        if found is not None:
            key = (found[0], found[1])
            groups.setdefault(key, []).append(proc)
            owners[key] = owners.get(key) or found[2]
    return [
        _found_engine(dep, pgid, procs, owners[(dep, pgid)])
        for (dep, pgid), procs in sorted(groups.items())
        if owner is None or owners[(dep, pgid)] in (None, owner)
    ]


def _marked(proc: psutil.Process) -> tuple[str, int, str | None] | None:
    if proc.pid == os.getpid():
        return None
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        env = proc.environ()
        deployment_id = env.get(MARKER_ENV)
        if deployment_id is None:
            return None
        return deployment_id, os.getpgid(proc.pid), env.get(OWNER_ENV)
    except (psutil.AccessDenied, psutil.NoSuchProcess, ProcessLookupError):
        return None  # another user's process, or gone: not an engine of ours


def _found_engine(
    deployment_id: str, pgid: int, procs: list[psutil.Process], owner: str | None
) -> FoundEngine:
    by_pid = {p.pid: p for p in procs}
    leader = by_pid.get(pgid) or min(procs, key=lambda p: p.create_time())
    try:
        cmdline = tuple(leader.cmdline())
        create_time = leader.create_time()
    except psutil.NoSuchProcess:
        cmdline, create_time = (), 0.0
    return FoundEngine(
        deployment_id, pgid, tuple(sorted(by_pid)), pgid in by_pid, create_time, cmdline, owner
    )
