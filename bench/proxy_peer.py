"""vllm-router, the vLLM project's Rust router, as a peer for bench/proxy_overhead.py.

Never a project dependency: it lives in a virtualenv of its own, made once with

    python3 -m venv ~/.cache/shardboard/bench-venvs/router
    ~/.cache/shardboard/bench-venvs/router/bin/pip install vllm-router==0.1.17 py-spy

(`make_venv()` below does the same). The wheel is an abi3 build of the Rust router with a
thin Python launcher; round robin over one worker is the least work it can do per request.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

VERSION = "0.1.17"
VENV = Path.home() / ".cache" / "shardboard" / "bench-venvs" / "router"
BIN = VENV / "bin" / "vllm-router"


def available() -> bool:
    return BIN.exists()


def make_venv() -> None:
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "pip"), "install", "-q", f"vllm-router=={VERSION}", "py-spy"]
    subprocess.run(pip, check=True)


def start_router(
    port: int, metrics_port: int, worker_urls: list[str], log: Path
) -> subprocess.Popen[bytes]:
    """The router on loopback, round robin over `worker_urls` (the stand-in engine answers its
    health check: any GET gets a 200). Its own retries and circuit breaker stay at their
    defaults, as a user would run it; its log (warnings only) goes to `log`."""
    cmd = [str(BIN), "--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin"]
    cmd += ["--worker-urls", *worker_urls, "--log-level", "warning"]
    # Its Prometheus exporter listens too (29000 by default, taken by a second router).
    cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
