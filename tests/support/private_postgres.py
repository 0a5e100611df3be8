"""A PostgreSQL cluster of one test alone (Debian's server, as scripts/postgres.sh starts it),
so that it can be stopped and started again without touching the shared one."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.private_redis import free_port


def _bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries (scripts/setup.sh --test installs them)")
    return Path(found[-1]).parent


class PrivatePostgres:
    """initdb'd under ``workdir`` (a directory of its own when running as root: the server
    runs as `postgres`, which cannot enter pytest's root-only temporary directories)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.bin = _bin()
        self._as_root = os.geteuid() == 0
        base = Path(tempfile.mkdtemp(prefix="faults-pg-")) if self._as_root else workdir
        self.base = base
        self.data = base / "data"
        self.log = base / "server.log"

    def url(self, name: str = "shardboard") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_root else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        if self._as_root:
            entry = pwd.getpwnam("postgres")
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust")
        self.start()
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE shardboard")

    def start(self) -> None:
        options = f"-p {self.port} -k '' -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-o",
            options,
            "start",
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=1).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        """Stopped as a restart by an administrator does: open connections are cut."""
        if (self.data / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")

    def remove(self) -> None:
        self.stop()
        if self._as_root:
            shutil.rmtree(self.base, ignore_errors=True)
