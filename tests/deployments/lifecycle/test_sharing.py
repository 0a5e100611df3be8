"""Shared GPUs through the launch service: right-sized reservations share a GPU while they fit,
a full-GPU launch keeps vLLM's start-up rule, and a refusal says why."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Sum
from django.utils import timezone

from deployments import planning
from deployments.catalog.registered import planner_host
from deployments.lifecycle import placement, services
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import GpuLease
from monitoring.models import Gpu, Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

GIB = 2**30


@pytest.fixture
def two_gpu_host(model_root: Any) -> Host:
    return sim_host("sharehost", 2, 24 * GIB, gpu_name="L4")


def launch(user: Any, name: str, **plan: Any) -> Any:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name="sharehost",
        plan_request=planning.PlanRequest(**plan),
    )
    return deployment_create(user=user, request=request)


def reserved(host: Host) -> dict[int, int]:
    rows = (
        GpuLease.objects.filter(gpu__host=host, active=True)
        .values("gpu__index")
        .annotate(total=Sum("memory_bytes"))
    )
    return {r["gpu__index"]: r["total"] for r in rows}


def test_right_sized_deployments_share_a_gpu(two_gpu_host, operator) -> None:
    first = launch(operator, "chat-a", concurrency=4)
    second = launch(operator, "chat-b", concurrency=4)
    a, b = first.leases.get(), second.leases.get()
    assert a.gpu_id == b.gpu_id  # both on GPU 0: small shares pack
    assert 0 < a.memory_bytes < 2 * GIB
    gmu = first.snapshot.engine_args.gpu_memory_utilization
    assert gmu is not None and gmu < 0.1
    assert reserved(two_gpu_host) == {0: a.memory_bytes + b.memory_bytes}


def test_the_inventory_gives_each_gpu_its_free_bytes_after_reservations(
    two_gpu_host, operator
) -> None:
    d = launch(operator, "chat-a", concurrency=4)
    held = d.leases.get().memory_bytes
    gpus = planner_host(two_gpu_host).gpus
    assert [(g.index, g.free_bytes, g.busy) for g in gpus] == [
        (0, 24 * GIB - held, False),  # partly reserved, not busy
        (1, 24 * GIB, False),
    ]


def test_a_whole_gpu_launch_goes_where_vllm_can_start(two_gpu_host, operator) -> None:
    launch(operator, "chat-a", gpu_memory_utilization=0.2)  # 4.8 GiB of GPU 0
    big = launch(operator, "big")  # no load stated: 92 % of a GPU, as before
    lease = big.leases.get()
    assert lease.gpu.index == 1
    assert lease.memory_bytes == pytest.approx(0.92 * 24 * GIB, rel=0.01)
    with pytest.raises(DeploymentError) as err:
        launch(operator, "big-2")
    message = str(err.value)
    assert "Free memory on device cuda:0 (" in message
    assert "is less than desired GPU memory utilization (0.92, 22.08 GiB)" in message
    assert "State the load" in message
    # a right-sized one still fits beside it on GPU 0
    assert launch(operator, "chat-b", concurrency=4).leases.get().gpu.index == 0


def test_a_load_larger_than_what_is_left_is_refused(two_gpu_host, operator) -> None:
    launch(operator, "big-0", tensor_parallel_size=1, gpu_memory_utilization=0.9)
    launch(operator, "big-1", tensor_parallel_size=1, gpu_memory_utilization=0.9)
    with pytest.raises(DeploymentError) as err:
        launch(operator, "chat", concurrency=100_000, max_model_len=512)
    message = str(err.value)
    assert "not the 100000 asked for" in message or "does not fit" in message
    assert reserved(two_gpu_host) == {0: pytest.approx(0.9 * 24 * GIB, rel=0.01)} | {
        1: pytest.approx(0.9 * 24 * GIB, rel=0.01)
    }


def test_a_reservation_that_no_longer_fits_is_refused_with_the_figures(
    two_gpu_host, operator
) -> None:
    request = LaunchRequest(
        name="late", model_ref="local:0/tiny", host_name="sharehost", gpu_indices=(0,)
    )
    # placed on what is free now (92 % of GPU 0), written after another launch took some of it
    placed = placement.for_engine("transformers").place(
        two_gpu_host, request, hub_token=None, overrides={}
    )
    launch(operator, "early", gpu_memory_utilization=0.2)  # meanwhile, 4.8 GiB of GPU 0 go
    options = {"overrides": {}, "auto_restart": False, "sleep_after_s": None}
    with pytest.raises(services.ReservationConflict) as err:
        services._create(operator, "late", placed, {**options, "scaling_policy": None}, None)
    message = str(err.value)
    assert message.startswith("GPU 0 on sharehost has 19.2 GiB free of 24 GiB")
    assert "GiB free of 24 GiB after other deployments' reservations" in message
    assert "needs 22.1 GiB there" in message
    assert not GpuLease.objects.filter(deployment__name="late").exists()


def test_the_deployment_page_shows_each_deployments_share(two_gpu_host, operator, client) -> None:
    first = launch(operator, "chat-a", concurrency=4)
    second = launch(operator, "chat-b", gpu_memory_utilization=0.5)
    client.force_login(operator)
    page = client.get(f"/deployments/{first.pk}/").content.decode()
    assert 'id="gpu-shares"' in page
    mine, theirs = first.leases.get().memory_bytes, second.leases.get().memory_bytes
    left = 24 * GIB - mine - theirs
    assert (
        f"GPU 0 (24.00 GiB): this deployment reserves {mine / GIB:,.2f} GiB; chat-b "
        f"{theirs / GIB:,.2f} GiB; {left / GIB:,.2f} GiB unreserved." in page
    )
    assert f'href="/deployments/{second.pk}/"' in page


def test_measured_shares_follow_monitorings_attribution() -> None:
    from deployments.lifecycle.shares import measured_by_owner
    from monitoring.gpus.base import GpuProcess, HostSample, failed_sample

    gpu = failed_sample(0, "GPU-0", lost=False, error="")
    gpu = type(gpu)(
        **{
            **{f: getattr(gpu, f) for f in gpu.__slots__},
            "processes": (
                GpuProcess(10, 3 * GIB, "vllm"),
                GpuProcess(11, GIB, "vllm-worker"),
                GpuProcess(20, 5 * GIB, "vllm"),
                GpuProcess(30, 2 * GIB, "jupyter"),  # nobody's deployment
            ),
        }
    )
    owners = {"10": "chat-a", "11": "chat-a", "20": "chat-b"}
    split = measured_by_owner(HostSample(0, (gpu,)), owners)
    assert split == {0: {"chat-a": 4 * GIB, "chat-b": 5 * GIB}}


def test_vllm_claims_the_share_that_was_reserved(operator, model_root) -> None:
    from deployments.host.engine_control import launch_spec

    host = Host.objects.create(
        name="gpuhost", queue="host.gpuhost", backend="nvml", last_heartbeat=timezone.now()
    )
    Gpu.objects.create(host=host, index=0, uuid="GPU-g0", name="L4", memory_total_bytes=24 * GIB)
    request = LaunchRequest(
        name="sized",
        model_ref="local:0/tiny",
        host_name="gpuhost",
        engine="vllm",
        plan_request=planning.PlanRequest(concurrency=4),
    )
    d = deployment_create(user=operator, request=request)
    spec = launch_spec(d, 8000)
    assert spec.gpu_memory_utilization is not None and spec.gpu_memory_utilization < 0.1
    assert d.leases.get().memory_bytes == pytest.approx(
        spec.gpu_memory_utilization * 24 * GIB, abs=1
    )
