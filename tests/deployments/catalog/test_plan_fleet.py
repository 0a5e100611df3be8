"""The plan panel over several hosts: all online hosts, or the ones picked. A model too large
for any one host gets a plan whose stages span hosts, and its Launch posts the first host plus
the others, which leases GPUs and writes a Ray node on each (rows only: no worker, no Ray)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments.models import Deployment, GpuLease, ModelDownload, RayNode
from monitoring.models import Host
from tests.support.catalog import GIB, QWEN, login_client
from tests.support.hosts import sim_host
from tests.support.hubstub import HubStub

pytestmark = pytest.mark.django_db

# Qwen2.5-7B in bfloat16 is about 14 GiB of weights: no 12 GiB GPU holds it, two do. Local,
# as simulated hosts serve local models only.
LOCAL = "local:0/qwen-local"
SMALL = 12 * GIB


@pytest.fixture
def fleet(model_roots: dict[str, Any]) -> list[Host]:
    return [sim_host("fleet-a", 1, SMALL), sim_host("fleet-b", 1, SMALL)]


def plan(client: Client, **params: Any) -> tuple[int, dict[str, Any]]:
    response = client.get("/models/plan/", {"ref": LOCAL, **params})
    return response.status_code, response.json()


def test_one_host_alone_has_no_launchable_plan(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    login_client(client, operator)
    status, data = plan(client, target="fleet-a")
    assert status == 422 and not data["ok"]


def test_all_online_hosts_yield_a_spanning_plan_and_its_launch(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    login_client(client, operator)
    status, data = plan(client, target="fleet")
    assert status == 200 and data["ok"], data["error"]
    assert data["target"]["label"] == "all online hosts (fleet-a, fleet-b)"
    assert data["target"]["hosts"] == ["fleet-a", "fleet-b"] and data["target"]["online"]
    p = data["plan"]
    assert (p["tensor_parallel_size"], p["pipeline_parallel_size"], p["multi_host"]) == (1, 2, True)
    assert p["stage_rows"] == [
        "stage 1: fleet-a GPU 0, layers 0–13 (Ray head, runs the engine)",
        "stage 2: fleet-b GPU 0, layers 14–27 (Ray worker)",
    ]
    assert p["launch"]["host"] == "fleet-a" and p["launch_hosts"] == ["fleet-b"]
    # On simulated GPUs vLLM runs on the CPU, whose build refuses Ray: the page says so in
    # place of a Launch, and a launch posted anyway is refused with the same words.
    assert "vLLM on the CPU cannot run on Ray" in p["launch_block"]
    form = {**p["launch"], "name": "spans", "hosts": p["launch_hosts"]}
    response = client.post("/deployments/new/", form)
    assert "vLLM on the CPU cannot run on Ray" in response.content.decode()
    assert not Deployment.objects.filter(name="spans").exists()
    # The same two hosts as GPU hosts (a CUDA vLLM): the plan launches over both.
    Host.objects.filter(name__in=("fleet-a", "fleet-b")).update(simulated=False)
    status, data = plan(client, target="fleet")
    p = data["plan"]
    assert status == 200 and p["multi_host"]
    assert p["launch_block"] == "" and "Ray cluster" in p["launch_note"]
    assert p["prefetch_hosts"] == []  # a local folder: nothing to fetch
    assert "--distributed-executor-backend ray" in p["commands"]["vllm"]

    form = {**p["launch"], "name": "spans", "hosts": p["launch_hosts"]}
    response = client.post("/deployments/new/", form)
    d = Deployment.objects.get(name="spans")
    assert response.status_code == 302 and response["Location"] == f"/deployments/{d.pk}/"
    assert d.host.name == "fleet-a" and d.spans_hosts
    leases = GpuLease.objects.filter(deployment=d, active=True)
    assert sorted(leases.values_list("gpu__host__name", "gpu__index")) == [
        ("fleet-a", 0),
        ("fleet-b", 0),
    ]
    nodes = RayNode.objects.filter(deployment=d).order_by("role")
    assert [(n.host.name, n.role, n.num_gpus) for n in nodes] == [
        ("fleet-a", "head", 1),
        ("fleet-b", "worker", 1),
    ]


def test_a_plan_that_fits_one_host_launches_there_alone(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    sim_host("fleet-c", 1, 80 * GIB)
    login_client(client, operator)
    status, data = plan(client, target="fleet")
    p = data["plan"]
    assert status == 200 and not p["multi_host"] and p["stage_rows"] == []
    assert p["launch"]["host"] == "fleet-c" and p["launch_hosts"] == []
    client.post("/deployments/new/", {**p["launch"], "name": "alone"})
    d = Deployment.objects.get(name="alone")
    assert d.host.name == "fleet-c" and not RayNode.objects.filter(deployment=d).exists()


def test_picked_hosts_with_an_offline_one_plan_but_do_not_launch(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    stale = timezone.now() - timedelta(hours=1)
    Host.objects.filter(name="fleet-b").update(last_heartbeat=stale)
    login_client(client, operator)
    _, everyone = plan(client, target="fleet")
    assert everyone["target"]["hosts"] == ["fleet-a"] and not everyone["ok"]
    status, data = plan(client, target="picked", hosts=["fleet-a", "fleet-b"])
    assert status == 200 and data["plan"]["multi_host"]
    assert data["target"]["online"] is False
    assert data["notice"].startswith("fleet-b is offline: the plan uses the GPUs it last reported")


def test_replicas_over_hosts_are_not_one_launch(
    client: Client, operator: Any, hub: HubStub, model_roots: dict[str, Any]
) -> None:
    sim_host("big-a", 1, 80 * GIB)
    sim_host("big-b", 1, 80 * GIB)
    login_client(client, operator)
    _, data = plan(client, target="fleet", replicas="2")
    assert data["ok"] and data["plan"]["launch_block"].startswith(
        "These replicas are placed on 2 hosts (big-a, big-b), and one launch runs its replicas"
    )


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"target": "picked", "hosts": ["fleet-a", "nowhere"]}, "no registered host 'nowhere'"),
        ({"target": "picked", "hosts": ["fleet-a", "old"]}, "no registered host 'old'"),
        ({"target": "picked"}, "Pick at least one host to plan on."),
        ({"target": "picked", "hosts": ["x" * 5000]}, "A host name is at most 100 characters."),
        ({"target": "picked", "hosts": [f"h{i}" for i in range(65)]}, "Pick at most 64 hosts."),
        ({"target": "nowhere"}, "There is no registered host 'nowhere'"),
    ],
)
def test_bad_hosts_are_a_clear_400(
    client: Client, viewer: Any, hub: HubStub, fleet: list[Host], params: Any, says: str
) -> None:
    Host.objects.create(name="old", queue="host.old", retired_at=timezone.now())
    login_client(client, viewer)
    status, data = plan(client, **params)
    assert status == 400 and says in data["error"], data


def test_no_online_host_is_a_clear_400(
    client: Client, viewer: Any, hub: HubStub, model_roots: dict[str, Any]
) -> None:
    login_client(client, viewer)
    status, data = plan(client, target="fleet")
    assert status == 400 and data["error"].startswith("No host is online")


def test_the_page_offers_the_fleet_and_a_pick(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    login_client(client, operator)
    Host.objects.filter(name__in=("fleet-a", "fleet-b")).update(simulated=False)  # GPU hosts
    html = client.get("/models/local/0/qwen-local/").content.decode()
    fleet = '<option value="fleet" selected>All online hosts (2 hosts, 2 of 2 GPUs free)</option>'
    assert fleet in html  # no host alone holds the model: the fleet's plan is the default
    assert '<option value="picked">Hosts I pick…</option>' in html
    assert "stage 2: fleet-b GPU 0, layers 14–27 (Ray worker)" in html
    assert '<input type="hidden" name="hosts" value="fleet-b">' in html
    assert 'id="launch-button" >Launch this plan' in html.replace("  ", " ")


def test_the_default_stays_on_one_host_when_it_holds_the_model(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    sim_host("fleet-c", 2, 80 * GIB)  # the most free GPUs: the default host
    login_client(client, operator)
    html = client.get("/models/local/0/qwen-local/").content.decode()
    assert '<option value="fleet-c" data-online="1" selected>' in html
    assert 'name="hosts" value=' not in html.split('id="launch-form"')[1]


def test_a_hub_model_over_several_hosts_offers_a_prefetch_onto_all_of_them(
    client: Client, operator: Any, hub: HubStub, fleet: list[Host]
) -> None:
    login_client(client, operator)
    response = client.get("/models/plan/", {"ref": QWEN, "target": "fleet"})
    p = response.json()["plan"]
    assert p["multi_host"] and p["prefetch_hosts"] == ["fleet-a", "fleet-b"]
    page = client.get(f"/models/{QWEN}/", {"target": "fleet"}).content.decode()
    assert 'id="prefetch-plan-form"' in page

    form = {"repo_id": p["launch"]["model_ref"], "revision": "", "hosts": p["prefetch_hosts"]}
    assert client.post("/models/on-hosts/prefetch/", form).status_code == 302
    rows = ModelDownload.objects.filter(repo_id=QWEN).values_list("host__name", "status")
    assert sorted(rows) == [("fleet-a", "queued"), ("fleet-b", "queued")]
    audit = AuditEvent.objects.get(action="model.prefetch", target_id=QWEN)
    assert audit.detail["hosts"] == ["fleet-a", "fleet-b"]
