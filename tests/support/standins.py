"""The vLLM 0.33 stand-in (vllm_standin.py) as a process on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.llama_server import free_port
from tests.support.processes import ROOT
from tests.support.waiting import wait_for

STANDIN = ROOT / "tests" / "support" / "vllm_standin.py"


@contextmanager
def standin(*args: str, port: int | None = None, **env: str) -> Iterator[str]:
    """`vllm serve m --served-model-name tiny` on 127.0.0.1; yields its base URL."""
    port = port or free_port()
    argv = [sys.executable, str(STANDIN), "serve", "m", "--served-model-name", "tiny",
            "--host", "127.0.0.1", "--port", str(port), "--tensor-parallel-size", "1", *args]  # fmt: skip
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(url))
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
