"""The demo model on a host's CPU device with the real vLLM (its CPU build, issue 37), through a
real host worker and the /v1/ gateway on a real server: launched on the CPU row (RAM leased),
answered by vLLM itself; idle, it scales to zero, since vLLM on the CPU cannot sleep (the audit
says why, and the engine was never given --enable-sleep-mode); a request starts it again on
demand on the same RAM; stopped, nothing left running and no lease held. One engine at a time,
its KV space small (128 MiB)."""

from __future__ import annotations

import os
import secrets
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.engines import platforms, sleep
from deployments.lifecycle.idle import idle_setting_update
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import CPU_INDEX
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

# Two real vLLM starts (~45 s each alone; minutes on a loaded machine) and an idle wait.
pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(1200)]
KV_BYTES = 128 << 20
START_S = 480


@pytest.fixture
def holding(settings: Any) -> None:
    settings.SHARDBOARD_WAKE_HOLD_S = START_S  # a request held while vLLM starts on demand


def state(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def chat(url: str, headers: dict[str, str], name: str) -> dict[str, Any]:
    body = {"model": name, "messages": [{"role": "user", "content": "2 + 2 ="}], "max_tokens": 4}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=START_S)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def gone(pgid: int) -> bool:
    """No process of the engine's group is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def ram_lease(d: Deployment) -> GpuLease | None:
    return GpuLease.objects.filter(deployment=d, active=True, gpu__index=CPU_INDEX).first()


def test_the_demo_model_on_the_cpu_device_answers_scales_to_zero_and_starts_again(
    holding: None, host_worker: Any, model_root: Any, asgi_server: Any, operator: Any
) -> None:
    host = f"cpudev{secrets.token_hex(3)}"
    worker = start_sim_worker(host_worker, host, model_root, SHARDBOARD_IDLE_CHECK_S="0.5")
    plan = planning.PlanRequest(device="cpu", kv_cache_bytes=KV_BYTES, enforce_eager=True)
    request = LaunchRequest(
        name="cpu-demo", model_ref="local:0/tiny", host_name=host, plan_request=plan
    )
    d = deployment_create(user=operator, request=request)
    try:
        wait_for(lambda: state(d) in {Status.RUNNING, Status.FAILED}, timeout_s=START_S)
    except AssertionError:
        print(worker.log()[-4000:])
        raise
    assert d.status == Status.RUNNING, d.failure_reason
    first_pgid = d.pgid
    assert first_pgid is not None
    assert d.engine == "vllm" and d.argv[1] == "serve"
    assert d.argv[d.argv.index("--kv-cache-memory-bytes") + 1] == str(KV_BYTES)
    assert sleep.SLEEP_FLAG not in d.argv and d.env["CUDA_VISIBLE_DEVICES"] == ""
    leased = ram_lease(d)
    assert leased is not None and leased.memory_bytes == d.snapshot.per_gpu[0].total_bytes
    auth, url = bearer_for(operator), asgi_server.url
    answered = chat(url, auth, "cpu-demo")
    assert answered["system_fingerprint"].startswith("vllm-")  # vLLM itself answered

    idle_setting_update(user=operator, deployment=d, sleep_after_s=2)
    try:
        wait_for(lambda: state(d) == Status.SCALED_TO_ZERO, timeout_s=120)
    except AssertionError:
        print(worker.log()[-4000:])
        raise
    zero = AuditEvent.objects.get(action="deployment.scale_to_zero", target_id=str(d.pk))
    assert zero.detail["cannot_sleep"] == platforms.no_sleep_reason("vllm", "cpu")
    assert ram_lease(d) is None and d.pid is None
    wait_for(lambda: gone(first_pgid), interval_s=0.2)

    # A request through the gateway starts it again on demand, on the same RAM, and is answered.
    again = chat(url, auth, "cpu-demo")
    assert again["usage"]["completion_tokens"] > 0
    assert state(d) == Status.RUNNING and d.pgid not in (None, first_pgid)
    second_pgid = d.pgid
    back = ram_lease(d)
    assert back is not None and back.memory_bytes == leased.memory_bytes

    idle_setting_update(user=operator, deployment=d, sleep_after_s=None)
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: state(d) == Status.STOPPED)
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: gone(second_pgid), interval_s=0.2)
