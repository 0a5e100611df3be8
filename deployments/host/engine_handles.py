"""The engine process a start waits on: one this worker spawned, or one it adopted after a
restart (deployments.host.engine_control)."""

from __future__ import annotations

from pathlib import Path

from deployments.host import supervisor as sv
from deployments.host.owner import engine_owner
from deployments.models import Deployment


class Spawned:
    """The engine this task spawned: its exit status is ours to read."""

    def __init__(self, handle: sv.EngineHandle) -> None:
        self.handle = handle
        self.pid = handle.pid
        self.log_path: Path | None = handle.log_path

    def alive(self) -> bool:
        return sv.handle_alive(self.handle)

    def end(self) -> tuple[int | None, int | None]:
        sv.stop(self.handle, 5)
        info = sv.poll_exit(self.handle)
        return (info.exit_code, info.signal) if info else (None, None)


class Adopted:
    """An engine found again after a worker restart: only its pid and start time are known."""

    def __init__(self, d: Deployment) -> None:
        self.d = d
        self.pid = d.pid
        self.log_path = Path(d.log_path) if d.log_path else None

    def alive(self) -> bool:
        pid = self.d.pid
        return pid is not None and sv.is_alive(pid, self.d.process_started_at)

    def end(self) -> tuple[int | None, int | None]:
        if self.d.pgid:
            sv.stop(self.d.pgid, 5, owner=engine_owner(), deployment_id=str(self.d.pk))
        return None, None


EngineProcess = Spawned | Adopted
