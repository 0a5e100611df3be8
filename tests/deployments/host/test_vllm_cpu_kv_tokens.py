"""The planner's KV tokens on vLLM's CPU build against the real engine's own figure.

A tiny Llama of a shape unlike the demo's (4 layers, 2 KV heads of 128) is planned on this
host's CPU at TP 2 with a given KV space; the plan's snapshot gives the engine's spec, the vLLM
adapter its command, the supervisor spawns it, and the engine's start-up log says "CPU KV cache
size: N tokens". One engine for the module, stopped when done."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deployments import planning
from deployments.catalog.demo_model import make_llama_shape
from deployments.catalog.modelfiles import folder_spec
from deployments.engines import VllmAdapter
from deployments.handoff.snapshot import from_plan
from deployments.host import enginebins
from deployments.host.supervisor import processes

pytestmark = [pytest.mark.engine]

KV_BYTES = 96 << 20
LOGGED = re.compile(r"CPU KV cache size: ([\d,]+) tokens")
# A start takes ~45 s in eager mode on two shared cores, longer while the machine is loaded.
START_WAIT_S = 300


@dataclass(frozen=True)
class Started:
    plan: planning.Plan
    log: str


def _logged_tokens(log_path: Path, handle: processes.EngineHandle) -> str:
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if LOGGED.search(text) or processes.poll_exit(handle) is not None:
            return text
        time.sleep(1)
    return log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    vllm = enginebins.prepared("vllm")
    if vllm is None:
        pytest.skip("vLLM's CPU build is not prepared here (bash scripts/vllm.sh)")
    root = tmp_path_factory.mktemp("cpu-kv")
    model = make_llama_shape(root / "model", hidden_size=256, heads=2, kv_heads=2, layers=4)
    cpu = planning.Cpu("this CPU", cores=2, total_bytes=16 << 30, free_bytes=12 << 30)
    inventory = planning.Inventory((planning.Host("local", (), cpu=cpu),))
    request = planning.PlanRequest(
        device="cpu",
        tensor_parallel_size=2,
        kv_cache_bytes=KV_BYTES,
        max_model_len=512,
        enforce_eager=True,
    )
    plan = planning.plan(folder_spec(model), inventory, request).plans[0]
    assert plan.fits, plan.reasons
    spec = from_plan(plan).launch_spec(
        deployment_id="cpu-kv-test", model=str(model), port=processes.find_free_port()
    )
    command = VllmAdapter(vllm).build(spec)
    handle = processes.spawn(command.argv, command.env, root / "engine.log")
    try:
        yield Started(plan, _logged_tokens(root / "engine.log", handle))
    finally:
        _stop(handle)


def _stop(handle: processes.EngineHandle) -> None:
    """SIGTERM to the engine's process group, SIGKILL if it lingers: nothing left running."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(handle.pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and processes.final_exit(handle) is None:
            time.sleep(0.2)


@pytest.mark.timeout(420, func_only=False)  # one real start of vLLM (see START_WAIT_S)
def test_planned_kv_tokens_are_the_engines(started: Started) -> None:
    found = LOGGED.search(started.log)
    assert found, started.log[-3000:]
    logged = int(found[1].replace(",", ""))
    # 4 layers x 2 (K, V) x 1 KV head a rank x 128 x 2 bytes (bf16) = 2 KiB a token and rank
    assert started.plan.kv_cache_tokens == logged == KV_BYTES // (2048 * 128) * 128
    assert "Explicitly set (0.09/" in started.log  # every rank allocates the whole space
    assert started.log.count("GiB for KV cache on node") == 2
