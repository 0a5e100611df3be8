"""The plan panel plans vLLM's CPU build on a host's CPU as it plans GPUs: memory, KV tokens,
concurrency, and the exact command with its environment; refusals say why."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.support.catalog import QWEN, login_client
from tests.support.hosts import sim_host
from tests.support.hubstub import HubStub

GIB = 1 << 30


def test_a_cpu_plan_on_a_registered_host(client: Client, operator: Any, hub: HubStub) -> None:
    sim_host("cpu-host", 2, ram_bytes=64 * GIB)
    login_client(client, operator)
    params = {"ref": QWEN, "target": "cpu-host", "device": "cpu", "max_model_len": 4096}
    data = client.get("/models/plan/", {**params, "tensor_parallel_size": 2}).json()
    assert data["ok"], data["error"]
    plan = data["plan"]
    assert (plan["device"], plan["tensor_parallel_size"]) == ("cpu", 2)
    assert plan["gpus"] == [[{"host": "cpu-host", "index": 1000}]]
    assert plan["chart"]["labels"] == ["CPU · cpu-host · 2 ranks"]
    parts = [p["name"] for p in plan["chart"]["parts"]]
    assert parts == ["Weights", "Activations", "Engine processes", "KV cache"]
    kv = plan["engine_settings"]["kv_cache_memory_bytes"]
    assert plan["per_gpu"][0]["kv_cache_bytes"] == 2 * kv > 0
    line = plan["commands"]["vllm"]
    assert line.startswith(f"VLLM_CPU_OMP_THREADS_BIND='0|1' vllm serve {QWEN} ")
    assert f"--kv-cache-memory-bytes {kv}" in line and "--gpu-memory-utilization" not in line
    assert plan["launch"]["device"] == "cpu" and plan["launch"]["kv_cache_bytes"] == str(kv)
    assert "the host's CPU: 2 ranks (cores 0|1)" in plan["launch_note"]
    assert plan["kv_cache_tokens"] > 0 and plan["max_concurrency"] > 0

    given = client.get("/models/plan/", {**params, "kv_cache_bytes": 1 << 30}).json()
    assert given["plan"]["engine_settings"]["kv_cache_memory_bytes"] == 1 << 30
    # Qwen2.5-7B: 28 layers, 4 KV heads of 128 at bf16: 57,344 bytes a token, 128 a block
    assert given["plan"]["kv_cache_tokens"] == (1 << 30) // (57344 * 128) * 128

    html = client.get(f"/models/{QWEN}/", {**params}).content.decode()
    assert 'name="device"' in html


def test_too_little_ram_is_refused_with_the_reason(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    params = {"ref": QWEN, "target": "whatif", "gpus": "8x8GiB", "device": "cpu"}
    data = client.get("/models/plan/", params).json()
    assert not data["ok"]
    assert "RAM too small" in data["error"]
    bad = client.get("/models/plan/", {**params, "gpus": "4x80GiB@nvlink"})
    assert "unreadable CPU" in bad.json()["error"]
