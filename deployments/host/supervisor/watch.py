"""A daemon thread that reports an engine's exit once."""

from __future__ import annotations

import threading
from collections.abc import Callable

from deployments.host.supervisor.processes import EngineHandle, ExitInfo, poll_exit


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
