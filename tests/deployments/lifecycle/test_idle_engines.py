"""Idle deployments end to end (issue 30, part 2), on real parts: a real host worker, the /v1/
gateway on a real server, and real engines: transformers serve (no sleep mode: scaled to zero,
started again on demand) and the vLLM 0.33 stand-in (asleep at level 1, woken on request)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.idle import idle_setting_update
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Host
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(600)]
STANDIN = Path(__file__).resolve().parents[2] / "support" / "vllm_standin.py"
IDLE_S = 3


@pytest.fixture
def holding(settings: Any) -> None:
    settings.PLAYGROUND_MAX_CONCURRENT = 16  # the server is forked with these settings
    settings.SHARDBOARD_WAKE_HOLD_S = 150  # a transformers cold start on a loaded CI machine


def state(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def ask(url: str, headers: dict[str, str], name: str, n: int) -> tuple[int, str, float]:
    """A streamed completion through the gateway: its status, data lines and wall time."""
    body = {"model": name, "prompt": f"count {n}:", "max_tokens": 8, "stream": True}
    started = time.monotonic()
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers, timeout=240
    ) as answer:
        text = "\n".join(answer.iter_lines()).strip()
    return answer.status_code, text, time.monotonic() - started


def server_ttft_ms(text: str) -> float:
    """The gateway's own time to first token, from its playground metrics frame."""
    lines = text.splitlines()
    at = lines.index("event: shardboard")
    return float(json.loads(lines[at + 1][6:])["ttft_ms"])


def launch(operator: Any, host: str, name: str, engine: str) -> Deployment:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=host,
        engine=engine,
        plan_request=planning.PlanRequest(),
    )
    d = deployment_create(user=operator, request=request)
    wait_for(lambda: state(d) in {Status.RUNNING, Status.FAILED}, timeout_s=200)
    assert d.status == Status.RUNNING, d.failure_reason
    return d


def test_transformers_scales_to_zero_and_starts_on_demand(
    holding: None, host_worker: Any, model_root: Any, asgi_server: Any, operator: Any
) -> None:
    host = f"zero{secrets.token_hex(3)}"
    worker = start_sim_worker(host_worker, host, model_root, SHARDBOARD_IDLE_CHECK_S="0.5")
    d = launch(operator, host, "napper", "transformers")
    leased = list(
        GpuLease.objects.filter(deployment=d, active=True).values_list("gpu_id", "memory_bytes")
    )
    idle_setting_update(user=operator, deployment=d, sleep_after_s=IDLE_S)
    auth, url = bearer_for(operator), asgi_server.url
    status, text, _ = ask(url, auth, "napper", 0)
    assert status == 200 and text.endswith("[DONE]"), text[-300:]

    try:
        wait_for(lambda: state(d) == Status.SCALED_TO_ZERO, timeout_s=90)
    except AssertionError:
        print(worker.log()[-3000:])
        raise
    assert d.pid is None and not GpuLease.objects.filter(deployment=d, active=True).exists()
    zero = AuditEvent.objects.get(action="deployment.scale_to_zero", target_id=str(d.pk))
    assert "no request for" in zero.detail["reason"]
    assert zero.detail["cannot_sleep"] == "transformers serve has no sleep mode"
    went = d.events.filter(new_status=Status.SCALED_TO_ZERO).get()
    assert "scaled to zero" in went.reason

    # Four requests at once for the scaled-to-zero name: all held, one start, all answered.
    playground = {**auth, "X-Shardboard-Playground": "1"}
    with ThreadPoolExecutor(max_workers=4) as pool:
        asked = [
            pool.submit(ask, url, playground if n == 0 else auth, "napper", n) for n in range(4)
        ]
        answers = [f.result(timeout=300) for f in asked]
    for status, text, _ in answers:
        assert status == 200 and text.endswith("data: [DONE]"), text[-300:]
    assert state(d) == Status.RUNNING and d.woke_at is not None
    starts = d.events.filter(old_status=Status.SCALED_TO_ZERO, new_status=Status.PENDING)
    assert starts.count() == 1, list(starts.values_list("reason", flat=True))
    assert AuditEvent.objects.filter(action="deployment.wake", target_id=str(d.pk)).count() == 1
    again = list(
        GpuLease.objects.filter(deployment=d, active=True).values_list("gpu_id", "memory_bytes")
    )
    assert again == leased  # the same GPU and bytes as before it scaled to zero
    waited_s = answers[0][2]
    ttft_ms = server_ttft_ms(answers[0][1])
    # the playground's TTFT includes the start it waited for (the answer itself is ~0.1 s)
    assert ttft_ms >= 0.5 * waited_s * 1000, (ttft_ms, waited_s)
    print(f"start on demand: first answer after {waited_s:.1f} s, server TTFT {ttft_ms:.0f} ms")
    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: state(d) == Status.STOPPED)


def test_vllm_sleeps_at_level_one_and_wakes_on_request(
    holding: None, host_worker: Any, model_root: Any, asgi_server: Any, operator: Any
) -> None:
    host = f"sleep{secrets.token_hex(3)}"
    worker = start_sim_worker(
        host_worker,
        host,
        model_root,
        SHARDBOARD_IDLE_CHECK_S="0.5",
        SHARDBOARD_VLLM_BIN=str(STANDIN),
        VLLM_STANDIN_WAKE_S="1.5",  # the wake the held request waits for
    )
    # The stand-in plays `vllm serve` on the GPUs the simulated backend reports, with sleep
    # mode (vLLM sleeps on CUDA only); on a host marked simulated the launch runs vLLM on the
    # CPU, which has none, so the row says real GPUs.
    Host.objects.filter(name=host).update(simulated=False)
    request = LaunchRequest(
        name="dozer", model_ref="local:0/tiny", host_name=host, engine="vllm", sleep_after_s=IDLE_S
    )
    d = deployment_create(user=operator, request=request)
    wait_for(lambda: state(d) in {Status.RUNNING, Status.FAILED}, timeout_s=200)
    assert d.status == Status.RUNNING, d.failure_reason
    assert "--enable-sleep-mode" in d.argv and d.env["VLLM_SERVER_DEV_MODE"] == "1"
    full = GpuLease.objects.get(deployment=d, active=True)

    try:
        wait_for(lambda: state(d) == Status.SLEEPING, timeout_s=60)
    except AssertionError:
        print(worker.log()[-3000:])
        raise
    # The row says sleeping before the engine is asked (a request meanwhile is held); the
    # leases shrink, with the audit row, once the engine has slept.
    slept = wait_for(
        lambda: AuditEvent.objects.filter(action="deployment.sleep", target_id=str(d.pk)).first()
    )
    assert httpx.get(f"{d.base_url}/is_sleeping", timeout=5).json() == {"is_sleeping": True}
    lease = GpuLease.objects.get(deployment=d, active=True)
    assert lease.asleep_bytes is not None and lease.asleep_bytes < full.memory_bytes
    assert slept.detail["level"] == 1 and "level 1: host RAM has" in slept.detail["level_why"]
    assert d.sleep_level == 1 and d.pid is not None  # the engine process lives on

    auth, url = bearer_for(operator), asgi_server.url
    with ThreadPoolExecutor(max_workers=3) as pool:
        asked = [pool.submit(ask, url, auth, "dozer", n) for n in range(3)]
        answers = [f.result(timeout=120) for f in asked]
    for status, text, waited_s in answers:
        assert status == 200 and text.endswith("data: [DONE]"), text[-300:]
        assert waited_s >= 1.0  # held through the stand-in's 1.5 s wake
    assert state(d) == Status.RUNNING and d.woke_at is not None and d.sleep_level is None
    wakes = AuditEvent.objects.filter(action="deployment.wake", target_id=str(d.pk))
    assert wakes.count() == 1 and wakes.get().detail["wake_s"] >= 1.5
    assert GpuLease.objects.get(deployment=d, active=True).asleep_bytes is None
    assert httpx.get(f"{d.base_url}/is_sleeping", timeout=5).json() == {"is_sleeping": False}
    print(
        f"wake: answers after {min(a[2] for a in answers):.2f}-{max(a[2] for a in answers):.2f} s "
        f"(the engine's wake {wakes.get().detail['wake_s']:.2f} s)"
    )

    # Idle again, it sleeps again; an engine that dies asleep fails (its freed bytes may be
    # leased to others: no automatic restart on memory it no longer holds).
    sleeps = AuditEvent.objects.filter(action="deployment.sleep", target_id=str(d.pk))
    wait_for(lambda: sleeps.count() == 2, timeout_s=60)  # asleep, leases shrunk
    assert state(d) == Status.SLEEPING and d.pgid is not None
    os.killpg(d.pgid, signal.SIGKILL)
    wait_for(lambda: state(d) == Status.FAILED, timeout_s=60)
    assert "died asleep" in d.failure_reason, d.failure_reason
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
