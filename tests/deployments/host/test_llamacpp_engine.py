"""A real llama-server on a tiny GGUF the test writes, through the adapter and the supervisor:
ready, a chat completion behind the key, the -lv 4 buffer lines read back, SIGTERM.

Skips, saying why, where no llama-server binary is found (SHARDBOARD_LLAMA_SERVER_BIN, the path
scripts/llama.sh records in var/llama-server.path, or PATH) or the `gguf` package is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deployments.catalog.gguf_write import write_random_llama
from deployments.engines import EngineCommand, LaunchSpec, get_adapter
from deployments.engines.llamacpp import LLAMA_SERVER_BIN_ENV
from deployments.engines.llamacpp_memory import HOST, MIB, read_buffers
from deployments.host import supervisor as sv
from deployments.host.diagnosis import diagnose
from tests.support.llama_server import server_binary
from tests.support.llama_shapes import TINY, kv_bytes

pytestmark = pytest.mark.engine

READY_TIMEOUT_S = 60.0
KEY = "sk-llama-test-key"
CELLS = 512


def _binary() -> str | None:
    """scripts/llama.sh's build (tests.support.llama_server: the env var, then var/), else PATH."""
    found = server_binary()
    return str(found) if found else shutil.which("llama-server")


@dataclass(frozen=True)
class Running:
    command: EngineCommand
    handle: sv.EngineHandle
    ready: sv.ReadyResult


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    binary = _binary()
    if binary is None:
        pytest.skip(
            f"no llama-server binary: set {LLAMA_SERVER_BIN_ENV}, run scripts/llama.sh, "
            "or put llama-server on PATH"
        )
    pytest.importorskip("gguf", reason="the tiny GGUF is written with the gguf package")
    folder = tmp_path_factory.mktemp("llama")
    model = write_random_llama(folder / "tiny.gguf", TINY, quant="F32")
    spec = LaunchSpec(
        deployment_id="llama-test",
        model=str(model),
        port=sv.find_free_port(),
        served_model_name="tiny",
        api_key=KEY,
        device="cpu",
        max_model_len=CELLS,
        n_parallel=2,
        extra_args=("-t", "1"),  # 2-core CI
    )
    adapter = get_adapter("llamacpp")
    command = adapter.build(spec)
    assert command.argv[0] == binary
    handle = sv.spawn(command.argv, command.env, folder / "llama.log")
    try:
        ready = sv.wait_ready(
            command.base_url,
            command.probe,
            READY_TIMEOUT_S,
            lambda: sv.handle_alive(handle),
            poll_s=0.2,
        )
        assert ready.ready, f"{ready}\n{sv.tail(handle.log_path)}"
        yield Running(command, handle, ready)
    finally:
        sv.stop(handle, grace_s=10.0)


@pytest.fixture(scope="module", autouse=True)
def _named_binary() -> Iterator[None]:
    """The adapter reads the binary from the environment, as a host worker does."""
    binary = _binary()
    saved = os.environ.get(LLAMA_SERVER_BIN_ENV)
    if binary:
        os.environ[LLAMA_SERVER_BIN_ENV] = binary
    yield
    if saved is None:
        os.environ.pop(LLAMA_SERVER_BIN_ENV, None)
    else:
        os.environ[LLAMA_SERVER_BIN_ENV] = saved


def test_chat_completion_behind_the_key(server: Running) -> None:
    body = {"messages": [{"role": "user", "content": "1 + 1 ="}], "max_tokens": 8}
    with httpx.Client(base_url=server.command.base_url, timeout=30.0) as client:
        assert client.post("/v1/chat/completions", json=body).status_code == 401
        assert client.get("/health").status_code == 200  # public, as the probe needs
        answer = client.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert answer.status_code == 200, answer.text
        reply = answer.json()
        assert reply["model"] == "tiny"
        assert reply["usage"]["completion_tokens"] >= 1
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"})
        assert metrics.status_code == 200
        assert "llamacpp:tokens_predicted_total" in metrics.text


def test_smoke_test_of_the_launch_passes(server: Running) -> None:
    result = sv.smoke_test(server.command.base_url, server.command.request_model, KEY)
    assert result.ok, result.reason


def test_buffer_lines_measure_the_planned_kv(server: Running) -> None:
    log = sv.tail(server.handle.log_path, 2000)
    (host,) = read_buffers(log)
    assert host.device == HOST
    assert abs(host.kv_bytes - kv_bytes(CELLS)) <= round(0.005 * MIB)
    assert host.model_bytes > 0 and host.compute_bytes > 0
    assert diagnose(log) is None


def test_sigterm_stops_it_cleanly(server: Running, tmp_path: Path) -> None:
    # The module's server stopped here, not in the fixture, so the stop itself is measured.
    result = sv.stop(server.handle, grace_s=10.0)
    assert result.signal_sent == "SIGTERM"
    assert result.remaining_pids == ()
    assert "cleaning up before exit" in sv.tail(server.handle.log_path, 50)
