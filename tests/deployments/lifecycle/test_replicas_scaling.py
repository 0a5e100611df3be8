"""Scaling a running deployment through the service: more replicas of the same command on
the host's free GPUs (the launch's locked reservation), fewer by stopping the highest-index
ones; audited, role-checked, refused with the reason when the GPUs do not hold more."""

from __future__ import annotations

from typing import Any

import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import Deployment, GpuLease, Status, replicas
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

GIB = 2**30
HOST = "scalehost"


@pytest.fixture
def four_gpu_host(model_root: Any) -> Host:
    return sim_host(HOST, 4)


def launch(user: Any, count: int) -> Deployment:
    request = LaunchRequest(
        name="chat",
        model_ref="local:0/tiny",
        host_name=HOST,
        plan_request=planning.PlanRequest(),
        replicas=count,
    )
    d = deployment_create(user=user, request=request)
    Deployment.objects.filter(pk__in=[r.pk for r in d.group()]).update(status=Status.RUNNING)
    d.refresh_from_db()
    return d


def held_gpus(rows: list[Deployment]) -> list[list[int]]:
    return [sorted(r.leases.filter(active=True).values_list("gpu__index", flat=True)) for r in rows]


def test_scale_up_adds_replicas_of_the_same_command_on_free_gpus(four_gpu_host, operator) -> None:
    d = launch(operator, 2)
    first = deployment_scale(user=operator, deployment=d, replicas=3)
    rows = list(first.group())
    assert [r.replica_index for r in rows] == [1, 2, 3]
    new = rows[2]
    assert new.replica_of_id == d.pk and new.status == Status.PENDING
    assert new.planned_argv == d.planned_argv
    gpus = held_gpus(rows)
    assert sorted(g for one in gpus for g in one) == [0, 1, 2]
    assert new.snapshot.gpu_indices[0] == gpus[2][0]
    sizes = set(GpuLease.objects.filter(deployment__in=rows).values_list("memory_bytes", flat=True))
    assert len(sizes) == 1
    assert new.engine_api_key() != d.engine_api_key() and new.api_key_hash
    assert list(new.events.values_list("reason", flat=True)) == [
        f"scaled up by {operator.get_username()} (replica 3)"
    ]
    audit = AuditEvent.objects.get(action="deployment.scale")
    assert audit.target_id == str(d.pk)
    assert audit.detail["replicas_before"] == 2 and audit.detail["replicas"] == 3
    assert audit.detail["replica_ids_added"] == [new.pk]
    first.refresh_from_db()
    assert first.snapshot.request["replicas"] == 3  # a relaunch starts three


def test_scale_up_beyond_the_free_gpus_is_refused_with_the_reason(four_gpu_host, operator):
    d = launch(operator, 3)
    with pytest.raises(DeploymentError, match=r"Cannot add 2 replica\(s\) to chat: .*hold 1"):
        deployment_scale(user=operator, deployment=d, replicas=5)
    assert d.group().count() == 3
    assert not AuditEvent.objects.filter(action="deployment.scale").exists()
    assert GpuLease.objects.filter(active=True).count() == 3


def test_scale_down_stops_the_highest_replicas_and_retires_them(four_gpu_host, operator):
    d = launch(operator, 3)
    before = list(d.group())
    deployment_scale(user=operator, deployment=d, replicas=1)
    for r in before:
        r.refresh_from_db()
    assert [r.status for r in before] == [Status.RUNNING, Status.STOPPING, Status.STOPPING]
    assert [r.retired for r in before] == [False, True, True]
    assert list(d.group()) == [d]  # the deployment is its one running replica again
    assert replicas.overall([r.status for r in d.group()]).status == Status.RUNNING
    audit = AuditEvent.objects.get(action="deployment.scale")
    assert audit.detail["replica_ids_stopped"] == [before[1].pk, before[2].pk]
    # Up again: new rows after the retired ones' indexes, on the GPUs they are freeing.
    GpuLease.objects.filter(deployment__in=before[1:]).update(active=False)
    Deployment.objects.filter(pk__in=[r.pk for r in before[1:]]).update(status=Status.STOPPED)
    deployment_scale(user=operator, deployment=d, replicas=2)
    assert [r.replica_index for r in d.group()] == [1, 4]


def test_scaling_is_refused_to_viewers_out_of_range_and_when_not_running(
    four_gpu_host, operator, viewer
) -> None:
    d = launch(operator, 1)
    with pytest.raises(DeploymentError, match="needs Operator"):
        deployment_scale(user=viewer, deployment=d, replicas=2)
    for bad in (0, 17):
        with pytest.raises(DeploymentError, match="from 1 to 16"):
            deployment_scale(user=operator, deployment=d, replicas=bad)
    with pytest.raises(DeploymentError, match="already has 1 live replicas"):
        deployment_scale(user=operator, deployment=d, replicas=1)
    Deployment.objects.filter(pk=d.pk).update(status=Status.FAILED)
    with pytest.raises(DeploymentError, match="not running"):
        deployment_scale(user=operator, deployment=d, replicas=2)
    assert not AuditEvent.objects.filter(action="deployment.scale").exists()


def test_the_page_scales_with_the_form_and_shows_in_flight_per_replica(
    four_gpu_host, operator, viewer, client
) -> None:
    from playground.gateway import balance

    d = launch(operator, 2)
    rows = list(d.group())
    client.force_login(viewer)
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert 'id="scale-form"' not in page and ">In flight<" in page
    assert f'data-in-flight="{rows[1].pk}">0<' in page
    assert client.post(f"/deployments/{d.pk}/scale/", {"replicas": "3"}).status_code == 403
    client.force_login(operator)
    assert 'id="scale-form"' in client.get(f"/deployments/{d.pk}/").content.decode()
    bad = client.post(f"/deployments/{d.pk}/scale/", {"replicas": "many"}, follow=True)
    assert "Replicas: give a whole number" in bad.content.decode()
    too_many = client.post(f"/deployments/{d.pk}/scale/", {"replicas": "9"}, follow=True)
    assert "Cannot add 7 replica(s) to chat" in too_many.content.decode()
    done = client.post(f"/deployments/{rows[1].pk}/scale/", {"replicas": "3"}, follow=True)
    assert "Scaling chat to 3 replicas." in done.content.decode()
    assert done.redirect_chain[-1][0] == f"/deployments/{d.pk}/"
    assert d.group().count() == 3
    assert AuditEvent.objects.filter(action="deployment.scale").count() == 1
    assert balance.in_flight([d.pk]) == {d.pk: 0}
    listing = client.get("/deployments/").content.decode()
    assert "2/3 replicas running" in listing  # the new one is pending


def test_the_dashboard_lists_live_deployments_with_their_replicas(
    four_gpu_host, operator, viewer, client
) -> None:
    d = launch(operator, 3)
    rows = list(d.group())
    rows[2].transition(Status.FAILED, failure_reason="the engine exited unexpectedly")
    ended = launch_named(operator, "old")
    Deployment.objects.filter(pk=ended.pk).update(status=Status.STOPPED)
    client.force_login(viewer)
    page = client.get("/").content.decode()
    assert 'id="dashboard-deployments"' in page
    assert f'data-replica-summary="{d.pk}">2/3 replicas running<' in page
    assert ">Degraded<" in page and f'data-deployment="{ended.pk}"' not in page


def launch_named(user: Any, name: str) -> Deployment:
    request = LaunchRequest(
        name=name, model_ref="local:0/tiny", host_name=HOST, plan_request=planning.PlanRequest()
    )
    return deployment_create(user=user, request=request)


def test_scale_up_keeps_a_layout_asked_for_at_launch(four_gpu_host, operator) -> None:
    request = LaunchRequest(
        name="wide",
        model_ref="local:0/tiny",
        host_name=HOST,
        plan_request=planning.PlanRequest(tensor_parallel_size=2),
    )
    d = deployment_create(user=operator, request=request)
    Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING)
    deployment_scale(user=operator, deployment=d, replicas=2)
    rows = list(d.group())
    assert [len(r.snapshot.gpu_indices) for r in rows] == [2, 2]
    assert rows[1].planned_argv == rows[0].planned_argv
    assert sorted(g for one in held_gpus(rows) for g in one) == [0, 1, 2, 3]
    with pytest.raises(DeploymentError, match="Cannot add 1 replica"):
        deployment_scale(user=operator, deployment=d, replicas=3)
