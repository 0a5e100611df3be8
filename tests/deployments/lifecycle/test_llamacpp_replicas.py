"""More than one replica on llama.cpp (issue 31): each replica planned and leased like the
first on GPUs of its own, a llama-server process of its own (own port, own process group) and
routed by the gateway under the deployment's one name; scaled up and down like other engines."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.catalog.gguf_plan import GgufOptions
from deployments.catalog.gguf_write import convert_demo
from deployments.lifecycle.relaunch import deployment_relaunch
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status
from monitoring.models import Gpu, Host
from tests.support.gateway import bearer_for
from tests.support.gguf_models import BigLlama, big_llama_header
from tests.support.llama_server import server_binary
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

HOST = "gguf-reps-db"
WORKER_HOST = "gguf-reps-worker"
GIB = 1 << 30
GGUF_REF = "local:0/demo-Q8_0.gguf"


@pytest.fixture
def gguf_root(model_root: Path, tiny_model: Path) -> Path:
    convert_demo(tiny_model, model_root / "demo-Q8_0.gguf")
    return model_root


def _host(name: str, gibs: tuple[int, ...], *, simulated: bool) -> Host:
    host = Host.objects.create(
        name=name,
        queue=f"host.{name}",
        backend="simulated" if simulated else "nvml",
        simulated=simulated,
        last_heartbeat=timezone.now(),
    )
    for index, gib in enumerate(gibs):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-{name}-{index}",
            name="g",
            memory_total_bytes=gib * GIB,
        )
    return host


def _launch(user: Any, replicas: int | None, host: str = HOST) -> Deployment:
    request = LaunchRequest(
        name="llamas", model_ref=GGUF_REF, host_name=host, engine="llamacpp", replicas=replicas
    )
    return deployment_create(user=user, request=request)


def _leases(row: Deployment) -> dict[int, int]:
    return dict(row.leases.filter(active=True).values_list("gpu__index", "memory_bytes"))


@pytest.mark.django_db
def test_each_replica_is_planned_and_leased_like_the_first(gguf_root: Path, operator: Any) -> None:
    _host(HOST, (8, 8, 8), simulated=True)
    d = _launch(operator, 3)
    rows = list(d.group().order_by("replica_index"))
    assert [r.replica_index for r in rows] == [1, 2, 3] and {r.engine for r in rows} == {"llamacpp"}
    leases = [_leases(r) for r in rows]
    assert [list(lease) for lease in leases] == [[0], [1], [2]]  # a simulated GPU each: the CPU
    assert len({b for lease in leases for b in lease.values()}) == 1
    assert {r.planned_argv for r in rows} == {rows[0].planned_argv}  # one command
    audit = AuditEvent.objects.get(action="deployment.create")
    assert audit.detail["replicas"] == 3 and audit.detail["replica_gpus"] == [[0], [1], [2]]


@pytest.mark.django_db
def test_replicas_on_a_real_host_split_its_gpus_in_equal_groups(
    gguf_root: Path, operator: Any
) -> None:
    _host(HOST, (24, 16, 24, 16), simulated=False)
    d = _launch(operator, 2)
    rows = list(d.group().order_by("replica_index"))
    assert [sorted(_leases(r)) for r in rows] == [[0, 1], [2, 3]]
    args = [r.snapshot.engine_args for r in rows]
    assert args[0].split_mode == "layer" and args[0].tensor_split == args[1].tensor_split
    assert len(set(args[0].tensor_split)) == 2  # unequal cards, unequal -ts, same on both
    assert list(_leases(rows[0]).values()) == list(_leases(rows[1]).values())


@pytest.mark.django_db
def test_replica_groups_of_unlike_gpus_are_refused(gguf_root: Path, operator: Any) -> None:
    """A 70B-shaped Q4_K_M over pairs of unequal cards, the second pair the other way round:
    its -ts would be the first's reversed, so it is refused rather than run with the wrong one."""
    path = gguf_root / "big-Q4_K_M.gguf"
    _, size = big_llama_header(path, BigLlama())
    os.truncate(path, size)  # the real header, the data a hole
    _host(HOST, (32, 24, 24, 32), simulated=False)
    request = LaunchRequest(
        name="llamas",
        model_ref="local:0/big-Q4_K_M.gguf",
        host_name=HOST,
        engine="llamacpp",
        replicas=2,
        plan_request=planning.PlanRequest(max_model_len=4096),
    )
    with pytest.raises(DeploymentError, match=r"Replica 2 would need another llama.cpp command"):
        deployment_create(user=operator, request=request)
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("replicas", "words"),
    [
        (3, r"3 llama.cpp replicas need a GPU each at least; gguf-reps-db has 2 free"),
        (None, "a number"),
    ],
)
def test_replicas_the_host_cannot_hold_are_refused(
    gguf_root: Path, operator: Any, replicas: int | None, words: str
) -> None:
    _host(HOST, (8, 8), simulated=True)
    with pytest.raises(DeploymentError, match=words):
        _launch(operator, replicas)
    assert not Deployment.objects.exists()


@pytest.mark.django_db
def test_scaling_adds_replicas_like_the_first_and_removes_them(
    gguf_root: Path, operator: Any
) -> None:
    _host(HOST, (8, 8, 8), simulated=True)
    d = _launch(operator, 1)
    Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
    deployment_scale(user=operator, deployment=d, replicas=3)
    rows = list(d.group().order_by("replica_index"))
    assert [r.replica_index for r in rows] == [1, 2, 3]
    assert [_leases(r) for r in rows[1:]] == [{1: _leases(d)[0]}, {2: _leases(d)[0]}]
    assert rows[2].planned_argv == d.planned_argv and rows[2].model_id == d.model_id
    Deployment.objects.filter(pk__in=[r.pk for r in rows]).update(status=Status.RUNNING)
    with pytest.raises(DeploymentError, match=r"each needs 1 GPU\(s\) of gguf-reps-db"):
        deployment_scale(user=operator, deployment=d, replicas=4)
    deployment_scale(user=operator, deployment=d, replicas=1)
    after = Deployment.objects.filter(pk__in=[r.pk for r in rows]).order_by("replica_index")
    assert [(r.status, r.retired) for r in after] == [
        ("running", False),
        ("stopping", True),
        ("stopping", True),
    ]


PROMPTS = [f"{n} + {n} =" for n in range(24)]


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_two_llama_servers_answer_under_one_name_and_stop(
    host_worker: Any, gguf_root: Path, asgi_server: Any, operator: Any
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server built here: run scripts/llama.sh")
    worker = start_sim_worker(
        host_worker, WORKER_HOST, gguf_root, SHARDBOARD_LLAMA_SERVER_BIN=str(binary)
    )
    d = _launch(operator, 2, host=WORKER_HOST)
    rows = list(d.group().order_by("replica_index"))
    try:
        wait_for(
            lambda: all(s in ("running", "failed") for s in _statuses(rows)),
            timeout_s=120,
            interval_s=0.5,
        )
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    assert _statuses(rows) == ["running", "running"], [r.failure_reason for r in rows]
    assert rows[0].port != rows[1].port and rows[0].pgid != rows[1].pgid

    # The gateway spreads concurrent requests over both engines under the one name.
    def ask(prompt: str) -> None:
        body = {"model": "llamas", "prompt": prompt, "max_tokens": 4, "temperature": 0}
        r = httpx.post(
            f"{asgi_server.url}/v1/completions",
            json=body,
            headers=bearer_for(operator),
            timeout=60,
        )
        assert r.status_code == 200, r.text

    def served() -> list[float]:
        return [_decoded(r) for r in rows]

    for start in range(0, len(PROMPTS), 4):
        threads = [threading.Thread(target=ask, args=(p,)) for p in PROMPTS[start : start + 4]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
        if all(served()):
            break
    assert all(served()), served()  # each llama-server generated tokens

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: _statuses(rows) == ["stopped", "stopped"], interval_s=0.2)
    assert not GpuLease.objects.filter(deployment__in=rows, active=True).exists()


def _decoded(row: Deployment) -> float:
    """llama-server's own count of tokens it generated (its /metrics, --metrics is on)."""
    key = row.engine_api_key()
    text = httpx.get(
        f"{row.base_url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).text
    found = re.search(r"^llamacpp:tokens_predicted_total (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def _statuses(rows: list[Deployment]) -> list[str]:
    for r in rows:
        r.refresh_from_db()
    return [r.status for r in rows]


@pytest.mark.django_db
def test_a_relaunch_keeps_the_llamacpp_settings_and_replicas(
    gguf_root: Path, operator: Any
) -> None:
    _host(HOST, (8, 8), simulated=True)
    options = GgufOptions(context_tokens=1000, slots=3, flash_attn=False)  # the demo: head dim 16
    request = LaunchRequest(
        name="llamas",
        model_ref=GGUF_REF,
        host_name=HOST,
        engine="llamacpp",
        replicas=2,
        llamacpp=options,
    )
    d = deployment_create(user=operator, request=request)
    Deployment.objects.filter(name="llamas").update(status=Status.STOPPED)
    GpuLease.objects.update(active=False)
    d.refresh_from_db()
    again = deployment_relaunch(user=operator, deployment=d)
    assert again.pk != d.pk and again.group().count() == 2
    args = again.snapshot.engine_args
    assert (args.flash_attn, args.n_parallel, args.max_model_len) == ("off", 3, 1024)
    assert again.planned_argv == d.planned_argv
