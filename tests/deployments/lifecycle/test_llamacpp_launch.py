"""A GGUF model launched on llama.cpp through the service (issue 31): the refusals before anything
is written, the plan turned into the row's snapshot and lease, and end to end with real parts
(a host worker on simulated GPUs, the llama-server scripts/llama.sh built, the /v1/ gateway on
a real server): running, answered through the OpenAI SDK and the playground's session stream,
stopped and gone."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.catalog.gguf_read import local_gguf_spec
from deployments.catalog.gguf_write import convert_demo
from deployments.handoff.llamacpp_snapshot import from_llamacpp_plan
from deployments.handoff.snapshot import planned_command
from deployments.lifecycle.forms import LaunchForm
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host
from playground import services as playground_services
from playground.gateway.admission import PLAYGROUND_HEADER
from playground.models import PlaygroundRun, Scope
from tests.support.gateway import session_for, sse_data
from tests.support.llama_server import server_binary
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "gguf-db"
WORKER_HOST = "gguf-worker"  # its own: the worker's GPU samples stay in Redis after the test
GIB = 1 << 30
GGUF_REF = "local:0/demo-Q8_0.gguf"


@pytest.fixture
def gguf_root(model_root: Path, tiny_model: Path) -> Path:
    """The model root of `model_root` (the tiny Llama at local:0/tiny) with the demo as GGUF."""
    convert_demo(tiny_model, model_root / "demo-Q8_0.gguf")
    return model_root


@pytest.fixture
def db_host(db: None) -> Host:
    host = Host.objects.create(
        name=HOST,
        queue=f"host.{HOST}",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    for index in range(2):
        Gpu.objects.create(
            host=host, index=index, uuid=f"GPU-gguf-{index}", name="sim", memory_total_bytes=8 * GIB
        )
    return host


def _request(
    model_ref: str = GGUF_REF, engine: str = "llamacpp", host: str = HOST, **kw: Any
) -> LaunchRequest:
    return LaunchRequest(name="gguf", model_ref=model_ref, host_name=host, engine=engine, **kw)


def _nothing_written() -> bool:
    return not (
        Deployment.objects.exists()
        or GpuLease.objects.exists()
        or AuditEvent.objects.filter(action="deployment.create").exists()
    )


@pytest.mark.parametrize(
    ("model_ref", "engine", "words"),
    [
        ("local:0/tiny", "llamacpp", r"is not a GGUF model; llama.cpp loads GGUF files only"),
        (GGUF_REF, "vllm", r"is a GGUF model; vllm does not load GGUF files here"),
        (GGUF_REF, "transformers", r"is a GGUF model; transformers does not load GGUF"),
        ("org/Model-GGUF:Q4_K_M", "vllm", r"Launch it on llamacpp"),
        (GGUF_REF, "sglang", r"Unknown engine 'sglang'"),
    ],
)
def test_engine_and_format_must_match_before_anything_is_written(
    db_host: Host, gguf_root: Path, operator: Any, model_ref: str, engine: str, words: str
) -> None:
    with pytest.raises(DeploymentError, match=words):
        deployment_create(user=operator, request=_request(model_ref, engine))
    assert _nothing_written()


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"replicas": 3}, r"3 llama.cpp replicas need a GPU each at least"),
        ({"replicas": None}, r"ask for a number"),
        ({"hosts": ("other",)}, r"runs on one host"),
        ({"plan_request": planning.PlanRequest(max_model_len=400_000_000)}, r"does not fit"),
    ],
)
def test_llamacpp_layouts_it_cannot_run_are_refused(
    db_host: Host, gguf_root: Path, operator: Any, kw: dict[str, Any], words: str
) -> None:
    with pytest.raises(DeploymentError, match=words):
        deployment_create(user=operator, request=_request(**kw))
    assert _nothing_written()


def test_the_form_offers_llamacpp(db_host: Host) -> None:
    data = {"name": "gguf", "model_ref": GGUF_REF, "host": HOST, "engine": "llamacpp"}
    form = LaunchForm({**data, "dtype": "auto", "kv_cache_dtype": "auto"})
    assert form.is_valid(), form.errors
    assert form.launch_request().engine == "llamacpp"


def test_a_gguf_launch_stores_the_llamacpp_plan_and_leases_its_bytes(
    db_host: Host, gguf_root: Path, operator: Any
) -> None:
    plan_request = planning.PlanRequest(max_model_len=300, max_num_seqs=2)
    d = deployment_create(user=operator, request=_request(plan_request=plan_request))
    assert d.engine == "llamacpp" and d.model_id == str(gguf_root / "demo-Q8_0.gguf")
    args = d.snapshot.engine_args
    assert (args.max_model_len, args.n_parallel) == (512, 2)  # -c padded to 256 cells
    assert (args.cache_type_k, args.flash_attn, args.split_mode) == ("f16", "on", "none")
    assert args.n_gpu_layers == 3  # the demo's 2 blocks and its output layer
    lease = GpuLease.objects.get(deployment=d, active=True)
    figures = d.snapshot.per_gpu[0]
    assert lease.memory_bytes == figures.total_bytes > figures.kv_cache_bytes > 0
    assert figures.non_torch_bytes == planning.LlamaCppRequest().gpu_overhead_bytes
    argv = d.planned_argv
    assert argv[argv.index("-c") + 1] == "512" and argv[argv.index("-np") + 1] == "2"
    audit = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert audit.detail["engine"] == "llamacpp" and audit.detail["reserved_bytes"] == [
        lease.memory_bytes
    ]


def test_a_two_gpu_llamacpp_plan_becomes_its_flags(tiny_model: Path, tmp_path: Path) -> None:
    """The bridge on an unequal what-if pair: the snapshot's command carries the plan's own
    -c/-np/-ngl/-sm/-ts/-ctk/-ctv/-fa/-ub, and each GPU's lease is its bytes plus the context."""
    spec = local_gguf_spec(convert_demo(tiny_model, tmp_path / "demo.gguf"))
    inventory = planning.one_machine(planning.parse_gpus("1x24GiB@pcie,1x16GiB@pcie"))
    request = planning.LlamaCppRequest(
        settings=planning.LlamaCppSettings(context_tokens=1000, slots=3, flash_attn=False)
    )
    # one GPU holds the demo (the best plan); the two-GPU split is an alternative, ranked lower
    plans = planning.plan_llamacpp(spec, inventory, request)
    assert len(plans[0].gpus) == 1
    plan = next(p for p in plans if len(p.gpus) == 2)
    assert plan.split_mode == "layer"
    snapshot = from_llamacpp_plan(plan, gpu_overhead_bytes=request.gpu_overhead_bytes)
    argv = planned_command(snapshot, "llamacpp", model="/m/demo.gguf")
    ts = ",".join(f"{c:g}" for c in plan.tensor_split)
    expected = {"-c": str(plan.context_cells), "-np": "3", "-ngl": str(plan.gpu_layers)}
    expected |= {"-sm": "layer", "-ts": ts, "-ctk": "f16", "-ctv": "f16", "-fa": "off"}
    expected |= {"-ub": str(plan.settings.ubatch)}
    assert {flag: argv[argv.index(flag) + 1] for flag in expected} == expected
    assert [g.total_bytes for g in snapshot.per_gpu] == [
        d.total_bytes + (request.gpu_overhead_bytes if d.layers else 0) for d in plan.devices
    ]
    assert snapshot.engine_args.main_gpu is None and "-mg" not in argv


# Greedy: the random-weight demo then always says the same thing. Sampled, it may emit a NUL
# byte token, which the playground's run row cannot store in PostgreSQL (playground.gateway.rows
# keeps the answer as is): a gateway bug, reported, not this launch's.
CHAT = {
    "model": "gguf",
    "messages": [{"role": "user", "content": "1 + 1 ="}],
    "max_tokens": 6,
    "temperature": 0,
}


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_launch_the_demo_gguf_chat_with_it_and_stop_it(
    host_worker: Any, gguf_root: Path, asgi_server: Any, operator: Any
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server built here: run scripts/llama.sh")
    worker = start_sim_worker(
        host_worker, WORKER_HOST, gguf_root, SHARDBOARD_LLAMA_SERVER_BIN=str(binary)
    )
    d = deployment_create(user=operator, request=_request(host=WORKER_HOST))
    assert d.engine == "llamacpp" and d.status == Status.PENDING
    try:
        wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    except AssertionError:
        print(worker.log())
        raise
    assert d.status == "running", d.failure_reason
    ready = d.events.get(new_status=Status.RUNNING)
    print(f"llama-server on the demo GGUF: {ready.reason}")
    spawned = AuditEvent.objects.get(action="deployment.spawn", target_id=str(d.pk))
    argv = spawned.detail["argv"]
    assert Path(argv[0]) == binary and argv[argv.index("-m") + 1] == d.model_id
    assert argv[argv.index("-ngl") + 1] == "0"  # simulated GPUs: llama-server on the CPU
    assert argv[argv.index("-c") + 1] == str(d.snapshot.engine_args.max_model_len)

    from openai import OpenAI

    _, raw = playground_services.token_create(user=operator, name="sdk")
    client = OpenAI(base_url=f"{asgi_server.url}/v1", api_key=raw, max_retries=0, timeout=60)
    answer = client.chat.completions.create(model="gguf", messages=CHAT["messages"], max_tokens=6)
    assert answer.choices[0].message.content  # random weights: some text, not a given one
    assert answer.usage is not None and answer.usage.completion_tokens > 0

    cookies, headers = session_for(operator)  # as the playground page calls /v1/
    headers[PLAYGROUND_HEADER] = "1"  # the page's own: its timings come back at the end
    with httpx.stream(
        "POST",
        f"{asgi_server.url}/v1/chat/completions",
        json={**CHAT, "stream": True},
        headers=headers,
        cookies=cookies,
        timeout=60,
    ) as streamed:
        assert streamed.status_code == 200
        text = streamed.read().decode()
    data = sse_data(text)
    assert data[-1] == "[DONE]" and "event: shardboard" in text, text[-500:]
    pieces = [json.loads(x)["choices"][0]["delta"].get("content") or "" for x in data[:-2]]
    assert "".join(pieces)
    metrics = json.loads(data[-2])
    assert metrics["status"] == "ok" and PlaygroundRun.objects.filter(pk=metrics["run_id"]).exists()

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: _status(d) == "stopped", interval_s=0.2)
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    with pytest.raises(ProcessLookupError):
        os.killpg(d.pgid, 0)
    statuses = list(d.events.values_list("new_status", flat=True))
    assert statuses == ["pending", "starting", "running", "stopping", "stopped"]


def _status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def test_the_launch_page_and_the_api_launch_a_gguf_on_llamacpp(
    db_host: Host, gguf_root: Path, operator: Any
) -> None:
    form = {"model_ref": GGUF_REF, "host": HOST, "engine": "llamacpp", "revision": ""}
    form |= {"dtype": "auto", "kv_cache_dtype": "auto", "replicas": "1", "placement": "spread"}
    ui = Client()
    ui.force_login(operator)
    r = ui.post("/deployments/new/", {**form, "name": "via-ui"})
    assert r.status_code == 302, [
        line for line in r.content.decode().splitlines() if "error" in line
    ]
    raw = playground_services.token_create(user=operator, name="ci", scopes=[Scope.DEPLOY])[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {**form, "name": "via-api", "replicas": 1}
    r = api.post("/api/v1/deployments", body, content_type="application/json")
    assert r.status_code == 201, r.content
    assert r.json()["engine"] == "llamacpp" and "-ngl" in r.json()["command"]
    engines = set(Deployment.objects.values_list("engine", flat=True))
    assert engines == {"llamacpp"} and Deployment.objects.count() == 2
    wrong = {**body, "name": "wrong", "engine": "vllm"}
    r = api.post("/api/v1/deployments", wrong, content_type="application/json")
    assert r.status_code == 409 and "is a GGUF model" in r.json()["message"], r.content
    assert not Deployment.objects.filter(name="wrong").exists()


def test_the_api_takes_llamacpps_own_settings(
    db_host: Host, gguf_root: Path, operator: Any
) -> None:
    raw = playground_services.token_create(user=operator, name="ci", scopes=[Scope.DEPLOY])[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"name": "tuned", "model_ref": GGUF_REF, "host": HOST, "engine": "llamacpp"}
    body |= {"cache_type_k": "f16", "flash_attn": "off", "gpus": [1]}
    r = api.post("/api/v1/deployments", body, content_type="application/json")
    assert r.status_code == 201, r.content
    d = Deployment.objects.get(name="tuned")
    assert (d.snapshot.engine_args.cache_type_k, d.snapshot.engine_args.flash_attn) == (
        "f16",
        "off",
    )
    assert [lease.gpu.index for lease in d.leases.filter(active=True)] == [1]
    assert d.planned_argv[d.planned_argv.index("-fa") + 1] == "off"
    # A quantized V cache without flash attention: the planner's own refusal, in llama.cpp's terms.
    quantized = {**body, "name": "quantized", "cache_type_v": "q8_0"}
    r = api.post("/api/v1/deployments", quantized, content_type="application/json")
    assert r.status_code == 409, r.content
    assert "a quantized V cache needs flash attention (-fa on)" in r.json()["message"]
    bad = {**body, "name": "bad", "cache_type_k": "q5_1"}
    r = api.post("/api/v1/deployments", bad, content_type="application/json")
    assert r.status_code == 422 and "cache_type_k" in r.content.decode(), r.content
    assert not Deployment.objects.filter(name__in=["quantized", "bad"]).exists()
