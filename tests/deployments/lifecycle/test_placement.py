"""The placement interface (lifecycle.placement), one contract for every engine's
implementation: a launch's placement leases, per replica, the plan's bytes on that replica's
own devices; more replicas of a running deployment go on devices it does not hold, each
leasing the first one's bytes; a relaunch keeps the engine's own settings. Rows only (no
worker): the `db` fixture's transaction is rolled back before any on-commit task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deployments.catalog.gguf_write import convert_demo
from deployments.lifecycle import placement
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db
HOST = "placing"
MODELS = {
    "vllm": "local:0/tiny",
    "transformers": "local:0/tiny",
    "llamacpp": "local:0/demo-Q8_0.gguf",
}


@pytest.fixture
def host(model_root: Path, tiny_model: Path) -> Any:
    convert_demo(tiny_model, model_root / "demo-Q8_0.gguf")
    return sim_host(HOST, 4)


def _request(engine: str, replicas: int = 2) -> LaunchRequest:
    return LaunchRequest(
        name=f"placed-{engine}", model_ref=MODELS[engine], host_name=HOST, engine=engine,
        replicas=replicas,
    )  # fmt: skip


def _leases(d: Deployment) -> dict[int, int]:
    rows = GpuLease.objects.filter(deployment=d, active=True).select_related("gpu")
    return {lease.gpu.index: lease.memory_bytes for lease in rows}


@pytest.mark.parametrize("engine", sorted(MODELS))
def test_every_engine_places_leases_and_scales_through_the_one_interface(
    host: Any, operator: Any, engine: str
) -> None:
    placed = placement.for_engine(engine).place(
        host, _request(engine), hub_token=None, overrides={}
    )
    assert placed.engine == engine and placed.lead == host and placed.replicas == 2
    per_replica = placed.leases()
    assert len(per_replica) == 2 and all(per_replica)
    bytes_each = [g.total_bytes for g in placed.snapshot.per_gpu]
    assert [sorted(r.values()) for r in per_replica] == [sorted(bytes_each)] * 2
    assert not set(per_replica[0]) & set(per_replica[1])  # each replica on its own devices

    first = deployment_create(user=operator, request=_request(engine))
    rows = list(first.group())
    assert [r.engine for r in rows] == [engine, engine]
    held = [_leases(r) for r in rows]
    assert all(sorted(h.values()) == sorted(bytes_each) for h in held)
    Deployment.objects.filter(pk__in=[r.pk for r in rows]).update(status="running")
    first.refresh_from_db()
    deployment_scale(user=operator, deployment=first, replicas=3)
    third = first.group().get(replica_index=3)
    assert third.engine == engine and sorted(_leases(third).values()) == sorted(bytes_each)
    assert not set(_leases(third)) & (set(held[0]) | set(held[1]))
    assert third.snapshot.engine_args == first.snapshot.engine_args  # the first one's command


def test_an_engine_is_chosen_once_and_refuses_what_it_cannot_load() -> None:
    with pytest.raises(DeploymentError, match="Unknown engine 'sglang'"):
        placement.for_engine("sglang")
    with pytest.raises(DeploymentError, match=r"llama\.cpp loads GGUF files only"):
        placement.for_engine("llamacpp", "local:0/tiny")
    with pytest.raises(DeploymentError, match="vllm does not load GGUF files"):
        placement.for_engine("vllm", "local:0/demo-Q8_0.gguf")
    assert placement.for_engine("transformers", "local:0/tiny").engine == "transformers"


def test_a_relaunch_keeps_each_engines_own_settings(host: Any, operator: Any) -> None:
    gguf = deployment_create(user=operator, request=_request("llamacpp", replicas=1))
    kept = placement.for_engine("llamacpp").relaunch_fields(gguf)
    assert kept["llamacpp"].cache_type_k == gguf.snapshot.engine_args.cache_type_k
    vllm = deployment_create(user=operator, request=_request("vllm", replicas=1))
    assert placement.for_engine("vllm").relaunch_fields(vllm) == {}
