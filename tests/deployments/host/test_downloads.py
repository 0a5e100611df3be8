"""A real host worker fetches weights from the Hub stand-in with huggingface_hub: a launch
downloads, then starts transformers serve offline on the snapshot, with its steps recorded;
a relaunch finds the weights on the host; pre-fetches show progress in order to the total,
resume after a cut connection and after a cancel, and refuse a gated repo and a full disk."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from deployments.catalog import cache_services
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.live import pushes
from deployments.live.enginelog import client
from deployments.models import (
    CachedModel,
    Deployment,
    DownloadStatus,
    HostDisk,
    LaunchPhase,
    ModelDownload,
)
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import BIG, GATED, MIB, TINY
from tests.support.waiting import wait_for
from tests.support.workers import start_fetch_worker

pytestmark = [pytest.mark.worker, pytest.mark.timeout(240)]
HOST = "fetchhost"


def _worker(host_worker: Any, model_root: Path, hub: HubStub, tmp_path: Path, **env: str) -> Any:
    return start_fetch_worker(host_worker, HOST, model_root, hub.url, tmp_path / "hf-home", **env)


def _events(kind: str, pk: int) -> list[dict[str, Any]]:
    entries = client().xrange(pushes.progress_key(kind, pk))
    return [json.loads(fields[b"p"]) for _, fields in entries]


def _launch(user: Any, name: str, repo: str) -> Deployment:
    request = LaunchRequest(name=name, model_ref=repo, host_name=HOST, engine="transformers")
    return deployment_create(user=user, request=request)


def _until_settled(d: Deployment, worker: Any, timeout_s: float = 150) -> Deployment:
    try:
        wait_for(
            lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed", "stopped"),
            timeout_s=timeout_s,
        )
    except AssertionError:
        print(worker.log()[-6000:])
        raise
    d.refresh_from_db()
    return d


@pytest.mark.engine
def test_launch_downloads_then_starts_offline_and_relaunch_needs_no_hub(
    host_worker: Any, model_root: Path, served: HubStub, operator: Any, tmp_path: Path
) -> None:
    worker = _worker(host_worker, model_root, served, tmp_path)
    began = time.monotonic()
    d = _until_settled(_launch(operator, "fetched", TINY), worker)
    first_s = time.monotonic() - began
    assert d.status == "running", (d.failure_reason, worker.log()[-4000:])

    download = ModelDownload.objects.get(deployment=d)
    assert download.status == DownloadStatus.DONE
    assert download.bytes_done == download.bytes_total > 0
    snapshot = tmp_path / "hf-home" / "hub" / "models--sbtest--tiny-llama" / "snapshots"
    assert d.argv[2].startswith(str(snapshot)), d.argv  # `transformers serve <snapshot>`
    assert d.env["HF_HUB_OFFLINE"] == "1"
    fetched = {n for n, _ in download.files.items()}
    assert "model.safetensors" in fetched and "config.json" in fetched

    phases = list(LaunchPhase.objects.filter(deployment=d).values_list("phase", flat=True))
    assert phases == ["downloading", "loading", "warming_up", "ready"], phases
    assert all(p.ended_at for p in LaunchPhase.objects.filter(deployment=d))
    pushed = _events("deployment", d.pk)
    downloading = [e for e in pushed if e["phase"] == "downloading" and e.get("total")]
    assert downloading and downloading[-1]["done"] == downloading[-1]["total"]
    assert [e["phase"] for e in pushed][-1] == "ready"

    # The inventory shows it on the host, complete, used by this deployment.
    wait_for(lambda: CachedModel.objects.filter(repo_id=TINY, complete=True).exists())
    cached = CachedModel.objects.get(repo_id=TINY)
    assert [u.pk for u in cache_services.users_of(cached)] == [d.pk]
    assert HostDisk.objects.get(host__name=HOST).free_bytes > 0
    with pytest.raises(cache_services.CacheError, match="in use on fetchhost by fetched"):
        cache_services.cached_delete(user=operator, cached=cached)

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped")

    # A relaunch asks the Hub nothing: the weights are on the host.
    served.reset_requests()
    began = time.monotonic()
    again = _until_settled(_launch(operator, "fetched-again", TINY), worker)
    second_s = time.monotonic() - began
    assert again.status == "running", again.failure_reason
    assert served.count("/sbtest/tiny-llama/resolve/") == 0
    assert not ModelDownload.objects.filter(deployment=again).exists()
    print(f"FIGURE launch->running first {first_s:.1f} s, relaunch {second_s:.1f} s")
    deployment_stop(user=operator, deployment=again)
    wait_for(lambda: Deployment.objects.get(pk=again.pk).status == "stopped")


def test_prefetch_progress_cut_resume_cancel_and_gated(
    host_worker: Any, model_root: Path, served: HubStub, operator: Any, tmp_path: Path
) -> None:
    worker = _worker(host_worker, model_root, served, tmp_path)
    served.throttle_bps = 24 * MIB
    served.cut_once["extra.safetensors"] = 10 * MIB

    # Progress in order, to the total, through a connection cut mid-file (resumed by Range).
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=BIG, revision="", host_names=[HOST], hub_token=None
    )
    wait_for(lambda: _status(row) in ("done", "failed", "cancelled"), 90)
    assert _status(row) == "done", (
        ModelDownload.objects.get(pk=row.pk).error,
        worker.log()[-3000:],
    )
    pushed = _events("download", row.pk)
    done = [e["done"] for e in pushed]
    assert done == sorted(done) and len(done) >= 3, done
    assert pushed[-1]["done"] == pushed[-1]["total"] > 48 * MIB
    assert pushed[-1]["download_status"] == "done"
    assert all("extra.safetensors" in e["files"] for e in pushed), pushed[:2]
    resumed = [
        r.range for r in served.requests if r.path.endswith("/extra.safetensors") and r.range
    ]
    assert resumed and resumed[0].startswith("bytes=") and resumed[0] != "bytes=0-", resumed
    wait_for(lambda: CachedModel.objects.filter(repo_id=BIG, complete=True).exists())

    # Cancel mid-way: the transfer stops, no snapshot counts as complete; the next one resumes.
    cache_services.cached_delete(user=operator, cached=CachedModel.objects.get(repo_id=BIG))
    wait_for(lambda: not CachedModel.objects.filter(repo_id=BIG).exists())
    served.throttle_bps = 8 * MIB
    served.reset_requests()
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=BIG, revision="", host_names=[HOST], hub_token=None
    )
    wait_for(lambda: ModelDownload.objects.get(pk=row.pk).bytes_done > 8 * MIB)
    cache_services.download_cancel(user=operator, download=ModelDownload.objects.get(pk=row.pk))
    wait_for(lambda: _status(row) == "cancelled")
    cancelled_at = timezone.now()
    wait_for(lambda: HostDisk.objects.filter(host__name=HOST, scanned_at__gt=cancelled_at).exists())
    assert not CachedModel.objects.filter(repo_id=BIG, complete=True).exists()
    served.throttle_bps = 0
    served.reset_requests()
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=BIG, revision="", host_names=[HOST], hub_token=None
    )
    wait_for(lambda: _status(row) in ("done", "failed"))
    assert _status(row) == "done"
    resumed = [
        r.range for r in served.requests if r.path.endswith("/extra.safetensors") and r.range
    ]
    assert resumed and resumed[0] != "bytes=0-", resumed  # went on from the cancelled part

    # A gated repo without a token fails with the Hub's own message.
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=GATED, revision="", host_names=[HOST], hub_token=None
    )
    wait_for(lambda: _status(row) in ("done", "failed"))
    error = ModelDownload.objects.get(pk=row.pk).error
    assert _status(row) == "failed" and "GatedRepoError" in error, error
    assert f"Access to model {GATED} is restricted" in error


def test_disk_refused_before_any_byte(
    host_worker: Any, model_root: Path, served: HubStub, operator: Any, tmp_path: Path
) -> None:
    _worker(
        host_worker, model_root, served, tmp_path, SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES=str(1 << 49)
    )
    served.reset_requests()
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=BIG, revision="", host_names=[HOST], hub_token=None
    )
    wait_for(lambda: _status(row) in ("done", "failed"))
    error = ModelDownload.objects.get(pk=row.pk).error
    assert _status(row) == "failed"
    assert "not enough disk for sbtest/big-weights" in error and "GiB free in" in error, error
    assert "524,288.00 GiB must stay free" in error  # the floor, with the numbers
    assert served.count("/sbtest/big-weights/resolve/", method="GET") == 0


@pytest.mark.engine
def test_stop_during_the_download_stops_the_transfer(
    host_worker: Any, model_root: Path, served: HubStub, operator: Any, tmp_path: Path
) -> None:
    worker = _worker(host_worker, model_root, served, tmp_path)
    served.throttle_bps = 4 * MIB
    d = _launch(operator, "stopped-early", BIG)
    wait_for(lambda: ModelDownload.objects.filter(deployment=d, bytes_done__gt=4 * MIB).exists())
    deployment_stop(user=operator, deployment=d)
    d = _until_settled(d, worker, 60)
    assert d.status == "stopped" and d.pid is None
    download = ModelDownload.objects.get(deployment=d)
    wait_for(lambda: _status(download) == "cancelled")
    done_at_cancel = ModelDownload.objects.get(pk=download.pk).bytes_done
    assert done_at_cancel < download.bytes_total
    (part,) = (tmp_path / "hf-home" / "hub" / ".shardboard-partial").glob("*.part")
    size = part.stat().st_size
    time.sleep(2)  # a window in which a transfer still running (4 MiB/s) would grow the part
    assert part.stat().st_size == size < 48 * MIB  # the transfer stopped; kept for a resume
    assert not CachedModel.objects.filter(repo_id=BIG, complete=True).exists()


def _status(row: ModelDownload) -> str:
    return str(ModelDownload.objects.filter(pk=row.pk).values_list("status", flat=True)[0])
