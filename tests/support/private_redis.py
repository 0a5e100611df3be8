from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test alone, so that it can be stopped and started again."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        with redis.Redis.from_url(self.url, socket_connect_timeout=0.2) as client:
            while True:  # closed after: tests count the connections Redis has
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
