"""LoRA adapters on the real vLLM (its CPU build), through a real host worker and the real
gateway: load from the API, chat with the adapter through /v1/, its parent in /v1/models, the
audit naming it, an unload during a stream (the stream finishes), then 404; a Hub adapter
fetched by the host; bad adapters refused before the engine sees them; a load and an unload
whose message was lost, done by the host worker's sweeper; the adapters loaded again by a wake.

One engine for the module, started by hand (a whole launch is not what is tested here); each
test's deployment row points at it, written after the worker's start so its reconcile leaves
the row alone."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments.catalog.demo_adapter import make_demo_adapter
from deployments.engines import sleep
from deployments.handoff.snapshot import from_plan
from deployments.lifecycle import adapters
from deployments.models import (
    AdapterReplica,
    AdapterStatus,
    Deployment,
    DeploymentAdapter,
    Status,
)
from monitoring.models import Host
from playground import services
from playground.models import Scope
from tests.deployments.lora.test_lora_launch import lora_plan
from tests.support.gateway import sse_data
from tests.support.hubstub import HubStub
from tests.support.lora import (
    DEMO_BASE,
    RealVllm,
    adapter_repo,
    model_root_with_adapters,
    start_vllm,
    wait_state,
)
from tests.support.waiting import wait_for
from tests.support.workers import start_fetch_worker

pytestmark = [pytest.mark.engine, pytest.mark.worker]
HOST = "lora-host"
CHAT = {"messages": [{"role": "user", "content": "1 + 1 ="}], "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    return model_root_with_adapters(tmp_path_factory.mktemp("lora-root"), tiny_model)


@pytest.fixture(scope="module")
def engine(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealVllm]:
    # dev mode: the wake's routes (/wake_up, /collective_rpc), though the CPU build can't sleep
    logs = tmp_path_factory.mktemp("lora-vllm")
    started = start_vllm(root / DEMO_BASE, "demo", logs, env=sleep.DEV_MODE_ENV)
    yield started
    started.stop()


@pytest.fixture
def roots(root: Path, settings: Any) -> Path:
    """The model root, in the settings before the server forks."""
    settings.MODEL_ROOTS = [root]
    return root


@pytest.fixture
def setup(
    engine: RealVllm,
    roots: Path,
    hub: HubStub,
    hf_home: Path,
    host_worker: Any,
    asgi_server: Any,
    operator: Any,
) -> dict[str, Any]:
    """A host worker that fetches from the Hub stand-in, the gateway, a deployment row on the
    module's engine, and a deploy token and an infer token of its operator."""
    root = roots
    worker = start_fetch_worker(host_worker, HOST, root, hub.url, hf_home)
    # the row is written once the worker's reconcile is done: it would fail a running row
    # whose engine it did not start
    wait_for(lambda: "reconciled engines" in worker.log())
    plan = from_plan(lora_plan(), model_ref=f"local:0/{DEMO_BASE}").to_json()
    d = Deployment.objects.create(
        name="demo",
        model_id=str(root / DEMO_BASE),
        engine="vllm",
        host=Host.objects.get(name=HOST),
        plan=plan,
        status="running",
        bind_host="127.0.0.1",
        port=engine.port,
        created_by=operator,
    )
    deploy = services.token_create(user=operator, name="ops", scopes=[Scope.DEPLOY, Scope.READ])
    infer = services.token_create(user=operator, name="app", scopes=[Scope.INFER])
    return {
        "d": d,
        "worker": worker,
        "url": asgi_server.url,
        "api": {"Authorization": f"Bearer {deploy[1]}"},
        "v1": {"Authorization": f"Bearer {infer[1]}"},
    }


def status_of(name: str) -> str:
    row = DeploymentAdapter.objects.filter(name=name).order_by("-pk").first()
    return row.status if row else ""


def chat(s: dict[str, Any], model: str, **extra: Any) -> httpx.Response:
    body = {**CHAT, "model": model, **extra}
    return httpx.post(f"{s['url']}/v1/chat/completions", json=body, headers=s["v1"], timeout=60)


@pytest.mark.timeout(900)  # the module's vLLM start (45 s quiet, minutes on loaded cores) is in it
def test_load_chat_unload_during_a_stream_then_404(setup: dict[str, Any], engine: RealVllm):
    s, d = setup, setup["d"]
    api = f"{s['url']}/api/v1/deployments/{d.pk}/adapters"
    loaded = httpx.post(
        api, json={"name": "good", "source": "local:0/adapters/good"}, headers=s["api"], timeout=30
    )
    assert loaded.status_code == 202, loaded.text
    assert loaded.json()["status"] == "loading" and loaded.json()["parent"] == "demo"
    wait_state(lambda: status_of("good"), AdapterStatus.LOADED)

    models = httpx.get(f"{s['url']}/v1/models", headers=s["v1"], timeout=30).json()["data"]
    assert {"id": "good", "parent": "demo"}.items() <= next(
        m for m in models if m["id"] == "good"
    ).items()
    base, tuned = chat(s, "demo"), chat(s, "good")
    assert base.status_code == tuned.status_code == 200, tuned.text
    assert tuned.json()["model"] == "good"
    assert tuned.json()["choices"][0]["message"] != base.json()["choices"][0]["message"]
    audits = AuditEvent.objects.filter(action="playground.request", detail__adapter="good")
    row = wait_for(audits.first)  # written after the answer, off the request's path
    assert row.detail["deployment"] == "demo" and row.detail["status"] == "ok"

    lines: list[str] = []
    body = {**CHAT, "model": "good", "max_tokens": 200, "ignore_eos": True, "stream": True}

    def stream() -> None:
        url = f"{s['url']}/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=s["v1"], timeout=120) as answer:
            lines.extend(answer.iter_lines())

    reader = threading.Thread(target=stream)
    reader.start()
    wait_state(lambda: len(lines) >= 3, True)
    gone = httpx.delete(f"{api}/good", headers=s["api"], timeout=30)
    assert gone.status_code == 202 and gone.json()["status"] == "unloading"
    reader.join(120)
    data = sse_data("\n".join(lines))
    assert data[-1] == "[DONE]" and not any('"error"' in x for x in data), data[-3:]
    ends = [c.get("finish_reason") for x in data[:-1] for c in json.loads(x)["choices"]]
    assert "length" in ends and len(ends) > 150  # ran to its max_tokens, not cut

    wait_state(lambda: status_of("good"), AdapterStatus.UNLOADED)
    after = chat(s, "good")
    assert after.status_code == 404
    assert after.json()["error"]["type"] == "model_not_found"
    names = [m["id"] for m in httpx.get(f"{s['url']}/v1/models", headers=s["v1"]).json()["data"]]
    assert "good" not in names and "demo" in names
    assert chat(s, "nope").status_code == 404
    assert "good" not in httpx.get(f"{engine.base_url}/v1/models").text


@pytest.mark.timeout(600)  # the module's vLLM start is in it when this test runs alone
def test_a_hub_adapter_is_fetched_by_the_host_and_bad_ones_never_reach_the_engine(
    setup: dict[str, Any], engine: RealVllm, hub: HubStub, tmp_path: Path
) -> None:
    s, d = setup, setup["d"]
    folder = make_demo_adapter(tmp_path / "hub", seed=5, base_model=DEMO_BASE)
    hub.add_repo(adapter_repo("sbtest/demo-lora", folder))
    api = f"{s['url']}/api/v1/deployments/{d.pk}/adapters"
    for source, words in [
        ("local:0/adapters/wide", "q_proj: the adapter's lora_B is 256 × 8"),
        ("local:0/adapters/rank16", "its rank 16 is over this deployment's max_lora_rank 8"),
        ("local:0/../../etc", "contains '..'"),
    ]:
        refused = httpx.post(api, json={"name": "bad", "source": source}, headers=s["api"])
        assert refused.status_code == 409 and words in refused.json()["message"], refused.text
    assert DeploymentAdapter.objects.count() == 0
    assert "bad" not in httpx.get(f"{engine.base_url}/v1/models").text

    loaded = httpx.post(
        api, json={"name": "hubbed", "source": "sbtest/demo-lora"}, headers=s["api"], timeout=30
    )
    assert loaded.status_code == 202, loaded.text
    assert len(loaded.json()["revision"]) == 40  # pinned to the commit the web read
    wait_state(lambda: status_of("hubbed"), AdapterStatus.LOADED)
    assert chat(s, "hubbed").status_code == 200
    fetched = [r.path for r in hub.requests if r.path.endswith("adapter_model.safetensors")]
    assert any(r.method == "GET" and not r.range for r in hub.requests if r.path in fetched)
    gone = httpx.delete(f"{api}/hubbed", headers=s["api"], timeout=30)
    assert gone.status_code == 202
    wait_state(lambda: status_of("hubbed"), AdapterStatus.UNLOADED)


def engine_models(engine: RealVllm) -> list[str]:
    return [m["id"] for m in httpx.get(f"{engine.base_url}/v1/models").json()["data"]]


def placement_status(pk: int) -> str:
    return str(AdapterReplica.objects.get(pk=pk).status)


def age(placement: AdapterReplica) -> None:
    """Older than the sweeper's cutoff (SHARDBOARD_SWEEP_AFTER_S, 30 s by default)."""
    then = timezone.now() - timedelta(hours=1)
    AdapterReplica.objects.filter(pk=placement.pk).update(updated_at=then)


@pytest.mark.timeout(600)  # the module's vLLM start is in it when this test runs alone
def test_the_sweeper_resends_a_load_and_an_unload_whose_message_was_lost(
    setup: dict[str, Any], engine: RealVllm, operator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = setup["d"]
    sent: list[str] = []

    def lost(task: str, args: list[int], host_name: str) -> bool:
        sent.append(task)
        return False  # the broker took nothing: the rows are committed, no worker was told

    monkeypatch.setattr(adapters, "send", lost)
    adapter = adapters.adapter_load(
        user=operator, deployment=d, name="swept", source="local:0/adapters/other"
    )
    assert sent == [adapters.LOAD_TASK]
    p = AdapterReplica.objects.get(adapter=adapter)
    assert p.status == AdapterStatus.LOADING and "swept" not in engine_models(engine)
    age(p)
    worker = setup["worker"]
    wait_state(lambda: placement_status(p.pk), AdapterStatus.LOADED)
    assert "swept" in engine_models(engine)
    assert status_of("swept") == AdapterStatus.LOADED
    assert "adapter load resent" in worker.log()

    adapters.adapter_unload(user=operator, deployment=d, name="swept")
    assert sent == [adapters.LOAD_TASK, adapters.UNLOAD_TASK]
    assert placement_status(p.pk) == AdapterStatus.LOADED  # the engine still holds it
    age(p)
    wait_state(lambda: placement_status(p.pk), AdapterStatus.UNLOADED)
    assert "swept" not in engine_models(engine)
    assert status_of("swept") == AdapterStatus.UNLOADED
    assert DeploymentAdapter.objects.get(pk=adapter.pk).unloaded_at is not None
    assert "adapter unload resent" in worker.log()


@pytest.mark.timeout(600)  # the module's vLLM start is in it when this test runs alone
def test_a_request_wakes_a_sleeping_replica_and_its_adapters_load_before_it_answers(
    setup: dict[str, Any], engine: RealVllm
) -> None:
    """The sleep is stood in (vLLM's CPU build refuses sleep mode): the row marked asleep at
    level 2 and the adapter taken off the engine, as a level-2 sleep drops it. The rest is
    real: a request for the adapter through the gateway, the host worker's wake (the engine's
    /wake_up and reload_weights), the adapter loaded again before the replica runs."""
    s, d = setup, setup["d"]
    api = f"{s['url']}/api/v1/deployments/{d.pk}/adapters"
    body = {"name": "woken", "source": "local:0/adapters/good"}
    assert httpx.post(api, json=body, headers=s["api"], timeout=30).status_code == 202
    wait_state(lambda: status_of("woken"), AdapterStatus.LOADED)
    Deployment.objects.filter(pk=d.pk).update(
        status=Status.SLEEPING, sleep_level=2, slept_at=timezone.now()
    )
    dropped = httpx.post(f"{engine.base_url}/v1/unload_lora_adapter", json={"lora_name": "woken"})
    assert dropped.status_code == 200, dropped.text
    assert "woken" not in engine_models(engine)

    answer = chat(s, "woken")  # held by the gateway while the replica wakes
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "woken"
    assert "woken" in engine_models(engine)
    d.refresh_from_db()
    assert d.status == Status.RUNNING and d.sleep_level is None
    assert AuditEvent.objects.filter(action="deployment.wake", detail__level=2).exists()
    assert list(
        AdapterReplica.objects.filter(adapter__name="woken").values_list("status", flat=True)
    ) == [AdapterStatus.LOADED]
    gone = httpx.delete(f"{api}/woken", headers=s["api"], timeout=30)
    assert gone.status_code == 202
    wait_state(lambda: status_of("woken"), AdapterStatus.UNLOADED)
