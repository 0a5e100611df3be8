"""A Hub model over two hosts: every host fetches the weights into its own Hub cache before
its Ray node runs, and each of vLLM's ranks finds them offline on its own node. Two real host
workers on loopback (each its own var directory and HF_HOME) download from the Hub stand-in
with huggingface_hub, both at once, form the deployment's Ray cluster, and the Ray test
engine resolves the model argument in each bundle as vLLM's workers do. A download that fails
on the follower fails the deployment with that host named and leaves nothing behind."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from django.urls import reverse

from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.live import pushes
from deployments.live.enginelog import client
from deployments.models import Deployment, DownloadStatus, GpuLease, ModelDownload, RayNode
from tests.deployments.host.test_ray_cluster import FOLLOWER, LEAD, left_behind, two_hosts
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import TINY
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.worker,
    pytest.mark.engine,
    pytest.mark.ray,
    pytest.mark.postgres,
    pytest.mark.timeout(300),
]


def fetching_hosts(
    host_worker: Any, model_root: Path, tmp_path: Path, endpoints: dict[str, str]
) -> list[Any]:
    per_host = {
        name: {
            "HF_HOME": str(tmp_path / f"{name}-hf"),
            "HF_ENDPOINT": url,
            "HF_HUB_OFFLINE": "0",
            "SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES": "0",
        }
        for name, url in endpoints.items()
    }
    return two_hosts(host_worker, model_root, tmp_path, per_host)


def launch(operator: Any, workers: list[Any]) -> Deployment:
    began = time.monotonic()
    d = deployment_create(
        user=operator,
        request=LaunchRequest(
            name="spread-hub",
            model_ref=TINY,
            host_name=LEAD,
            hosts=(FOLLOWER,),
            plan_request=planning.PlanRequest(tensor_parallel_size=1, pipeline_parallel_size=2),
        ),
    )
    try:
        wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 180)
    except AssertionError:
        print(*(w.log()[-4000:] for w in workers), sep="\n-----\n")
        raise
    d.refresh_from_db()
    print(f"FIGURE two-host Hub launch -> {d.status} in {time.monotonic() - began:.1f} s")
    return d


def pushed(download: ModelDownload) -> list[dict[str, Any]]:
    entries = client().xrange(pushes.progress_key("download", download.pk))
    return [json.loads(fields[b"p"]) for _, fields in entries]


def test_both_hosts_fetch_before_their_node_and_each_rank_loads_its_own_copy(
    host_worker: Any,
    model_root: Path,
    served: HubStub,
    operator: Any,
    tmp_path: Path,
    client: Client,
) -> None:
    endpoints = {LEAD: served.url, FOLLOWER: served.url}
    workers = fetching_hosts(host_worker, model_root, tmp_path, endpoints)
    served.throttle_bps = 160 * 1024  # the tiny model's 0.4 MiB: seconds on each host
    d = launch(operator, workers)
    assert d.status == "running", (d.failure_reason, [w.log()[-3000:] for w in workers])

    downloads = {m.host.name: m for m in ModelDownload.objects.filter(deployment=d)}
    assert set(downloads) == {LEAD, FOLLOWER}
    commit = downloads[LEAD].commit
    assert len(commit) == 40
    for name, row in downloads.items():
        assert row.status == DownloadStatus.DONE, (name, row.error)
        assert row.finished_at is not None
        took = (row.finished_at - row.created_at).total_seconds()
        print(f"FIGURE download on {name}: {row.bytes_total} bytes in {took:.2f} s")
        assert row.bytes_done == row.bytes_total > 0 and row.commit == commit
        snapshot = tmp_path / f"{name}-hf" / "hub" / "models--sbtest--tiny-llama" / "snapshots"
        assert (snapshot / commit / "model.safetensors").is_file(), name
    # Both hosts fetched at once: the follower did not wait for the lead's download to end.
    lead_done = downloads[LEAD].finished_at
    assert lead_done is not None and downloads[FOLLOWER].created_at < lead_done
    # The follower's node started only once its weights were whole (psutil's start time
    # counts from a boot time in whole seconds: up to a second early).
    node = RayNode.objects.get(deployment=d, host__name=FOLLOWER)
    finished = downloads[FOLLOWER].finished_at
    assert finished is not None and node.process_started_at is not None
    assert finished.timestamp() <= node.process_started_at + 1.0
    # Its progress reached the deployment's page, the host named, in order, to the total.
    progress = [p for p in pushed(downloads[FOLLOWER]) if p.get("total")]
    assert progress and all(p["id"] == d.pk and p["node_host"] == FOLLOWER for p in progress)
    dones = [p["done"] for p in progress]
    assert dones == sorted(dones) and dones[-1] == progress[-1]["total"]
    client.force_login(operator)
    page = client.get(reverse("deployment_detail", args=[d.pk])).content.decode()
    assert f'data-host-download="{FOLLOWER}"' in page and f'data-host-download="{LEAD}"' not in page

    # One model reference for every node: the repo id pinned to the commit, offline.
    argv = d.argv
    assert argv[2] == TINY and argv[argv.index("--revision") + 1] == commit
    assert d.env["HF_HUB_OFFLINE"] == "1"
    assert d.env["HF_HUB_CACHE"] == str(tmp_path / f"{LEAD}-hf" / "hub")
    placement = httpx.get(f"{d.base_url}/ray/placement", timeout=10).json()["bundles"]
    weights = httpx.get(f"{d.base_url}/ray/weights", timeout=10).json()["bundles"]
    for bundle, host in placement.items():
        found = weights[bundle]
        assert found["ok"] == "True", (host, found)
        own = tmp_path / f"{host}-hf" / "hub" / "models--sbtest--tiny-llama" / "snapshots"
        assert found["path"] == str(own / commit), (host, found)
    assert sorted(placement.values()) == [FOLLOWER, LEAD]

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped", interval_s=0.2)
    wait_for(lambda: not RayNode.objects.filter(deployment=d).exclude(state="stopped"))
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: not left_behind(d))


def test_a_download_failing_on_the_follower_fails_the_deployment_naming_it(
    host_worker: Any, model_root: Path, served: HubStub, operator: Any, tmp_path: Path
) -> None:
    # The follower's Hub endpoint answers nothing: its download fails, the lead's does not.
    endpoints = {LEAD: served.url, FOLLOWER: "http://127.0.0.1:9"}
    workers = fetching_hosts(host_worker, model_root, tmp_path, endpoints)
    d = launch(operator, workers)
    assert d.status == "failed", d.status
    assert "The Ray cluster did not form" in d.failure_reason, d.failure_reason
    assert f"download of {TINY} failed on {FOLLOWER}" in d.failure_reason, d.failure_reason
    row = ModelDownload.objects.get(deployment=d, host__name=FOLLOWER)
    assert row.status == DownloadStatus.FAILED
    states = dict(RayNode.objects.filter(deployment=d).values_list("host__name", "state"))
    wait_for(
        lambda: (
            dict(RayNode.objects.filter(deployment=d).values_list("host__name", "state"))
            == {LEAD: "stopped", FOLLOWER: "exited"}
        ),
    )
    assert states[FOLLOWER] == "exited"
    assert not GpuLease.objects.filter(deployment=d, active=True).exists()
    wait_for(lambda: not left_behind(d))
