"""A sleeping engine's leases: the bytes it gave back may be leased to others, and its wake
takes them back or waits; on PostgreSQL a wake racing launches for those bytes never
over-commits the GPU."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.models import Sum
from django.db.models.functions import Coalesce

from deployments import planning
from deployments.catalog.demo_model import make_tiny_llama
from deployments.catalog.registered import reserved_bytes
from deployments.engines.sleep import CONTEXT_FLOOR_BYTES
from deployments.host.sleepleases import WakeBlocked, lease_asleep, lease_awake
from deployments.models import Deployment, GpuLease, Status
from tests.support.hosts import sim_host
from tests.support.races import race_launches, tiny_launches

pytestmark = pytest.mark.django_db(transaction=True)

GIB = 1 << 30
GPU_BYTES = 8 * GIB
SLEEPER_BYTES = 6 * GIB


@pytest.fixture
def one_small_gpu(tmp_path_factory, settings):
    root = tmp_path_factory.mktemp("models")
    make_tiny_llama(root / "tiny")
    settings.MODEL_ROOTS = [root]
    return sim_host("sleephost", 1, GPU_BYTES, gpu_name="L4")


def sleeper(host, user) -> Deployment:
    """A running engine holding 6 GiB of the 8, then asleep: it keeps its CUDA context only
    (the floor: a row without the planner's figures)."""
    d = Deployment.objects.create(
        name="sleeper",
        model_id="local:0/tiny",
        engine="vllm",
        host=host,
        created_by=user,
        status=Status.SLEEPING,
    )
    GpuLease.objects.create(deployment=d, gpu=host.gpus.get(), memory_bytes=SLEEPER_BYTES)
    assert lease_asleep(d) == {0: CONTEXT_FLOOR_BYTES}
    return d


def leased_total() -> int:
    """What the GPU has leased, as every launch and wake counts it."""
    row = GpuLease.objects.filter(active=True).aggregate(
        total=Sum(Coalesce("asleep_bytes", "memory_bytes"))
    )
    return int(row["total"] or 0)


def test_freed_bytes_are_leasable_and_a_wake_waits_for_them(one_small_gpu, operator) -> None:
    d = sleeper(one_small_gpu, operator)
    gpu = one_small_gpu.gpus.get()
    assert reserved_bytes([gpu.pk]) == {gpu.pk: CONTEXT_FLOOR_BYTES}
    other = Deployment.objects.create(
        name="other", model_id="m", engine="vllm", host=one_small_gpu, created_by=operator
    )
    taken = GpuLease.objects.create(deployment=other, gpu=gpu, memory_bytes=4 * GIB)
    with pytest.raises(WakeBlocked, match=r"needs 5\.0 GiB more, 3\.0 GiB is free"):
        lease_awake(d)
    assert GpuLease.objects.get(deployment=d).asleep_bytes == CONTEXT_FLOOR_BYTES  # unchanged
    GpuLease.objects.filter(pk=taken.pk).update(active=False)  # the other one stopped
    lease_awake(d)
    assert GpuLease.objects.get(deployment=d, active=True).asleep_bytes is None
    assert reserved_bytes([gpu.pk]) == {gpu.pk: SLEEPER_BYTES}


@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_a_wake_racing_launches_for_the_freed_bytes_never_over_commits(
    one_small_gpu, operator
) -> None:
    """The sleeper gave back 5 GiB; twelve launches of about 1 GiB each and the sleeper's wake
    start at one barrier, through the real launch service and the host's wake. A watcher sums
    the GPU's leases all along: never more than the GPU. Either the wake won (and launches got
    only what was left beside its 6 GiB) or it was refused with the figures (and stays
    asleep, holding only its context)."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL")
    d = sleeper(one_small_gpu, operator)
    peaks: list[int] = []
    woke: list[str] = []

    def watch(done: threading.Event) -> None:
        try:
            while not done.is_set():
                peaks.append(leased_total())
        finally:
            connections.close_all()

    def wake_and_watch(done: threading.Event) -> None:
        watcher = threading.Thread(target=watch, args=(done,))
        watcher.start()
        try:
            lease_awake(d)
            woke.append("won")
        except WakeBlocked as exc:
            woke.append(str(exc))
        finally:
            connections.close_all()
        done.wait(200)
        watcher.join(10)

    requests = tiny_launches("taker", "sleephost", 12, planning.PlanRequest(concurrency=8))
    outcomes = race_launches(operator, requests, alongside=wake_and_watch)

    launched = GpuLease.objects.filter(active=True).exclude(deployment=d)
    share = launched.values_list("memory_bytes", flat=True).first()
    assert share is not None and share < 2 * GIB, share
    final = leased_total()
    assert peaks and max([*peaks, final]) <= GPU_BYTES, (peaks[-5:], final)
    wins = outcomes.count("won")
    assert launched.count() == wins
    mine = GpuLease.objects.get(deployment=d, active=True)
    assert len(woke) == 1
    if woke[0] == "won":
        assert mine.asleep_bytes is None
        assert wins * share <= GPU_BYTES - SLEEPER_BYTES
    else:
        assert "GiB more" in woke[0] and "gave back when it slept" in woke[0], woke[0]
        assert mine.asleep_bytes == CONTEXT_FLOOR_BYTES
        assert wins * share + CONTEXT_FLOOR_BYTES <= GPU_BYTES
        assert wins * share > GPU_BYTES - SLEEPER_BYTES  # the launches did take its bytes
