"""The web server: uvicorn, with the options Shardboard is measured and tested with.

    python -m controlpanel.webserver   # SHARDBOARD_BIND, SHARDBOARD_PORT, SHARDBOARD_WEB_WORKERS,
                                       # SHARDBOARD_TRUSTED_PROXIES,
                                       # LOG_LEVEL (INFO: one access line per request)

uvicorn rather than daphne: a sooner first byte and less CPU per relayed chunk and per
websocket message (figures: docs/performance.md), and it is what vLLM serves with. daphne
stays installed for `manage.py runserver` only.

Several processes (SHARDBOARD_WEB_WORKERS, see default_workers): each listens on its own
SO_REUSEPORT socket, so the kernel spreads new connections evenly over them; on one shared
listening socket (uvicorn's own workers) whichever process wakes first accepts every waiting
connection.

The tests' live server (tests/conftest.py) runs `config()` and `listening_socket()` too, so
what is tested is what runs.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

import uvicorn

from controlpanel import env

logger = logging.getLogger("shardboard.webserver")
BACKLOG = 2048
# A process that ends sooner than this after its start failed to start (settings, database):
# starting it again would fail again, so the server stops instead.
START_GRACE_S = 10.0

APP = "controlpanel.asgi:application"


class Server(uvicorn.Server):
    """uvicorn's server; once started, what the start made (Django, the app) is moved out of
    the garbage collector's sight (gc.freeze): it is never garbage, and a full collection over
    it would pause the event loop."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        gc.collect()
        gc.freeze()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        from playground.gateway import engine_client  # the gateway's, once its requests ended

        await engine_client.close_session()


OPTIONS: dict[str, Any] = {
    "http": "httptools",
    "ws": "websockets-sansio",
    # libuv's loop in C: less CPU and a sooner first token than asyncio's when streams burst.
    "loop": "uvloop",
    "lifespan": "off",  # Django's ASGI handler has no lifespan events
    "ws_ping_interval": 20.0,
    "ws_ping_timeout": 20.0,
    "timeout_graceful_shutdown": 10,  # then open streams and websockets are cut
    "server_header": False,
}


def proxy_options() -> dict[str, Any]:
    """X-Forwarded-For / -Proto are believed only from SHARDBOARD_TRUSTED_PROXIES (addresses or
    networks, comma-separated; default none). uvicorn's own default trusts 127.0.0.1, which on a
    GPU host lets anyone with a shell there forge the "from where" of the audit trail."""
    trusted = env.env_list("SHARDBOARD_TRUSTED_PROXIES", "")
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": ",".join(trusted) or None}


def config(app: Any, **overrides: Any) -> uvicorn.Config:
    return uvicorn.Config(app, **{**OPTIONS, **proxy_options(), **overrides})


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound, listening TCP socket. Made with IPPROTO_TCP: asyncio sets TCP_NODELAY on every
    connection it accepts only from such a socket (uvloop always does); without it each small
    streamed chunk could wait for the client's delayed ACK."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


def serve(sock: socket.socket, host: str, port: int, log_level: str) -> None:
    """uvicorn on `sock` until SIGTERM or SIGINT. Ctrl-C in a terminal reaches every process
    of the group, and uvicorn raises it again once it has shut down: that is a normal stop,
    not a traceback."""
    try:
        Server(config(APP, host=host, port=port, log_level=log_level)).run(sockets=[sock])
    except KeyboardInterrupt:
        pass


def serve_one(host: str, port: int, log_level: str) -> None:
    """One web process of several: its own socket in the port's SO_REUSEPORT group."""
    try:
        sock = listening_socket(host, port, reuse_port=True)
    except OSError as exc:
        sys.stderr.write(f"shardboard: cannot listen on {host}:{port}: {exc.strerror or exc}\n")
        raise SystemExit(uvicorn.config.STARTUP_FAILURE) from None
    serve(sock, host, port, log_level)


class Supervisor:
    """`workers` web processes on one port; one that dies is replaced, unless it died while
    starting (then all stop: the next one would fail the same way). SIGTERM or SIGINT stops
    them all, each finishing its requests for up to timeout_graceful_shutdown."""

    def __init__(self, workers: int, host: str, port: int, log_level: str) -> None:
        self.workers, self.host, self.port, self.log_level = workers, host, port, log_level
        self._context = multiprocessing.get_context("spawn")
        self._stop = threading.Event()

    def run(self) -> int:
        # Bound without SO_REUSEPORT: fails if anything holds the port, so a stale server
        # cannot silently share it (its own SO_REUSEPORT socket would accept ours).
        listening_socket(self.host, self.port).close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        children = [self._start() for _ in range(self.workers)]
        failed = False
        while not self._stop.is_set():
            multiprocessing.connection.wait([c.sentinel for c, _ in children], timeout=0.5)
            for index, (child, started_s) in enumerate(children):
                if child.exitcode is None or self._stop.is_set():
                    continue
                if time.monotonic() - started_s < START_GRACE_S:
                    logger.error(
                        "web process %s failed to start (exit code %s); stopping",
                        child.pid,
                        child.exitcode,
                    )
                    failed = True
                    self._stop.set()
                    break
                logger.warning(
                    "web process %s ended (exit code %s); starting another",
                    child.pid,
                    child.exitcode,
                )
                children[index] = self._start()
        self._stop_all([child for child, _ in children])
        return 1 if failed else 0

    def _start(self) -> tuple[multiprocessing.process.BaseProcess, float]:
        child = self._context.Process(
            target=serve_one, args=(self.host, self.port, self.log_level), name="shardboard-web"
        )
        child.start()
        return child, time.monotonic()

    @staticmethod
    def _stop_all(children: list[multiprocessing.process.BaseProcess]) -> None:
        for child in children:
            if child.exitcode is None and child.pid is not None:
                os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + OPTIONS["timeout_graceful_shutdown"] + 5
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.exitcode is None:
                child.kill()
                child.join()


def default_workers() -> int:
    """Two web processes where there are two CPUs: one event loop is the gateway's limit when
    many streams start together, and a process that dies leaves the other serving while it is
    replaced. More are for the operator to choose: the CPUs of a GPU host are the engines' too."""
    return min(2, len(os.sched_getaffinity(0)))


def main() -> None:
    try:
        host = env.env_str("SHARDBOARD_BIND", "").strip() or "127.0.0.1"
        port = env.env_int("SHARDBOARD_PORT", 8000, low=1, high=65535)
        # More than one process: each has its own event loop (the gateway's streams spread over
        # the CPUs); what they share lives in Redis and the database.
        workers = env.env_int("SHARDBOARD_WEB_WORKERS", default_workers(), low=1, high=64)
    except env.ConfigError as exc:  # one line, as the ASGI app itself reports bad settings
        sys.stderr.write(f"shardboard: configuration error: {exc}\n")
        raise SystemExit(2) from None
    log_level = env.env_str("LOG_LEVEL", "").strip().lower() or "info"
    try:
        sock = listening_socket(host, port) if workers == 1 else None
    except OSError as exc:
        sys.stderr.write(f"shardboard: cannot listen on {host}:{port}: {exc.strerror or exc}\n")
        raise SystemExit(1) from None
    if sock is not None:
        serve(sock, host, port, log_level)
        return
    level = logging.getLevelName(log_level.upper())  # uvicorn's "trace" is not a logging level
    logging.basicConfig(
        level=level if isinstance(level, int) else logging.DEBUG,
        format="%(levelname)s:     %(message)s",
    )
    try:
        code = Supervisor(workers, host, port, log_level).run()
    except OSError as exc:
        sys.stderr.write(f"shardboard: cannot listen on {host}:{port}: {exc.strerror or exc}\n")
        raise SystemExit(1) from None
    raise SystemExit(code)


if __name__ == "__main__":
    main()
