"""A launch over several hosts through the launch service (rows only, no worker): one
transaction leases GPUs on each host and writes a Ray node per host, the head where the
first stage runs; refusals say what to change; a worker host gone offline breaks the cluster."""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.host.ray import cluster
from deployments.host.watchdog import raynodes
from deployments.lifecycle.forms import LaunchForm
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import DeploymentError, LaunchRequest, deployment_create
from deployments.models import (
    Deployment,
    DownloadStatus,
    Engine,
    GpuLease,
    ModelDownload,
    RayNode,
)
from monitoring.models import Host
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db


@pytest.fixture
def hosts(model_root: Any) -> list[Host]:
    """GPU hosts (their GPUs' figures simulated): over simulated GPUs vLLM runs on the CPU,
    which cannot span hosts (the refusal below)."""
    found = [sim_host("span-a", 1), sim_host("span-b", 1)]
    Host.objects.filter(pk__in=[h.pk for h in found]).update(simulated=False)
    return found


def test_a_launch_over_simulated_hosts_is_refused_before_anything_is_written(
    model_root: Any, operator: Any
) -> None:
    """vLLM runs on the CPU in place of simulated GPUs, and vLLM's CPU build refuses Ray:
    "ValueError: current platform cpu does not support ray." (reproduced with the real engine
    and a real Ray head: tests/deployments/host/test_ray_cluster.py)."""
    sim_host("span-a", 1), sim_host("span-b", 1)
    with pytest.raises(DeploymentError, match="current platform cpu does not support ray"):
        launch(operator)
    assert not Deployment.objects.exists() and not RayNode.objects.exists()
    assert not GpuLease.objects.exists()


def launch(user: Any, *, hosts: tuple[str, ...] = ("span-b",), replicas: int = 1) -> Deployment:
    request = LaunchRequest(
        name="spread",
        model_ref="local:0/tiny",
        host_name="span-a",
        hosts=hosts,
        replicas=replicas,
        plan_request=planning.PlanRequest(tensor_parallel_size=1, pipeline_parallel_size=2),
    )
    return deployment_create(user=user, request=request)


def test_one_launch_leases_on_each_host_and_writes_its_ray_nodes(hosts, operator) -> None:
    d = launch(operator)
    assert d.host.name == "span-a" and d.spans_hosts and d.engine == Engine.VLLM
    assert not d.auto_restart  # a restart would need the whole cluster again
    leases = GpuLease.objects.filter(deployment=d, active=True)
    assert sorted(leases.values_list("gpu__host__name", "gpu__index")) == [
        ("span-a", 0),
        ("span-b", 0),
    ]
    nodes = RayNode.objects.filter(deployment=d).order_by("role")
    assert [(n.host.name, n.role, n.state, n.num_gpus, n.gpu_indices) for n in nodes] == [
        ("span-a", "head", "pending", 1, [0]),
        ("span-b", "worker", "pending", 1, [0]),
    ]
    audit = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert audit.detail["hosts"] == ["span-a", "span-b"] and audit.detail["multi_host"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"hosts": ("span-a",)}, "not the first host again"),
        ({"hosts": ("span-b", "span-b")}, "Name each further host once"),
        ({"replicas": 2}, "runs one replica"),
        ({"hosts": ("nowhere",)}, "Unknown host 'nowhere'"),
    ],
)
def test_refusals_say_what_to_change(hosts, operator, overrides, says) -> None:
    with pytest.raises(DeploymentError, match=says):
        launch(operator, **overrides)
    assert not Deployment.objects.exists() and not GpuLease.objects.exists()


def test_a_worker_host_gone_offline_breaks_the_cluster(hosts, operator, settings) -> None:
    d = launch(operator)
    RayNode.objects.filter(deployment=d).update(state="running")
    assert raynodes.problem(d) is None
    stale = timezone.now() - timedelta(seconds=settings.HEARTBEAT_STALE_S + 1)
    Host.objects.filter(name="span-b").update(last_heartbeat=stale)
    assert "Host span-b stopped answering" in (raynodes.problem(d) or "")
    RayNode.objects.filter(deployment=d, host__name="span-b").update(
        state="exited", reason="The Ray node on span-b exited (exit code 1)"
    )
    assert raynodes.problem(d) == "The Ray node on span-b exited (exit code 1)"


def test_the_launch_form_takes_further_hosts(hosts) -> None:
    data = {"name": "spread", "model_ref": "local:0/tiny", "host": "span-a", "engine": "vllm"}
    data |= {"dtype": "auto", "kv_cache_dtype": "auto", "hosts": ["span-b"]}
    form = LaunchForm(data=data)
    assert form.is_valid(), form.errors
    assert form.launch_request().hosts == ("span-b",)
    assert not LaunchForm(data={**data, "hosts": ["nowhere"]}).is_valid()


def test_a_deployment_over_hosts_is_not_scaled(hosts, operator) -> None:
    d = launch(operator)
    Deployment.objects.filter(pk=d.pk).update(status="running")
    d.refresh_from_db()
    with pytest.raises(DeploymentError, match="spans several hosts"):
        deployment_scale(user=operator, deployment=d, replicas=2)


def test_a_moving_download_keeps_the_join_wait_alive(hosts, operator) -> None:
    """The lead waits for a further host's node as long as that host's weights download
    moves; a download that stands still does not extend the wait."""
    d = launch(operator)
    nodes = list(RayNode.objects.filter(deployment=d).select_related("host"))
    follower = next(n for n in nodes if n.role == "worker")
    row = ModelDownload.objects.create(
        host=follower.host,
        repo_id="sbtest/tiny-llama",
        deployment=d,
        created_by=operator,
        status=DownloadStatus.DOWNLOADING,
    )
    seen: dict[int, int] = {}
    hosts = [follower.host_id]
    assert cluster._downloads_moved(d.pk, hosts, seen)  # first seen
    assert not cluster._downloads_moved(d.pk, hosts, seen)  # no byte since
    ModelDownload.objects.filter(pk=row.pk).update(bytes_done=1 << 20)
    assert cluster._downloads_moved(d.pk, hosts, seen)
    assert not cluster._downloads_moved(d.pk, [d.host_id], {})  # another host's does not count
    ModelDownload.objects.filter(pk=row.pk).update(status=DownloadStatus.DONE, bytes_done=2 << 20)
    assert not cluster._downloads_moved(d.pk, hosts, seen)  # done: the node's own start counts now
    assert not cluster._downloads_moved(d.pk, [], {})  # no host waited for


def test_a_join_sent_ahead_waits_for_the_head_to_answer(hosts, operator) -> None:
    """A further host fetches alongside the lead, then its join waits: for the head's GCS to
    answer, and not at all once the deployment has ended."""
    d = launch(operator)
    head = RayNode.objects.get(deployment=d, role="head")
    with socket.socket() as gcs:
        gcs.bind(("127.0.0.1", 0))
        gcs.listen()
        port = gcs.getsockname()[1]
        RayNode.objects.filter(pk=head.pk).update(state="running", address="127.0.0.1", port=port)
        assert cluster._await_head(d) == (f"127.0.0.1:{port}", "", False)
    Deployment.objects.filter(pk=d.pk).update(status="stopping")
    began = time.monotonic()
    assert cluster._await_head(d) == (None, "deployment is stopping", True)
    assert time.monotonic() - began < 1
