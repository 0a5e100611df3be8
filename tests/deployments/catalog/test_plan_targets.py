"""Where the plan panel plans: the default host, offline and retired hosts, reason and offer."""

from __future__ import annotations

from typing import Any

from django.test import Client
from django.utils import timezone

from deployments.models import Deployment, GpuLease
from monitoring.models import Gpu, Host
from tests.support.catalog import BIG, GIB, QWEN, login_client
from tests.support.hubstub import HubStub


def make_host(name: str, gpus: int, *, online: bool = True, retired: bool = False) -> Host:
    now = timezone.now()
    host = Host.objects.create(
        name=name,
        queue=f"host.{name}",
        backend="nvml",
        last_heartbeat=now if online else None,
        retired_at=now if retired else None,
    )
    for index in range(gpus):
        Gpu.objects.create(
            host=host, index=index, uuid=f"{name}-{index}", name="H100", memory_total_bytes=80 * GIB
        )
    return host


def lease_all_but(host: Host, free: int, user: Any) -> None:
    d = Deployment.objects.create(name=f"on-{host.name}", model_id="m", host=host, created_by=user)
    for gpu in host.gpus.order_by("index")[free:]:
        GpuLease.objects.create(deployment=d, gpu=gpu, memory_bytes=70 * GIB)


def selected_target(html: str) -> str:
    select = html.split('id="plan-target-select"')[1].split("</select>")[0]
    return select.split(" selected")[0].rsplit('value="', 1)[1].split('"')[0]


def test_default_is_the_online_host_with_most_free_gpus(
    client: Client, operator: Any, hub: HubStub
) -> None:
    make_host("a-offline", 8, online=False)
    busy = make_host("b-busy", 8)
    lease_all_but(busy, 2, operator)
    make_host("c-free", 4)
    make_host("d-retired", 8, online=False, retired=True)
    login_client(client, operator)
    html = client.get(f"/models/{BIG}/").content.decode()
    assert selected_target(html) == "c-free"
    assert "c-free (4 of 4 GPUs free)" in html and "b-busy (2 of 8 GPUs free)" in html
    assert "a-offline (offline)" in html
    assert "d-retired" not in html


def test_no_online_host_plans_a_what_if(client: Client, viewer: Any, hub: HubStub) -> None:
    make_host("a-offline", 8, online=False)
    login_client(client, viewer)
    html = client.get(f"/models/{BIG}/").content.decode()
    assert selected_target(html) == "whatif"


def test_offline_host_is_planned_on_when_asked_but_not_launched(
    client: Client, operator: Any, hub: HubStub
) -> None:
    make_host("gone", 4, online=False)
    login_client(client, operator)
    response = client.get("/models/plan/", {"ref": BIG, "target": "gone"})
    data = response.json()
    assert response.status_code == 200 and data["ok"]
    assert data["target"]["online"] is False
    assert data["notice"].startswith("gone is offline")


def test_a_retired_host_is_not_a_target(client: Client, viewer: Any, hub: HubStub) -> None:
    make_host("old", 4, online=False, retired=True)
    login_client(client, viewer)
    response = client.get("/models/plan/", {"ref": BIG, "target": "old"})
    assert response.status_code == 400
    assert "no registered host 'old'" in response.json()["error"]


def test_reason_and_the_clip_offer(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    data = client.get("/models/plan/", {"ref": BIG, "gpus": "2x80GiB@nvlink"}).json()
    assert data["plan"]["tensor_parallel_size"] == 2
    assert data["plan"]["max_model_len"] == 131072
    assert data["reason"].startswith("TP 2 × PP 1 serves the full 131,072-token context")
    offer = data["clip_offer"]
    assert offer["tensor_parallel_size"] == 1 and offer["max_model_len"] < 131072
    clipped = next(a for a in data["alternatives"] if a["context_clipped"])
    assert clipped["fits"] and not clipped["chosen"]


def test_a_clipped_plan_launches_with_its_length(
    client: Client, operator: Any, hub: HubStub
) -> None:
    make_host("one", 1)
    login_client(client, operator)
    data = client.get("/models/plan/", {"ref": BIG, "target": "one"}).json()
    assert data["plan"]["context_clipped"]
    assert data["reason"].startswith("No layout on these GPUs serves the 131,072-token context")
    assert data["plan"]["launch"]["max_model_len"] == str(data["plan"]["max_model_len"])


def test_goal_and_concurrency_reach_the_planner(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    params = {"ref": BIG, "gpus": "8x80GiB@nvlink"}
    assert client.get("/models/plan/", params).json()["plan"]["tensor_parallel_size"] == 4
    wide = client.get("/models/plan/", {**params, "concurrency": "8"}).json()
    assert wide["plan"]["tensor_parallel_size"] == 8
    many = client.get("/models/plan/", {**params, "goal": "throughput"}).json()
    assert many["plan"]["replicas"] == 4
    bad = client.get("/models/plan/", {**params, "goal": "fastest"})
    assert bad.status_code == 400 and "goal" in bad.json()["error"]


def test_a_partly_reserved_gpu_is_planned_with_what_is_left_and_explained(
    client: Client, operator: Any, hub: HubStub
) -> None:
    host = make_host("shared", 1)
    other = Deployment.objects.create(name="other", model_id="m", host=host, created_by=operator)
    GpuLease.objects.create(deployment=other, gpu=host.gpus.get(), memory_bytes=40 * GIB)
    login_client(client, operator)
    whole = client.get("/models/plan/", {"ref": QWEN, "target": "shared"}).json()
    assert not whole["ok"]  # 92 % of the GPU: vLLM would not start beside the other one
    assert "Free memory on device cuda:0 (40.00/80.00 GiB)" in whole["error"]
    sized = client.get(
        "/models/plan/", {"ref": QWEN, "target": "shared", "concurrency": 4, "max_model_len": 8192}
    ).json()
    assert sized["ok"], sized["error"]
    assert "--gpu-memory-utilization 0.25 " in sized["plan"]["commands"]["vllm"]
    shares = sized["plan"]["shares"]
    assert shares[0].startswith("Sized for 4 requests of 8,192 tokens at once")
    assert shares[1].startswith("Reserves 20 GiB of GPU 0 (80 GiB), where 40 GiB is already held")
    assert shares[1].endswith("; 20 GiB stays free for other deployments.")
    assert sized["plan"]["launch"]["concurrency"] == "4"


def test_replicas_and_placement_reach_the_planner(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    params = {"ref": QWEN, "gpus": "2x4x80GiB@nvlink", "replicas": "3"}
    spread = client.get("/models/plan/", params).json()["plan"]
    assert (spread["replicas"], spread["replicas_asked"]) == (3, 3)
    assert spread["replicas_text"] == "3 of 3 replicas placed"
    assert spread["replica_rows"] == [
        "replica 1: what-if-1 GPU 0",
        "replica 2: what-if-2 GPU 0",
        "replica 3: what-if-1 GPU 1",
    ]
    packed = client.get("/models/plan/", {**params, "placement": "packed"}).json()["plan"]
    assert [r.split(" GPU")[0] for r in packed["replica_rows"]] == [
        "replica 1: what-if-1",
        "replica 2: what-if-1",
        "replica 3: what-if-1",
    ]
    most = client.get("/models/plan/", {**params, "replicas": "max"}).json()["plan"]
    assert (most["replicas"], most["replicas_text"]) == (8, "room for 8 replicas")
    assert most["replica_rows"][-1] == "replica 8: what-if-2 GPU 3"


def test_replicas_on_a_registered_host(client: Client, viewer: Any, hub: HubStub) -> None:
    make_host("four", 4)
    login_client(client, viewer)
    data = client.get(
        "/models/plan/", {"ref": QWEN, "target": "four", "replicas": "2", "placement": "packed"}
    ).json()
    assert data["ok"] and data["plan"]["replica_rows"] == [
        "replica 1: four GPU 0",
        "replica 2: four GPU 1",
    ]


def test_a_replica_that_cannot_be_placed_is_the_panels_error(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    params = {"ref": BIG, "gpus": "3x3x80GiB@nvlink", "replicas": "4", "tensor_parallel_size": 2}
    data = client.get("/models/plan/", params).json()
    assert not data["ok"]
    assert data["error"] == (
        "replica 4 of 4: no host has 2 usable GPUs left for a tensor-parallel group (the most "
        "left on one host is 1)"
    )
    assert data["plan"]["replicas_text"] == "3 of 4 replicas placed"
    assert data["reason"].startswith("TP 2 × PP 1, the layout you asked for, places 3 of 4")


def test_a_tight_plan_says_so(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    params = {"ref": QWEN, "gpus": "1x80GiB", "gpu_memory_utilization": "1"}
    data = client.get("/models/plan/", params).json()
    assert data["ok"] and data["plan"]["tight"]
    assert data["plan"]["tight_text"].startswith(
        "Tight fit: vLLM should start, but the prediction is within its error margin of a "
        "limit, so it may not: leaves 0.00 GiB of a 80.00 GiB GPU outside"
    )
    chosen = next(a for a in data["alternatives"] if a["chosen"])
    assert chosen["tight"] and chosen["tight_reasons"] == data["plan"]["tight_reasons"]
    roomy = client.get("/models/plan/", {**params, "gpu_memory_utilization": ""}).json()
    assert roomy["plan"]["tight"] is False and roomy["plan"]["tight_text"] == ""


def test_bad_replicas_and_placement_are_400(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    params = {"ref": QWEN, "gpus": "2x80GiB"}
    for extra, words in [
        ({"replicas": "lots"}, "replicas: enter a whole number of replicas, or max"),
        ({"replicas": "0"}, "replicas: enter a whole number of replicas, or max"),
        ({"placement": "diagonal"}, "placement:"),
    ]:
        bad = client.get("/models/plan/", {**params, **extra})
        assert bad.status_code == 400 and bad.json()["error"].startswith(words), bad.json()
