"""llama-server's own per-GPU buffers on the detail page, read from its shipped log in Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from deployments.handoff.snapshot import EngineArgs, GpuFigures, GpuSlot, PlanSnapshot
from deployments.lifecycle.engine_memory import engine_memory_table
from deployments.live import enginelog
from deployments.models import Deployment, Engine, GpuLease, Status
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

GIB = 1 << 30
# As llama-server prints them at -lv 4 on two GPUs (reference llamacpp.md §3.3).
START = [
    "load_tensors:        CUDA0 model buffer size =  1024.00 MiB",
    "load_tensors:        CUDA1 model buffer size =  2048.00 MiB",
    "load_tensors:   CPU_Mapped model buffer size =   256.00 MiB",
    "llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB",
    "llama_kv_cache:      CUDA1 KV buffer size =   512.00 MiB",
    "sched_reserve:       CUDA0 compute buffer size =   512.00 MiB",
    "sched_reserve:       CUDA1 compute buffer size =   512.00 MiB",
]


@pytest.fixture
def running(operator: Any) -> Iterator[Deployment]:
    host = sim_host("llamamem", 4)
    plan = PlanSnapshot(
        engine_args=EngineArgs(max_model_len=4096, tensor_split=(1.0, 2.0)),
        gpus=((GpuSlot("", 3), GpuSlot("", 1)),),  # CUDA0 is GPU 3
        per_gpu=(GpuFigures(total_bytes=2 * GIB), GpuFigures(total_bytes=3 * GIB)),
    )
    d = Deployment.objects.create(
        name="gguf",
        model_id="/models/m.gguf",
        engine=Engine.LLAMACPP,
        host=host,
        status=Status.RUNNING,
        plan=plan.to_json(),
        created_by=operator,
    )
    for index in (1, 3):
        GpuLease.objects.create(deployment=d, gpu=host.gpus.get(index=index), memory_bytes=GIB)
    enginelog.client().delete(enginelog.stream_key(d.pk))
    yield d
    enginelog.client().delete(enginelog.stream_key(d.pk))


def test_engine_buffers_beside_the_plan_in_visible_order(running: Deployment) -> None:
    for line in START:
        enginelog.client().xadd(enginelog.stream_key(running.pk), {"l": line})
    table = engine_memory_table(running)
    assert table is not None and table["note"] == ""
    assert [(r["gpu"], r["weights"], r["measured"], r["difference"]) for r in table["rows"]] == [
        (3, "1.00 GiB", "2.00 GiB", "+0.00 GiB"),
        (1, "2.00 GiB", "3.00 GiB", "+0.00 GiB"),
    ]
    assert table["host"] == {"weights": "0.25 GiB", "kv": "0.00 GiB", "total": "0.25 GiB"}


def test_the_detail_page_shows_them(running: Deployment, client: Client, operator: Any) -> None:
    for line in START:
        enginelog.client().xadd(enginelog.stream_key(running.pk), {"l": line})
    client.force_login(operator)
    page = client.get(reverse("deployment_detail", args=[running.pk])).content.decode()
    assert 'id="engine-memory"' in page
    assert '<tr data-gpu="3"><td>3</td><td class="num">2.00 GiB</td>' in page


def test_no_buffer_lines_say_so(running: Deployment) -> None:
    table = engine_memory_table(running)
    assert table is not None
    assert "not in its recent log" in table["note"]
    assert [r["measured"] for r in table["rows"]] == ["—", "—"]


def test_other_engines_have_none(running: Deployment) -> None:
    Deployment.objects.filter(pk=running.pk).update(engine=Engine.VLLM)
    running.refresh_from_db()
    assert engine_memory_table(running) is None
