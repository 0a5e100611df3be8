"""The web server as `make run` starts it: `python -m controlpanel.webserver` (uvicorn)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, child_env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("var", "value"),
    [("SHARDBOARD_WEB_WORKERS", "zero"), ("SHARDBOARD_WEB_WORKERS", "0"), ("SHARDBOARD_PORT", "x")],
)
def test_a_bad_setting_is_one_line_naming_it(var: str, value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controlpanel.webserver"],
        cwd=ROOT,
        env=child_env(**{var: value}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardboard: configuration error: ")
    assert var in lines[0] and repr(value) in lines[0]


def test_several_processes_serve_pages_the_gateway_and_stop_on_sigterm(
    transactional_db: None, settings: Any
) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlpanel.webserver"],
        cwd=ROOT,
        env=child_env(
            SHARDBOARD_PORT=str(port),
            SHARDBOARD_WEB_WORKERS="2",
            ALLOWED_HOSTS="127.0.0.1",
            LOG_LEVEL="WARNING",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                login = httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
        assert "server" not in login.headers  # no server banner
        gateway = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
        assert gateway.status_code == 401
        assert gateway.json()["error"]["type"] == "unauthenticated"
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "Traceback" not in output
