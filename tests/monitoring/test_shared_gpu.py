"""Several engines on one simulated GPU: the live message splits its memory by deployment, as
the dashboard's memory chart stacks it (each deployment's share, then "other")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitoring.gpus.simulated import SimulatedBackend
from monitoring.payloads import live_message
from monitoring.selectors import publish_message

GIB = 1024**3


@pytest.fixture
def two_engines() -> Iterator[tuple[int, int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
        )
        for _ in range(2)
    ]
    yield procs[0].pid, procs[1].pid
    for proc in procs:
        proc.kill()
        proc.wait()


def test_each_deployment_gets_its_share_of_a_shared_gpu(
    tmp_path: Path, two_engines: tuple[int, int]
) -> None:
    a, b = two_engines
    backend = SimulatedBackend("2xH100-80GB@nvlink", state_dir=tmp_path, seed=3)
    backend.attach(a, [0, 1], 18 * GIB, 40.0, name="vllm", memory_by_gpu={1: 12 * GIB})
    backend.attach(b, [0], 30 * GIB, 40.0, name="vllm")
    sample = backend.sample()
    message = live_message("gpu-a", sample, simulated=True)
    own = {str(a): "chat-a", str(b): "chat-b"}
    out = publish_message(message, sample, backend.devices(), own, simulated=True)
    g0, g1 = out["g"]
    assert g0["dm"] == {"chat-a": 18 * 1024, "chat-b": 30 * 1024}
    assert g0["mo"] == 512  # the idle board, nobody's deployment
    assert g0["m"] == 18 * 1024 + 30 * 1024 + 512  # the stack adds up to memory used
    assert g1["dm"] == {"chat-a": 12 * 1024}
