"""One deployment of the real vLLM (its CPU build) on a host's CPU device at TP 2 over its two
cores, through a real host worker and the real gateway, from its launch to its engine core
killed mid-stream: the plan's KV tokens against vLLM's logged figure, the start's steps and
figures as the worker recorded them from vLLM's own log, a playground stream, /v1/ chat,
completions, Responses and Messages with the OpenAI and Anthropic SDKs; then the stream in
flight ends with vLLM's error event, the deployment says why in vLLM's words, its lease is
freed and none of its processes is left. (Launch, answer and stop on vLLM in place of simulated
GPUs: test_lifecycle.test_launch_answer_stop.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease, LaunchPhase, StartObservation, Status
from monitoring.models import CPU_INDEX, Gpu
from playground import services
from tests.support.gateway import session_for, sse_data
from tests.support.vllm_engine import LOGGED_KV_TOKENS
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(600)]  # a vLLM start
HOST = "vllmhost"
USER = [{"role": "user", "content": "1 + 1 ="}]
KV_BYTES = 128 << 20
# The demo model in bfloat16; each TP rank holds its one KV head (test_vllm_engine.py).
KV_BYTES_PER_TOKEN = 2 * 2 * 1 * 64 * 2


def running(d: Deployment, worker: Any) -> Deployment:
    try:  # a real vLLM start: 30 s alone, minutes beside other engines
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 360)
    except AssertionError:
        print(worker.log())
        raise
    d.refresh_from_db()
    assert d.status == Status.RUNNING, d.failure_reason
    return d


def group(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def check_the_start(d: Deployment) -> None:
    steps = LaunchPhase.objects.filter(deployment=d).order_by("started_at", "id")
    assert list(steps.values_list("phase", flat=True)) == [
        "loading",
        "profiling",
        "warming_up",
        "ready",
    ]
    logged = LOGGED_KV_TOKENS.search(Path(d.log_path).read_text(errors="replace"))
    assert logged, "vLLM logged no CPU KV cache size"
    seen = StartObservation.objects.get(deployment=d)
    assert (seen.engine, seen.engine_version, seen.tensor_parallel_size) == ("vllm", "0.32.0", 2)
    assert seen.measured_kv_tokens == int(logged["n"].replace(",", ""))  # as vLLM logged it
    assert seen.planned_kv_tokens == d.snapshot.kv_cache_tokens == seen.measured_kv_tokens
    assert seen.measured_kv_tokens == KV_BYTES // KV_BYTES_PER_TOKEN


def check_a_playground_stream(url: str, operator: Any) -> None:
    """As the playground page calls /v1/: the session's cookie and CSRF header."""
    cookies, headers = session_for(operator)
    body = {"model": "real", "messages": USER, "max_tokens": 8, "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, headers=headers,
                      cookies=cookies, timeout=120) as answer:  # fmt: skip
        assert answer.status_code == 200
        data = sse_data(answer.read().decode())
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert sum(bool(c["choices"] and c["choices"][0]["delta"].get("content")) for c in chunks)


def check_the_sdks(url: str, operator: Any) -> None:
    from anthropic import Anthropic
    from openai import OpenAI

    raw = services.token_create(user=operator, name="sdk")[1]
    openai = OpenAI(base_url=f"{url}/v1", api_key=raw, max_retries=0)
    chat = openai.chat.completions.create(model="real", messages=USER, max_tokens=4)
    assert chat.system_fingerprint and chat.system_fingerprint.startswith("vllm-0.32.0")
    assert chat.usage is not None and 1 <= chat.usage.completion_tokens <= 4
    chunks = list(
        openai.completions.create(model="real", prompt="1 + 1 =", max_tokens=3, stream=True)
    )
    assert chunks and all(c.model == "real" for c in chunks)
    response = openai.responses.create(model="real", input="1 + 1 =", max_output_tokens=3)
    assert response.usage is not None and 1 <= response.usage.output_tokens <= 3
    events = list(
        openai.responses.create(model="real", input="hi", max_output_tokens=3, stream=True)
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    claude = Anthropic(base_url=url, api_key=raw, max_retries=0)
    message = claude.messages.create(model="real", max_tokens=3, messages=USER)
    assert message.usage.input_tokens >= 1 and 1 <= message.usage.output_tokens <= 3
    with claude.messages.stream(model="real", max_tokens=3, messages=USER) as stream:
        list(stream.text_stream)
        final = stream.get_final_message()
    assert 1 <= final.usage.output_tokens <= 3 and final.stop_reason == "max_tokens"
    assert claude.messages.count_tokens(model="real", messages=USER).input_tokens >= 1


def test_a_vllm_deployment_from_its_launch_to_its_engine_core_killed_mid_stream(
    host_worker: Any, model_root: Path, asgi_server: Any, operator: Any
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root)
    wait_for(lambda: Gpu.objects.filter(host__name=HOST, index=CPU_INDEX).exists())
    on_cpu = planning.PlanRequest(device="cpu", kv_cache_bytes=KV_BYTES, enforce_eager=True,
                                  tensor_parallel_size=2)  # fmt: skip
    request = LaunchRequest(name="real", model_ref="local:0/tiny", host_name=HOST, engine="vllm",
                            auto_restart=False, plan_request=on_cpu)  # fmt: skip
    d = running(deployment_create(user=operator, request=request), worker)
    assert d.engine_device == "cpu" and d.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert d.argv[d.argv.index("--tensor-parallel-size") + 1] == "2"
    check_the_start(d)
    check_a_playground_stream(asgi_server.url, operator)
    check_the_sdks(asgi_server.url, operator)
    rows = AuditEvent.objects.filter(action="playground.request", detail__status="ok")
    wait_for(lambda: rows.count() == 8)  # the playground's, then the SDKs' seven

    core = next(p for p in group(d.pgid) if "EngineCore" in p.name())
    body = {"model": "real", "prompt": "1 + 1 =", "max_tokens": 400, "ignore_eos": True}
    auth = {"Authorization": f"Bearer {services.token_create(user=operator, name='long')[1]}"}
    with httpx.stream("POST", f"{asgi_server.url}/v1/completions", json={**body, "stream": True},
                      headers=auth, timeout=60) as answer:  # fmt: skip
        lines = answer.iter_lines()
        first = next(line for line in lines if line.startswith("data: {"))
        core.kill()
        rest = [line[6:] for line in lines if line.startswith("data: ")]
    assert json.loads(first[6:])["choices"]
    assert any("error" in json.loads(r) for r in rest if r != "[DONE]"), rest[-3:]
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == Status.FAILED, 90)
    d.refresh_from_db()
    assert d.diagnosis["code"] == "engine_core_died", d.failure_reason
    assert "engine core exited unexpectedly" in d.diagnosis["matched_line"]  # vLLM's line
    assert "engine core process died" in d.failure_reason
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: not group(d.pgid), 60)  # API server, engine core and workers all gone
