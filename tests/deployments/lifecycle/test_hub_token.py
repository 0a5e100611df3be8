"""A launcher's own Hub token: a gated model is refused without one, and with one the engine
gets it as HF_TOKEN, while the row, the audit trail, the argv, the stored env and the logs
never show it. The Hub is the local stand-in; the engine a stand-in `vllm serve` process."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from controlpanel.celery import host_queue
from controlpanel.models import AuditEvent
from deployments.host import engine_control as runner
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host
from tests.support.catalog import LLAMA, QWEN, TOKEN
from tests.support.hubstub import HubStub
from tests.support.processes import ROOT

pytestmark = pytest.mark.django_db(transaction=True)
STUB_ENGINE = ROOT / "tests" / "support" / "stub_engine.py"
HOST = "tokenhost"
GIB = 1 << 30


@pytest.fixture
def gpu_host(db: None) -> Host:
    """A real-GPU host row (not simulated: it serves Hub models with vLLM)."""
    host = Host.objects.create(
        name=HOST, queue=host_queue(HOST), backend="nvml", last_heartbeat=timezone.now()
    )
    Gpu.objects.create(host=host, index=0, uuid="GPU-0", name="H100", memory_total_bytes=80 * GIB)
    yield host
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete(host_queue(HOST))  # the tasks enqueued for a worker this test does not run
    client.close()


def request_for(model: str, name: str = "gated") -> LaunchRequest:
    return LaunchRequest(name=name, model_ref=model, host_name=HOST, engine="vllm")


def test_gated_model_without_token_is_refused_first(
    hub: HubStub,
    gpu_host: Host,
    operator: Any,
) -> None:
    with pytest.raises(DeploymentError, match=r"is gated.*Set your own Hub token"):
        deployment_create(user=operator, request=request_for(LLAMA))
    with pytest.raises(DeploymentError, match="rejected the token"):
        deployment_create(user=operator, request=request_for(LLAMA), hub_token="hf_wrong_token")
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()


def test_own_token_reaches_the_engine_only(
    hub: HubStub,
    gpu_host: Host,
    operator: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    settings: Any,
) -> None:
    settings.SHARDBOARD_FETCH_WEIGHTS = False  # the engine downloads: it needs the token
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("SHARDBOARD_VLLM_BIN", str(STUB_ENGINE))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # scripts/test.sh exports it as "0"
    d = deployment_create(user=operator, request=request_for(LLAMA), hub_token=TOKEN)
    assert d.hub_token_sealed and TOKEN not in d.hub_token_sealed
    assert runner.launch(d.pk).get("running") == d.pk  # this process plays the host worker
    d.refresh_from_db()
    engine_env = httpx.get(f"{d.base_url}/stub/env", timeout=5).json()
    assert engine_env["HF_TOKEN"] == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert engine_env["HF_HUB_OFFLINE"] is None  # a Hub model downloads its weights
    assert d.env["HF_TOKEN"] == "***"
    assert TOKEN not in " ".join(d.argv) and TOKEN not in str(d.plan)
    deployment_stop(user=operator, deployment=d)
    assert runner.stop(d.pk) == {"stopped": d.pk}
    d.refresh_from_db()
    assert d.status == Status.STOPPED and d.hub_token_sealed == ""  # wiped at the end
    rows = AuditEvent.objects.filter(target_id=str(d.pk))
    assert {"deployment.create", "deployment.spawn", "deployment.stop"} <= {r.action for r in rows}
    assert not any(TOKEN in str(row.__dict__) for row in rows)
    assert TOKEN not in caplog.text
    assert TOKEN not in Path(d.log_path).read_text()


def test_ungated_hub_model_gets_no_token(
    hub: HubStub,
    gpu_host: Host,
    operator: Any,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.SHARDBOARD_FETCH_WEIGHTS = False  # the stand-in serves no 7B of weights
    monkeypatch.setenv("SHARDBOARD_VLLM_BIN", str(STUB_ENGINE))
    d = deployment_create(user=operator, request=request_for(QWEN, "open"))
    assert d.hub_token_sealed == ""
    assert runner.launch(d.pk).get("running") == d.pk
    d.refresh_from_db()
    assert httpx.get(f"{d.base_url}/stub/env", timeout=5).json()["HF_TOKEN"] is None
    deployment_stop(user=operator, deployment=d)
    runner.stop(d.pk)


def test_launch_form_uses_the_session_token(
    hub: HubStub,
    gpu_host: Host,
    operator: Any,
) -> None:
    client = Client()
    client.force_login(operator)
    form = {"name": "viaform", "model_ref": LLAMA, "host": HOST, "engine": "vllm"}
    form |= {"dtype": "auto", "kv_cache_dtype": "auto"}
    refused = client.post("/deployments/new/", form)
    assert refused.status_code == 200 and "is gated" in refused.content.decode()
    assert not Deployment.objects.exists()
    client.post("/models/token/", {"token": TOKEN, "action": "set"})
    launched = client.post("/deployments/new/", form)
    d = Deployment.objects.get(name="viaform")
    assert launched.status_code == 302 and launched["Location"] == f"/deployments/{d.pk}/"
    assert d.hub_token_sealed and TOKEN not in launched.content.decode()
