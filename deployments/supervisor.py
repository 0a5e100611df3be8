"""Engine processes on one host: spawn, probe, watch, stop, find again after a worker restart.

No Django here: the host worker's Celery tasks call these functions and persist the results.
Launch: adapter.build(spec) → spawn(cmd.argv, cmd.env, log) → wait_ready(...) → smoke_test(...).
Watchdog: poll_exit(handle) every second (or watch()); on an exit, stop(handle) sweeps the
group and diagnosis.diagnose_exit(tail(log), ...) says why. Reconcile: find_engines(), adopt().
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from deployments.engines.base import MARKER_ENV
from deployments.engines.probes import (
    ReadyResult,
    SmokeResult,
    completion_text,
    smoke_test,
    sse_events,
    wait_ready,
)

__all__ = [
    "EngineHandle",
    "ExitInfo",
    "FoundEngine",
    "ReadyResult",
    "SmokeResult",
    "StopResult",
    "Watcher",
    "adopt",
    "completion_text",
    "find_engines",
    "find_free_port",
    "group_pids",
    "handle_alive",
    "inherited_env",
    "is_alive",
    "poll_exit",
    "reap_children",
    "smoke_test",
    "spawn",
    "sse_events",
    "stop",
    "tail",
    "wait_ready",
    "watch",
]

_TAIL_MAX_BYTES = 256 * 1024
_SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_PANEL_ONLY_ENV = frozenset(
    {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
)  # credentials inside URLs; an engine needing one gets it through the adapter's env
_SAME_START_S = 0.05  # create_time stored and read back (e.g. from a DB) may lose digits
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # engines this process spawned, for reaping
_CHILDREN_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class EngineHandle:
    deployment_id: str
    pid: int
    pgid: int
    started_at: datetime
    create_time: float  # psutil's; tells a live engine from a reused pid
    log_path: Path


@dataclass(frozen=True, slots=True)
class ExitInfo:
    pid: int
    exit_code: int | None  # None: not our child (adopted), the code is unknowable
    signal: int | None
    detected_at: datetime

    @property
    def description(self) -> str:
        if self.signal is not None:
            return f"killed by {signal.Signals(self.signal).name}"
        if self.exit_code is not None:
            return f"exited with code {self.exit_code}"
        return "exited (code unknown: the engine was adopted)"


@dataclass(frozen=True, slots=True)
class StopResult:
    pgid: int
    was_running: bool
    signal_sent: str | None  # the last signal sent to the group
    duration_s: float
    exit: ExitInfo | None
    remaining_pids: tuple[int, ...]  # alive even after SIGKILL (uninterruptible sleep)


@dataclass(frozen=True, slots=True)
class FoundEngine:
    deployment_id: str
    pgid: int
    pids: tuple[int, ...]
    leader_alive: bool  # False: the API server died and left children behind
    create_time: float  # of the leader, or of the oldest member when the leader is gone
    cmdline: tuple[str, ...]


def now_utc() -> datetime:
    return datetime.now(UTC)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port free right now; an engine that loses the race fails fast with 'address in use'."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path | None = None,
    *,
    inherit_env: bool = True,
) -> EngineHandle:
    """Start an engine in its own session (= process group), stdout+stderr to `log_path`.

    Raises OSError (FileNotFoundError for a missing executable) after writing it to the log;
    `deployments.diagnosis.diagnose_spawn_error` turns it into a Diagnosis.
    """
    deployment_id = env.get(MARKER_ENV)
    if not deployment_id:
        raise ValueError(f"env must carry {MARKER_ENV}: it is how engines are found again")
    full_env = {**inherited_env(os.environ), **env} if inherit_env else dict(env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        try:
            popen = subprocess.Popen(  # noqa: S603 - argv list from an engine adapter
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            log.write(f"shardboard: could not start {argv[0]!r}: {error}\n".encode())
            raise
    with _CHILDREN_LOCK:
        _CHILDREN[popen.pid] = popen
    return EngineHandle(
        deployment_id=deployment_id,
        pid=popen.pid,
        pgid=popen.pid,  # start_new_session: the child leads its own group
        started_at=now_utc(),
        create_time=psutil.Process(popen.pid).create_time(),
        log_path=log_path,
    )


def inherited_env(base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment minus its secrets: engines may run a model's remote code."""
    return {
        k: v
        for k, v in base.items()
        if not _SECRET_ENV_NAME.search(k) and k not in _PANEL_ONLY_ENV and k != MARKER_ENV
    }


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


def is_alive(pid: int, create_time: float | None = None) -> bool:
    """True while the process runs; a zombie or a reused pid counts as dead."""
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > _SAME_START_S:
            return False
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # exists, owned by someone else


def handle_alive(handle: EngineHandle) -> bool:
    return poll_exit(handle) is None


def poll_exit(handle: EngineHandle) -> ExitInfo | None:
    """None while the engine's leader runs; its exit (reaped, if it is our child) otherwise."""
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(handle.pid)
    if popen is not None:
        code = popen.poll()
        return None if code is None else _exit_from_returncode(handle.pid, code)
    if is_alive(handle.pid, handle.create_time):
        return None
    return ExitInfo(handle.pid, None, None, now_utc())


def _exit_from_returncode(pid: int, code: int) -> ExitInfo:
    if code < 0:
        return ExitInfo(pid, None, -code, now_utc())
    return ExitInfo(pid, code, None, now_utc())


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
) -> StopResult:
    """SIGTERM to the engine's process group, SIGKILL after `grace_s`, wait until it is gone.

    `target` is a handle or a bare pgid (an orphan found by `find_engines`). The group is only
    signalled when one of its members carries the marker, so a reused pgid is never hit.
    """
    start = time.monotonic()
    pgid = target.pgid if isinstance(target, EngineHandle) else target
    deployment_id = target.deployment_id if isinstance(target, EngineHandle) else None
    if not _group_is_an_engine(pgid, deployment_id):
        return StopResult(pgid, False, None, time.monotonic() - start, _final_exit(target), ())
    sent = "SIGTERM"
    _killpg(pgid, signal.SIGTERM)
    if not _wait_group_gone(pgid, grace_s, poll_s):
        sent = "SIGKILL"
        _killpg(pgid, signal.SIGKILL)
        _wait_group_gone(pgid, kill_wait_s, poll_s)
    remaining = group_pids(pgid)
    return StopResult(pgid, True, sent, time.monotonic() - start, _final_exit(target), remaining)


def _group_is_an_engine(pgid: int, deployment_id: str | None) -> bool:
    """Some member carries the marker (with this deployment's id, when one is given)."""
    for pid in group_pids(pgid):
        try:
            marker = psutil.Process(pid).environ().get(MARKER_ENV)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # gone, or another user's process: not an engine of ours
        if marker is not None and deployment_id in (None, marker):
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
        if not group_pids(pgid) and not _unreaped_child(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(delay_s, poll_s))
        delay_s *= 2


def _unreaped_child(pid: int) -> bool:
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(pid)
    return popen is not None and popen.poll() is None


def reap_children() -> None:
    """Collect exit statuses of engines this process spawned, so none lingers as a zombie."""
    with _CHILDREN_LOCK:
        popens = list(_CHILDREN.values())
    for popen in popens:
        popen.poll()


def _final_exit(target: EngineHandle | int) -> ExitInfo | None:
    """The leader's exit once it is gone (forgetting our child then); None while it runs."""
    if not isinstance(target, EngineHandle):
        return None
    exit_info = poll_exit(target)
    if exit_info is not None:
        with _CHILDREN_LOCK:
            _CHILDREN.pop(target.pid, None)
    return exit_info


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


def tail(log_path: Path, n_lines: int = 200) -> str:
    """The last `n_lines` of a log; '' when the engine has not written it yet."""
    try:
        with log_path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - _TAIL_MAX_BYTES))
            data = log.read()
    except FileNotFoundError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n_lines:])


class Watcher:
    """Calls `on_exit` once, from a daemon thread, when the engine's leader exits."""

    def __init__(
        self, handle: EngineHandle, on_exit: Callable[[ExitInfo], None], poll_s: float
    ) -> None:
        self._handle, self._on_exit, self._poll_s = handle, on_exit, poll_s
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{handle.pid}", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        self._cancelled.set()

    def join(self, timeout_s: float | None = None) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._cancelled.wait(self._poll_s):
            exit_info = poll_exit(self._handle)
            if exit_info is not None:
                self._on_exit(exit_info)
                return


def watch(
    handle: EngineHandle, on_exit: Callable[[ExitInfo], None], poll_s: float = 0.5
) -> Watcher:
    return Watcher(handle, on_exit, poll_s)
