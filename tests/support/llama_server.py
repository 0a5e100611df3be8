"""A real llama-server for tests and bench/gguf_accuracy.py: found, started, read, stopped.

The binary is the one scripts/llama.sh built (its path is recorded in var/llama-server.path) or
SHARDBOARD_LLAMA_SERVER_BIN. At ``-lv 4`` llama.cpp prints one line per buffer it allocates:
``load_tensors: CPU_Mapped model buffer size = 0.11 MiB``, ``llama_kv_cache: CPU KV buffer
size = 1.00 MiB``, ``sched_reserve: CPU compute buffer size = 6.52 MiB``,
``llama_context: CPU output buffer size = 0.49 MiB``: those are what the planner is held to.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
# Match on the message, not the function prefix: llama.cpp renames those between versions.
BUFFER_LINE = re.compile(
    r"(?P<device>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*="
    r"\s*(?P<mib>[\d.]+)\s*MiB"
)
KV_CELLS = re.compile(r"llama_kv_cache: size = [\d.]+ MiB \(\s*(?P<cells>\d+) cells")


def server_binary() -> Path | None:
    """The llama-server to run, None when none was built here."""
    named = os.environ.get("SHARDBOARD_LLAMA_SERVER_BIN")
    if named:
        return Path(named)
    var = Path(os.environ.get("SHARDBOARD_VAR_DIR") or ROOT / "var")
    for record in (var / "llama-server.path", ROOT / "var" / "llama-server.path"):
        if record.is_file():
            path = Path(record.read_text().strip())
            if path.is_file() and os.access(path, os.X_OK):
                return path
    return None


@dataclass
class Started:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def buffers(self) -> dict[tuple[str, str], float]:
        """(device, kind) → MiB as logged; a kind logged twice for a device is summed."""
        found: dict[tuple[str, str], float] = {}
        for match in BUFFER_LINE.finditer(self.log()):
            key = (match["device"], match["kind"])
            found[key] = found.get(key, 0.0) + float(match["mib"])
        return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def llama_server(
    binary: Path, model: Path, args: Sequence[str], log_dir: Path, *, timeout_s: float = 60
) -> Iterator[Started]:
    """llama-server on a free loopback port with ``-lv 4``, until the block ends (SIGTERM)."""
    port = free_port()
    log_path = log_dir / f"llama-server-{port}.log"
    argv = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-t", "1", "--no-ui", "--offline", "-lv", "4", *args,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    started = Started(f"http://127.0.0.1:{port}", process, log_path)
    try:
        wait_for(
            lambda: process.poll() is not None or healthy(started.url), timeout_s, interval_s=0.05
        )
        if process.poll() is not None:
            raise RuntimeError(
                f"llama-server exited {process.returncode}:\n{started.log()[-3000:]}"
            )
        yield started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def run_until_exit(
    binary: Path, model: Path, args: Sequence[str], *, timeout_s: float = 60
) -> tuple[int, str]:
    """A start that is expected to fail: its exit status and output."""
    done = subprocess.run(
        [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()),
         "-t", "1", "--no-ui", "--offline", "-lv", "4", *args],
        capture_output=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")
