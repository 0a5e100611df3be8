"""The web server as `make run` starts it: `python -m controlpanel.webserver` (uvicorn)."""

from __future__ import annotations

import asyncio
import gc
import gzip
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlpanel import webserver
from tests.support.processes import ROOT, child_env


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


def start_server(
    port: int, workers: int | None, *, own_group: bool = False
) -> subprocess.Popen[str]:
    """`workers` None: as many as by default."""
    env = child_env(SHARDBOARD_PORT=str(port), ALLOWED_HOSTS="127.0.0.1", LOG_LEVEL="WARNING")
    env.pop("SHARDBOARD_WEB_WORKERS", None)
    if workers is not None:
        env["SHARDBOARD_WEB_WORKERS"] = str(workers)
    return subprocess.Popen(
        [sys.executable, "-m", "controlpanel.webserver"],
        cwd=ROOT,
        env=env,
        start_new_session=own_group,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_serving(proc: subprocess.Popen[str], port: int) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise
            time.sleep(0.2)


def listeners(port: int) -> dict[int, set[int]]:
    """pid → inodes of the LISTEN sockets on `port` it holds (from /proc)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(int(fields[9]))
    held: dict[int, set[int]] = {}
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            links = [os.readlink(fd) for fd in (pid_dir / "fd").iterdir()]
        except OSError:
            continue
        mine = {int(link[8:-1]) for link in links if link.startswith("socket:[")} & inodes
        if mine:
            held[int(pid_dir.name)] = mine
    return held


def children_of(pid: int) -> set[int]:
    return {int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: one process by default")
def test_several_processes_serve_pages_the_gateway_and_stop_on_sigterm(
    transactional_db: None, settings: Any
) -> None:
    port = free_port()
    proc = start_server(port, workers=None)  # two by default, on two CPUs or more
    try:
        login = wait_serving(proc, port)
        assert login.status_code == 200 and "csrfmiddlewaretoken" in login.text
        assert "server" not in login.headers  # no server banner
        gateway = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
        assert gateway.status_code == 401
        assert gateway.json()["error"]["type"] == "unauthenticated"
        # Each process listens on a socket of its own (SO_REUSEPORT: the kernel spreads
        # connections over them), none in the supervising parent.
        deadline = time.monotonic() + 30
        while len(held := listeners(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(held) == 2 and all(len(inodes) == 1 for inodes in held.values())
        assert set(held) <= children_of(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "Traceback" not in output
    assert not listeners(port), "every web process has stopped"


@pytest.mark.parametrize("workers", [1, None])
def test_ctrl_c_stops_every_process_without_a_traceback(
    transactional_db: None, settings: Any, workers: int | None
) -> None:
    port = free_port()
    proc = start_server(port, workers, own_group=True)
    try:
        wait_serving(proc, port)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole group
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert not listeners(port)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_in_use_is_one_line_and_never_shared(
    workers: int, transactional_db: None, settings: Any
) -> None:
    port = free_port()
    first = start_server(port, workers=2)
    try:
        wait_serving(first, port)
        second = start_server(port, workers=workers)
        output, _ = second.communicate(timeout=60)
        assert second.returncode == 1
        lines = output.strip().splitlines()
        assert lines == [f"shardboard: cannot listen on 127.0.0.1:{port}: Address already in use"]
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)


def test_a_web_process_that_dies_is_replaced(transactional_db: None, settings: Any) -> None:
    port = free_port()
    proc = start_server(port, workers=2)
    try:
        wait_serving(proc, port)
        deadline = time.monotonic() + 30
        while len(held := listeners(port)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(webserver.START_GRACE_S)  # past start-up: a death now is not a failed start
        victim = next(iter(held))
        os.kill(victim, signal.SIGKILL)
        while (
            len(held := listeners(port)) < 2 or victim in held
        ) and time.monotonic() < deadline + 30:
            time.sleep(0.2)
        assert len(held) == 2 and victim not in held
        assert httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=60).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert "starting another" in output


async def test_what_the_start_made_is_frozen_out_of_the_garbage_collectors_sight() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    server = webserver.Server(webserver.config(app, log_level="warning"))
    sock = webserver.listening_socket("127.0.0.1", 0)
    gc.unfreeze()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        assert gc.get_freeze_count() > 10_000  # the modules, Django's and this test run's objects
    finally:
        server.should_exit = True
        await serving
        gc.unfreeze()
        sock.close()


def test_plotly_is_the_basic_bundle_served_compressed(client: Any) -> None:
    """The pages draw scatter and bar traces only: plotly's basic bundle, gzipped on the wire."""
    response = client.get("/static/vendor/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip, br")
    assert response.status_code == 200 and response["Content-Encoding"] == "gzip"
    assert int(response["Content-Length"]) < 500_000  # the full bundle: 4.8 MB, 1.4 MB gzipped
    body = gzip.decompress(b"".join(response.streaming_content))
    assert body.startswith(b"/**\n* plotly.js (basic - minified)")
    plain = client.get("/static/vendor/plotly.min.js")
    assert "Content-Encoding" not in plain and int(plain["Content-Length"]) == len(body)
