"""The figures for the note, measured on the real parts (and bounded so that they can fail):
download throughput through the host worker against huggingface_hub alone on the same
stand-in, and launch → running of a model already on the host against a first launch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import snapshot_download

from deployments.catalog import cache_services
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, ModelDownload
from tests.support.hubstub import HubStub
from tests.support.hubstub.served import MIB, folder_repo
from tests.support.waiting import wait_for
from tests.support.workers import start_fetch_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "figurehost"
LARGE = "sbtest/large-weights"
LARGE_BYTES = 512 * MIB


def test_throughput_and_relaunch(
    hub: HubStub,
    tiny_model: Path,
    host_worker: Any,
    model_root: Path,
    operator: Any,
    tmp_path: Path,
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sparse = {"extra.safetensors": LARGE_BYTES}
    hub.add_repo(folder_repo(LARGE, tiny_model, sparse_files=sparse, scratch=scratch))
    start_fetch_worker(host_worker, HOST, model_root, hub.url, tmp_path / "hf")

    began = time.monotonic()
    snapshot_download(LARGE, cache_dir=tmp_path / "alone", endpoint=hub.url, token=False)
    alone_s = time.monotonic() - began

    began = time.monotonic()
    (row,) = cache_services.prefetch_start(
        user=operator, repo_id=LARGE, revision="", host_names=[HOST]
    )
    wait_for(lambda: _status(row) in ("done", "failed"), 120)
    worker_s = time.monotonic() - began
    row.refresh_from_db()
    assert row.status == "done", row.error
    total = row.bytes_total
    alone, worker = total / alone_s / MIB, total / worker_s / MIB
    print(
        f"FIGURE download of {total / MIB:.0f} MiB: huggingface_hub alone {alone_s:.2f} s "
        f"({alone:.0f} MiB/s); through the host worker (task sent to done) {worker_s:.2f} s "
        f"({worker:.0f} MiB/s)"
    )
    assert worker >= 0.5 * alone

    # First launch (the weights cross a 100 MiB/s link) against a relaunch on the same host.
    ModelDownload.objects.all().delete()
    hub.throttle_bps = 100 * MIB
    first_s = _launch_s(operator, "first", "sbtest/tiny-llama-figure", hub, tiny_model, scratch)
    again_s = _launch_s(operator, "again", "sbtest/tiny-llama-figure", hub, tiny_model, scratch)
    print(
        f"FIGURE launch -> running: first launch {first_s:.1f} s, relaunch on the host {again_s:.1f} s"
    )
    assert again_s < first_s


def _launch_s(user: Any, name: str, repo: str, hub: HubStub, tiny: Path, scratch: Path) -> float:
    if repo not in hub.repos:
        sparse = {"extra.safetensors": 256 * MIB}
        hub.add_repo(folder_repo(repo, tiny, sparse_files=sparse, scratch=scratch))
    began = time.monotonic()
    d = deployment_create(
        user=user,
        request=LaunchRequest(name=name, model_ref=repo, host_name=HOST, engine="transformers"),
    )
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status in ("running", "failed"), 150)
    took = time.monotonic() - began
    d.refresh_from_db()
    assert d.status == "running", d.failure_reason
    deployment_stop(user=user, deployment=d)
    wait_for(lambda: Deployment.objects.get(pk=d.pk).status == "stopped")
    return took


def _status(row: ModelDownload) -> str:
    return str(ModelDownload.objects.filter(pk=row.pk).values_list("status", flat=True)[0])
