"""Engine processes this worker spawned: start, liveness, exit status, reaping, log tail."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from deployments.engines.base import MARKER_ENV, OWNER_ENV

_TAIL_MAX_BYTES = 256 * 1024
_SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_PANEL_ONLY_ENV = frozenset(
    {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
)  # credentials inside URLs; an engine needing one gets it through the adapter's env
# A worker's own setting would override what the plan gives the engine: vLLM's CPU platform
# turns VLLM_CPU_KVCACHE_SPACE (whole GiB) into the KV space, over --kv-cache-memory-bytes.
_PLAN_OVERRIDING_ENV = frozenset({"VLLM_CPU_KVCACHE_SPACE"})
SAME_START_S = 0.05  # create_time stored and read back (e.g. from a DB) may lose digits
CHILD_EXIT_WAIT_S = 1.0  # child_exit on a child judged dead: how long to wait for its status
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
    owner: str | None = None  # its OWNER_ENV marker; None: started by an older version


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
    `deployments.host.diagnosis.diagnose_spawn_error` turns it into a Diagnosis.
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
        owner=env.get(OWNER_ENV),
    )


def inherited_env(base: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment minus its secrets (engines may run a model's remote code) and
    what would override the plan's settings."""
    return {
        k: v
        for k, v in base.items()
        if not _SECRET_ENV_NAME.search(k)
        and k not in _PANEL_ONLY_ENV
        and k not in _PLAN_OVERRIDING_ENV
        and k not in (MARKER_ENV, OWNER_ENV)
    }


def is_alive(pid: int, create_time: float | None = None) -> bool:
    """True while the process runs; a zombie or a reused pid counts as dead."""
    try:
        proc = psutil.Process(pid)
        if create_time is not None and abs(proc.create_time() - create_time) > SAME_START_S:
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


def child_exit(pid: int) -> ExitInfo | None:
    """The real exit of an engine this process spawned and that has ended; None otherwise.

    None for an engine still running (after waiting up to CHILD_EXIT_WAIT_S: call it for an
    engine judged dead) and for one adopted from an earlier worker (not our child: its exit
    status went to init and is unknowable here).
    """
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(pid)
    if popen is None:
        return None
    code = popen.poll()
    if code is None:
        # poll() also answers None while another thread (a Watcher, reap_children) holds the
        # Popen's waitpid lock; wait() takes the lock, and returns at once for a dead child.
        try:
            code = popen.wait(timeout=CHILD_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return None
    return _exit_from_returncode(pid, code)


def forget_child(pid: int) -> None:
    with _CHILDREN_LOCK:
        _CHILDREN.pop(pid, None)


def _exit_from_returncode(pid: int, code: int) -> ExitInfo:
    if code < 0:
        return ExitInfo(pid, None, -code, now_utc())
    return ExitInfo(pid, code, None, now_utc())


def unreaped_child(pid: int) -> bool:
    with _CHILDREN_LOCK:
        popen = _CHILDREN.get(pid)
    return popen is not None and popen.poll() is None


def reap_children() -> None:
    """Collect exit statuses of engines this process spawned, so none lingers as a zombie."""
    with _CHILDREN_LOCK:
        popens = list(_CHILDREN.values())
    for popen in popens:
        popen.poll()


def final_exit(target: EngineHandle | int) -> ExitInfo | None:
    """The leader's exit once it is gone (forgetting our child then); None while it runs."""
    if not isinstance(target, EngineHandle):
        return None
    exit_info = poll_exit(target)
    if exit_info is not None:
        with _CHILDREN_LOCK:
            _CHILDREN.pop(target.pid, None)
    return exit_info


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
