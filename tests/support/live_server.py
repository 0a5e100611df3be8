"""A real ASGI server (uvicorn, as `make run` starts it) on the test database."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from asgiref.sync import SyncToAsync
from django.db import connections

from tests.support.waiting import STATE_WAIT_S


@dataclass
class LiveServer:
    url: str
    ws_url: str
    restart: Callable[[], None]


def _make_application() -> Any:
    from channels.routing import get_default_application
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    return ASGIStaticFilesHandler(get_default_application())


_FORK = multiprocessing.get_context("fork")


class ServerProcess(_FORK.Process):
    """controlpanel.webserver's uvicorn in a forked child, on 127.0.0.1:`port` (0: any)."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(daemon=True)
        self.requested_port = port
        self.port = _FORK.Value("i", 0)
        self.ready = _FORK.Event()

    def run(self) -> None:
        from controlpanel import webserver

        sock = webserver.listening_socket("127.0.0.1", self.requested_port)
        self.port.value = sock.getsockname()[1]
        ready = self.ready

        class Server(webserver.Server):
            async def startup(self, sockets: Any = None) -> None:
                await super().startup(sockets)
                ready.set()

        config = webserver.config(
            _make_application(), log_level="warning", timeout_graceful_shutdown=1
        )
        Server(config).run(sockets=[sock])


def close_sync_thread_connections() -> None:
    """Close the database connections that asgiref's single sync thread opened.

    Async tests run their database_sync_to_async calls on that thread; its connections are
    its own (thread-local), so closing this thread's would leave them open, and the test
    database could not be dropped at the session's end ("being accessed by other users")."""
    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=30)


def start_server(port: int = 0) -> ServerProcess:
    # The server is forked after pytest-django switched settings to the test database, so
    # it needs no database set-up of its own.
    connections.close_all()
    # Async tests leave asgiref's single sync thread running here; a forked child would inherit
    # the executor without its thread and every database_sync_to_async call would hang. The old
    # thread is closed, connections first, rather than left holding them.
    close_sync_thread_connections()
    SyncToAsync.single_thread_executor.shutdown(wait=True)
    SyncToAsync.single_thread_executor = ThreadPoolExecutor(max_workers=1)
    proc = ServerProcess(port)
    proc.start()
    if not proc.ready.wait(timeout=STATE_WAIT_S):
        proc.kill()
        raise RuntimeError("the web server did not start")
    return proc


def stop_server(proc: ServerProcess) -> None:
    proc.terminate()
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
