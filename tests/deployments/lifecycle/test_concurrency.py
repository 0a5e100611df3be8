"""On PostgreSQL: racing launches for the same GPUs never reserve more than a GPU holds."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.db.models import Sum

from deployments import planning
from deployments.catalog.demo_model import make_tiny_llama
from deployments.models import Deployment, GpuLease
from tests.support.hosts import sim_host
from tests.support.races import race_launches, tiny_launches

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def four_gpu_host(tmp_path_factory, settings):
    root = tmp_path_factory.mktemp("models")
    make_tiny_llama(root / "tiny")
    settings.MODEL_ROOTS = [root]
    return sim_host("racehost", 4)


def test_twenty_racing_creates(four_gpu_host, operator) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the race is only meaningful on PostgreSQL")
    requests = tiny_launches("race", "racehost", 20, planning.PlanRequest(tensor_parallel_size=1))
    outcomes = race_launches(operator, requests, join_s=60)
    wins = [o for o in outcomes if o == "won"]
    losses = [o for o in outcomes if o != "won"]
    assert len(outcomes) == 20
    assert 1 <= len(wins) <= 4
    active = list(GpuLease.objects.filter(active=True).values_list("gpu_id", flat=True))
    assert len(active) == len(set(active)) == len(wins)
    assert all(
        any(word in o.lower() for word in ("leased", "fits", "free", "busy")) for o in losses
    ), losses


LAUNCHES = 30
SMALL_GPU_BYTES = 8 << 30


@pytest.fixture
def two_small_gpus(tmp_path_factory, settings):
    root = tmp_path_factory.mktemp("models")
    make_tiny_llama(root / "tiny")
    settings.MODEL_ROOTS = [root]
    return sim_host("sharerace", 2, SMALL_GPU_BYTES, gpu_name="L4")


def reservations_by_gpu() -> dict[int, int]:
    rows = (
        GpuLease.objects.filter(active=True, gpu__host__name="sharerace")
        .values("gpu_id")
        .annotate(total=Sum("memory_bytes"))
    )
    return {r["gpu_id"]: r["total"] for r in rows}


@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_racing_right_sized_launches_never_over_commit_a_gpu(two_small_gpus, operator) -> None:
    """Thirty launches of the tiny model, each reserving about 1 GiB, race for two 8 GiB GPUs
    through the real service; a watcher sums the active reservations all along."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL")
    peaks: list[dict[int, int]] = []

    def watch(done: threading.Event) -> None:
        while not done.is_set():
            peaks.append(reservations_by_gpu())

    requests = tiny_launches("share", "sharerace", LAUNCHES, planning.PlanRequest(concurrency=8))
    outcomes = race_launches(operator, requests, alongside=watch)

    wins = [o for o in outcomes if o == "won"]
    refusals = [o for o in outcomes if o != "won"]
    assert len(outcomes) == LAUNCHES
    share = GpuLease.objects.filter(active=True).values_list("memory_bytes", flat=True).first()
    assert share is not None and share < SMALL_GPU_BYTES // 4
    capacity = 2 * (SMALL_GPU_BYTES // share)
    assert capacity < LAUNCHES  # the race is real: some launches must be refused
    final = reservations_by_gpu()
    assert len(peaks) > 1
    for sums in [*peaks, final]:
        assert all(total <= SMALL_GPU_BYTES for total in sums.values()), sums
    assert len(final) == 2  # both GPUs shared
    assert GpuLease.objects.filter(active=True).count() == len(wins)
    assert capacity // 2 <= len(wins) <= capacity
    for message in refusals:  # each refusal says what was short, with figures or vLLM's words
        assert (
            "after other deployments' reservations" in message
            or "GiB free" in message
            or "Free memory on device" in message
            or "does not fit" in message
        ), message


@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_racing_launches_of_two_replicas_never_share_a_whole_gpu(four_gpu_host, operator) -> None:
    """Ten launches of two whole-GPU replicas each race for four GPUs: at most two launches
    win, each with both of its replicas; a loser leaves no row behind."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and concurrent transactions need PostgreSQL")
    whole_gpu = planning.PlanRequest(tensor_parallel_size=1)
    requests = tiny_launches("pair", "racehost", 10, whole_gpu, replicas=2)
    outcomes = dict(enumerate(race_launches(operator, requests)))
    wins = sorted(f"pair-{i}" for i, o in outcomes.items() if o == "won")
    assert len(outcomes) == 10 and 1 <= len(wins) <= 2, outcomes
    assert sorted(Deployment.objects.values_list("name", flat=True)) == sorted(wins * 2)
    active = list(GpuLease.objects.filter(active=True).values_list("gpu_id", flat=True))
    assert len(active) == len(set(active)) == 2 * len(wins)  # no GPU reserved twice
