"""A launch of several replicas through the launch service: one deployment, a row per replica
with its own GPUs and lease, one audit row; refused with the planner's reason when not all fit."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.autoscale.services import PolicySettings, policy_set
from deployments.lifecycle import selectors
from deployments.lifecycle.relaunch import POLICY_FIELDS, deployment_relaunch
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, GpuLease, Status, replicas
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db

GIB = 2**30
HOST = "fourgpu"


@pytest.fixture
def four_gpu_host(model_root: Any) -> Host:
    return sim_host(HOST, 4)


def launch(user: Any, name: str, replicas: int | None, **plan: Any) -> Deployment:
    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=HOST,
        plan_request=planning.PlanRequest(**plan),
        replicas=replicas,
    )
    return deployment_create(user=user, request=request)


def group_of(d: Deployment) -> list[Deployment]:
    return list(d.group())


def test_three_replicas_are_three_rows_with_their_own_gpus(four_gpu_host, operator) -> None:
    d = launch(operator, "chat", 3)
    rows = group_of(d)
    assert [r.replica_index for r in rows] == [1, 2, 3]
    assert rows[0].pk == d.pk and d.replica_of_id is None
    assert all(r.replica_of_id == d.pk for r in rows[1:])
    assert {r.status for r in rows} == {Status.PENDING}
    gpus = [sorted(r.leases.filter(active=True).values_list("gpu__index", flat=True)) for r in rows]
    assert sorted(g for one in gpus for g in one) == [0, 1, 2]  # one GPU each, none shared
    assert [r.snapshot.gpu_indices[0] for r in rows] == [g[0] for g in gpus]
    sizes = set(GpuLease.objects.filter(deployment__in=rows).values_list("memory_bytes", flat=True))
    assert len(sizes) == 1 and sizes.pop() == pytest.approx(0.92 * 80 * GIB, rel=0.01)
    assert len({r.engine_api_key() for r in rows}) == 3
    audit = AuditEvent.objects.filter(action="deployment.create")
    assert audit.count() == 1
    detail = audit.get().detail
    assert detail["replicas"] == 3 and detail["replicas_asked"] == 3
    assert detail["replica_ids"] == [r.pk for r in rows]
    assert sorted(g for one in detail["replica_gpus"] for g in one) == [0, 1, 2]


def test_more_replicas_than_fit_are_refused_with_the_planners_reason(
    four_gpu_host, operator
) -> None:
    with pytest.raises(DeploymentError) as err:
        launch(operator, "chat", 5)
    assert str(err.value) == (
        f"The free GPUs of {HOST} hold 4 of the 5 replicas asked for (replica 5 of 5: needs 1 "
        "GPU; no usable GPU left); ask for fewer, or for max."
    )
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()
    assert not AuditEvent.objects.filter(action="deployment.create").exists()


def test_max_takes_every_replica_that_fits(four_gpu_host, operator) -> None:
    d = launch(operator, "chat", None)
    rows = group_of(d)
    assert len(rows) == 4
    assert GpuLease.objects.filter(active=True).count() == 4
    assert AuditEvent.objects.get(action="deployment.create").detail["replicas_asked"] == "max"
    # every GPU is now reserved: a further launch is refused, nothing over-commits
    with pytest.raises(DeploymentError):
        launch(operator, "other", 1)
    assert GpuLease.objects.filter(active=True).count() == 4


def test_the_name_stays_one_deployments_while_any_replica_is_active(
    four_gpu_host, operator
) -> None:
    launch(operator, "chat", 2)
    with pytest.raises(DeploymentError, match="already active"):
        launch(operator, "chat", 1)


def test_stop_stops_every_replica_with_one_audit_row(four_gpu_host, operator) -> None:
    d = launch(operator, "chat", 3)
    second = group_of(d)[1]
    stopped = deployment_stop(user=operator, deployment=second)  # from any replica's page
    assert stopped.pk == d.pk
    assert {r.status for r in group_of(d)} == {Status.STOPPING}
    audit = AuditEvent.objects.filter(action="deployment.stop")
    assert audit.count() == 1 and audit.get().detail["replicas"] == 3
    assert audit.get().target_id == str(d.pk)
    # Stop again (a stop message lost to a Redis outage): sent again, audited, no error
    assert deployment_stop(user=operator, deployment=d).pk == d.pk
    assert audit.count() == 2
    again = audit.order_by("pk").last()
    assert again is not None and again.detail["sent_again"] == [r.pk for r in group_of(d)]


def test_relaunch_launches_the_set_again(four_gpu_host, operator) -> None:
    d = launch(operator, "chat", 2, placement="packed")
    rows = group_of(d)
    with pytest.raises(DeploymentError, match="Stop chat first"):
        deployment_relaunch(user=operator, deployment=rows[1])
    for r in rows:  # as the host worker ends them
        assert r.transition(Status.STOPPING) and r.transition(Status.STOPPED)
        r.leases.update(active=False)
    again = deployment_relaunch(user=operator, deployment=rows[1])
    assert again.pk != d.pk and len(group_of(again)) == 2
    assert again.snapshot.request["placement"] == "packed"


@pytest.mark.parametrize(
    ("statuses", "status", "summary"),
    [
        (["running", "running", "running"], "running", "3/3 replicas running"),
        (["running", "failed", "running"], "degraded", "2/3 replicas running"),
        (["running", "restarting"], "degraded", "1/2 replicas running"),
        (["running", "starting"], "starting", "1/2 replicas running"),
        (["stopping", "stopped"], "stopping", "0/2 replicas running"),
        (["stopped", "failed"], "failed", "0/2 replicas running"),
        (["pending"], "pending", "0/1 replica running"),
    ],
)
def test_the_state_of_a_deployment_follows_its_replicas(statuses, status, summary) -> None:
    state = replicas.overall(statuses)
    assert (state.status, state.summary) == (status, summary)


def test_list_and_detail_pages_show_one_deployment_with_its_replicas(
    four_gpu_host, operator, client
) -> None:
    d = launch(operator, "chat", 3)
    rows = group_of(d)
    for r, port in zip(rows[:2], (8101, 8102), strict=True):
        assert r.transition(Status.STARTING, port=port) and r.transition(Status.RUNNING)
    assert rows[2].transition(Status.FAILED, failure_reason="the engine exited unexpectedly")
    listed = selectors.deployment_rows(selectors.ListFilters())
    assert [r.d.pk for r in listed] == [d.pk]
    client.force_login(operator)
    page = client.get("/deployments/").content.decode()
    assert page.count('<tr data-id="') == 1
    assert "2/3 replicas running" in page and ">Degraded<" in page
    assert client.get("/deployments/?status=failed").content.decode().count('<tr data-id="') == 1
    detail = client.get(f"/deployments/{d.pk}/").content.decode()
    assert 'id="replicas"' in detail and "Stop all 3 replicas" in detail
    for r in rows:
        assert f'data-replica="{r.replica_index}"' in detail
        assert f'href="/deployments/{r.pk}/#log"' in detail
    assert "8101" in detail and "8102" in detail and "the engine exited unexpectedly" in detail
    third = client.get(f"/deployments/{rows[2].pk}/").content.decode()
    assert "Replica 3 of" in third and f'href="/deployments/{d.pk}/"' in third


def test_the_launch_form_takes_replicas_and_placement(four_gpu_host, operator, client) -> None:
    client.force_login(operator)
    form = {"name": "chat", "model_ref": "local:0/tiny", "host": HOST, "engine": "vllm"}
    form |= {"dtype": "auto", "kv_cache_dtype": "auto", "placement": "packed"}
    refused = client.post("/deployments/new/", form | {"replicas": "5"})
    assert refused.status_code == 200 and "replica 5 of 5:" in refused.content.decode()
    bad = client.post("/deployments/new/", form | {"replicas": "two"})
    assert "Give a number of replicas from 1" in bad.content.decode()
    done = client.post("/deployments/new/", form | {"replicas": "max"})
    assert done.status_code == 302
    d = Deployment.objects.get(replica_index=1)
    assert len(group_of(d)) == 4 and d.snapshot.request["placement"] == "packed"
    page = client.get(f"/deployments/{d.pk}/").content.decode()
    assert "0/4 replicas running" in page


def test_a_replicas_status_push_carries_the_deployments_state(four_gpu_host, operator) -> None:
    from deployments.live.pushes import status_payload

    single = launch(operator, "solo", 1)
    assert "group" not in status_payload(single)
    d = launch(operator, "chat", 2)
    second = group_of(d)[1]
    assert second.transition(Status.FAILED, failure_reason="gone")
    payload = status_payload(second)
    assert payload["id"] == second.pk and payload["status"] == "failed"
    assert payload["group"] == d.pk and payload["group_status"] == "degraded"
    assert payload["group_summary"] == "0/2 replicas running"


def test_relaunch_keeps_the_autoscaling_policy(four_gpu_host, operator) -> None:
    assert set(POLICY_FIELDS) == {f.name for f in fields(PolicySettings)}  # none forgotten
    d = launch(operator, "elastic", 1)
    wanted = PolicySettings(min_replicas=1, max_replicas=3, ttft_p90_s=2.5, down_after_s=90)
    policy_set(user=operator, deployment=d, settings=wanted)
    for r in group_of(d):
        assert r.transition(Status.STOPPING) and r.transition(Status.STOPPED)
        r.leases.update(active=False)
    again = deployment_relaunch(user=operator, deployment=d)
    kept = again.scaling_policy
    assert (kept.max_replicas, kept.ttft_p90_s, kept.down_after_s) == (3, 2.5, 90)
    row = AuditEvent.objects.filter(action="deployment.autoscale_policy", target_id=str(again.pk))
    assert row.get().detail["kept_from"] == d.pk
