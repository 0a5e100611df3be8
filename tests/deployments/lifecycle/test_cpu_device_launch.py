"""Launching on a host's CPU device (issue 37): vLLM's CPU build planned on the CPU row, its RAM
leased through the launch's locked reservation, the engine's spec with device "cpu", the plan's
KV space and core binding; the refusals before anything is written, each with its reason; what
each engine does when idle, known before launch. Rows only (no worker): the `db` fixture's
transaction is rolled back before any on-commit task."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.engines import platforms
from deployments.host import engine_control
from deployments.lifecycle.selectors import launch_hosts
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease
from monitoring.models import CPU_INDEX, Host
from playground.models import Scope
from playground.services import token_create
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
HOST = "cpuhost"
GIB, MIB = 1 << 30, 1 << 20
KV_BYTES = 128 * MIB


def _cpu(
    model: str = "local:0/tiny",
    engine: str = "vllm",
    kv_bytes: int | None = KV_BYTES,
    **fields: Any,
) -> LaunchRequest:
    plan = planning.PlanRequest(device="cpu", kv_cache_bytes=kv_bytes, enforce_eager=True)
    return LaunchRequest(
        name="on-cpu", model_ref=model, host_name=HOST, engine=engine, plan_request=plan,
        **fields,
    )  # fmt: skip


def test_a_cpu_launch_leases_ram_on_the_cpu_row_and_spawns_vllm_on_the_cpu(
    model_root: Path, operator: Any
) -> None:
    host = sim_host(HOST, 2, ram_bytes=16 * GIB)
    d = deployment_create(user=operator, request=_cpu(sleep_after_s=60))
    e = d.snapshot.engine_args
    assert (d.engine, e.device, e.kv_cache_memory_bytes) == ("vllm", "cpu", KV_BYTES)
    assert d.engine_device == "cpu" and d.snapshot.kv_cache_tokens
    lease = GpuLease.objects.select_related("gpu").get(deployment=d, active=True)
    assert lease.gpu.index == CPU_INDEX and lease.gpu.host == host
    assert lease.memory_bytes == d.snapshot.per_gpu[0].total_bytes > KV_BYTES
    argv = list(d.planned_argv)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(KV_BYTES)
    created = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert created.detail["gpus"] == [CPU_INDEX] and created.detail["engine"] == "vllm"
    assert created.detail["when_idle"].startswith("scales to zero (vLLM on the CPU has no sleep")

    spec = engine_control.launch_spec(d, 8123)
    assert spec.device == "cpu" and spec.gpu_indices == ()
    assert spec.kv_cache_memory_bytes == KV_BYTES and spec.cpu_threads_bind == e.cpu_threads_bind
    assert spec.gpu_memory_utilization is None and spec.enforce_eager
    assert not spec.sleep_mode  # an idle setting, but vLLM's CPU platform refuses the flag


@pytest.mark.parametrize(
    ("ram_bytes", "request_of", "message"),
    [
        (None, lambda: _cpu(), "offers no CPU device to plan on"),
        (2 * GIB, lambda: _cpu(), "is less than requested memory for kv"),
        (1 * GIB, lambda: _cpu(kv_bytes=None), "RAM too small"),
        (16 * GIB, lambda: _cpu("local:0/heads16"), "no kernel for head size 16"),
        (16 * GIB, lambda: _cpu(engine="transformers"), "planned for vLLM"),
        (16 * GIB, lambda: _cpu(hosts=("other",)), "runs on one host"),
        (16 * GIB, lambda: _cpu(replicas=2), "hold 1 of the 2 replicas"),
    ],
)
def test_a_cpu_launch_is_refused_with_the_reason_and_writes_nothing(
    model_root: Path, operator: Any, ram_bytes: int | None, request_of: Any, message: str
) -> None:
    heads16 = model_root / "heads16"  # head_dim 16: vLLM's CPU attention has no kernel for it
    shutil.copytree(model_root / "tiny", heads16)
    config = json.loads((heads16 / "config.json").read_text())
    config.update(num_attention_heads=8, num_key_value_heads=8, head_dim=16)
    (heads16 / "config.json").write_text(json.dumps(config))
    sim_host(HOST, 2, ram_bytes=ram_bytes)
    sim_host("other", 2, ram_bytes=16 * GIB)
    with pytest.raises(DeploymentError, match=message):
        deployment_create(user=operator, request=request_of())
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()


def test_the_api_takes_the_device_and_says_where_the_engine_runs(
    model_root: Path, operator: Any
) -> None:
    sim_host(HOST, 2, ram_bytes=16 * GIB)
    _, raw = token_create(user=operator, name="api", scopes=(Scope.READ, Scope.DEPLOY))
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"name": "on-cpu", "model_ref": "local:0/tiny", "host": HOST, "device": "cpu"}
    r = api.post("/api/v1/deployments", {**body, "kv_cache_bytes": KV_BYTES},
                 content_type="application/json")  # fmt: skip
    assert r.status_code == 201, r.content
    out = r.json()
    assert out["device"] == "cpu" and out["engine"] == "vllm"
    assert out["idle"].startswith("scales to zero (vLLM on the CPU has no sleep mode")
    assert out["replicas"][0]["gpus"] == [CPU_INDEX]
    gpu = {**body, "name": "on-gpus", "device": "gpu", "kv_cache_bytes": KV_BYTES}
    r = api.post("/api/v1/deployments", gpu, content_type="application/json")
    assert r.status_code == 422 and "body.kv_cache_bytes" in r.json()["message"], r.content
    r = api.post("/api/v1/deployments", {**body, "name": "x", "device": "tpu"},
                 content_type="application/json")  # fmt: skip
    assert r.status_code == 422 and "device" in r.content.decode()
    got = api.get(f"/api/v1/deployments/{out['id']}").json()
    assert got["device"] == "cpu"


def test_the_launch_form_says_which_engines_each_host_runs_and_whether_they_sleep(
    operator: Any, client: Client
) -> None:
    sim_host("laptop", 2, ram_bytes=16 * GIB)
    gpu_host = sim_host("gpubox", 2)
    Host.objects.filter(pk=gpu_host.pk).update(simulated=False)
    client.force_login(operator)
    page = client.get("/deployments/new/").content.decode()
    assert 'id="host-engines"' in page and 'name="device"' in page
    rows = {(h.name, e.engine, e.where): e.idle for h in launch_hosts() for e in h.engines}
    where_sim = "on the CPU, in place of its simulated GPUs"
    assert rows[("laptop", "vllm", where_sim)].startswith("scales to zero (vLLM on the CPU")
    assert rows[("laptop", "vllm", "on its CPU device (RAM leased)")].startswith("scales to")
    assert rows[("gpubox", "vllm", "on its GPUs")] == "sleeps"
    assert rows[("gpubox", "transformers", "on its GPUs")] == (
        "scales to zero (transformers serve has no sleep mode)"
    )
    assert 'data-host="laptop" data-engine="vllm"' in page and "vLLM (its CPU build)" in page


def test_only_vllm_on_a_gpu_sleeps_and_the_spawn_never_asks_another_to(
    model_root: Path, operator: Any
) -> None:
    assert platforms.sleeps("vllm", "gpu")
    for engine, device in [("vllm", "cpu"), ("transformers", "gpu"), ("llamacpp", "cpu")]:
        assert not platforms.sleeps(engine, device) and platforms.no_sleep_reason(engine, device)
    sim = sim_host("simhost", 2)
    request = LaunchRequest(
        name="idle-sim", model_ref="local:0/tiny", host_name="simhost", sleep_after_s=60
    )
    d = deployment_create(user=operator, request=request)
    assert d.engine == "vllm" and d.engine_device == "cpu"
    assert not engine_control.launch_spec(d, 8123).sleep_mode  # vLLM on the CPU in their place
    Host.objects.filter(pk=sim.pk).update(simulated=False)
    d.refresh_from_db()
    d.host.refresh_from_db()
    assert engine_control.launch_spec(d, 8124).sleep_mode  # real GPUs: vLLM sleeps
    client = Client()
    client.force_login(operator)
    Host.objects.filter(pk=sim.pk).update(simulated=True)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert "Idle: scales to zero (vLLM on the CPU has no sleep mode" in page
