"""A Hub GGUF launched on llama.cpp (issue 31): the launch names the repo and the chosen
quantization's file; the host worker fetches that file alone (split parts together) from the
Hub stand-in, with the download's row as for other models, and llama-server loads it from the
host's Hub cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments.catalog.gguf_write import convert_demo
from deployments.handoff import sealed
from deployments.host.downloads import hub as downloads
from deployments.host.downloads.gguf import all_parts, hub_gguf
from deployments.lifecycle.services import (
    DeploymentError,
    LaunchRequest,
    deployment_create,
    deployment_stop,
)
from deployments.models import Deployment, DownloadStatus, ModelDownload, Status
from monitoring.models import Gpu, Host
from tests.support.catalog import TOKEN
from tests.support.gguf_models import gguf_repo
from tests.support.hubstub import HubStub
from tests.support.llama_server import server_binary
from tests.support.waiting import wait_for
from tests.support.workers import start_fetch_worker

REPO = "sbtest/demo-GGUF"
CHOSEN = "demo-Q8_0.gguf"
OTHER = "demo-Q4_K_M.gguf"  # another quantization of the repo: never fetched
HOST = "gguf-hub-db"
WORKER_HOST = "gguf-hub-worker"
GIB = 1 << 30


@pytest.fixture
def demo_repo(hub: HubStub, tiny_model: Path, tmp_path: Path) -> bytes:
    """The stand-in serving the demo GGUF as one quantization of a repo with two."""
    content = convert_demo(tiny_model, tmp_path / "demo.gguf").read_bytes()
    other = b"GGUF" + bytes(4096)
    hub.add_repo(gguf_repo(REPO, {CHOSEN: (content, len(content)), OTHER: (other, len(other))}))
    return content


@pytest.mark.parametrize(
    ("model_id", "expected"),
    [
        ("org/M-GGUF/M-Q4_K_M.gguf", ("org/M-GGUF", ("M-Q4_K_M.gguf",))),
        (
            "org/M-GGUF/Q8/M-Q8_0-00001-of-00003.gguf",
            (
                "org/M-GGUF",
                (
                    "Q8/M-Q8_0-00001-of-00003.gguf",
                    "Q8/M-Q8_0-00002-of-00003.gguf",
                    "Q8/M-Q8_0-00003-of-00003.gguf",
                ),
            ),
        ),
        ("/models/m.gguf", None),
        ("org/M-GGUF", None),
        ("org/repo/model.safetensors", None),
    ],
)
def test_a_launch_model_id_names_the_repo_and_every_part(
    model_id: str, expected: tuple[str, tuple[str, ...]] | None
) -> None:
    found = hub_gguf(model_id)
    assert (None if found is None else (found.repo_id, found.files)) == expected
    assert all_parts("x.gguf") == ("x.gguf",)


def _job(hub: HubStub, tmp_path: Path, files: tuple[str, ...]) -> downloads.Job:
    return downloads.Job(REPO, None, tmp_path / "hf", endpoint=hub.url, only_files=files)


def _fetch(job: downloads.Job) -> downloads.Fetched:
    return downloads.fetch(job, on_progress=lambda p: None, should_stop=lambda: False)


def test_only_the_named_files_are_fetched(hub: HubStub, demo_repo: bytes, tmp_path: Path) -> None:
    fetched = _fetch(_job(hub, tmp_path, (CHOSEN,)))
    assert fetched.files == (CHOSEN,) and fetched.total_bytes == len(demo_repo)
    assert (fetched.snapshot / CHOSEN).read_bytes() == demo_repo
    assert not (fetched.snapshot / OTHER).exists()
    assert hub.count(f"/{REPO}/resolve/", "GET") >= 1
    assert hub.count(f"/{REPO}/resolve/main/{OTHER}") == 0
    with pytest.raises(downloads.DownloadError, match=r"has no file demo-F16\.gguf"):
        _fetch(_job(hub, tmp_path, ("demo-F16.gguf",)))
    # the disk floor holds for a GGUF as for any download: refused before a byte is fetched
    with pytest.raises(downloads.DiskRefused):
        _fetch(
            downloads.Job(
                REPO,
                None,
                tmp_path / "hf2",
                endpoint=hub.url,
                only_files=(CHOSEN,),
                min_free_bytes=1 << 60,
            )
        )


@pytest.fixture
def db_host(db: None) -> Host:
    host = Host.objects.create(
        name=HOST,
        queue=f"host.{HOST}",
        backend="simulated",
        simulated=True,
        last_heartbeat=timezone.now(),
    )
    Gpu.objects.create(
        host=host, index=0, uuid="GPU-ggufhub-0", name="sim", memory_total_bytes=8 * GIB
    )
    return host


def test_a_hub_gguf_launch_names_the_repo_and_its_file(
    db_host: Host, demo_repo: bytes, operator: Any
) -> None:
    request = LaunchRequest(
        name="hubgguf", model_ref=f"{REPO}:Q8_0", host_name=HOST, engine="llamacpp"
    )
    d = deployment_create(user=operator, request=request, hub_token="  ")
    assert d.model_id == f"{REPO}/{CHOSEN}" and d.revision == "main"
    assert d.snapshot.model_ref == f"{REPO}:Q8_0"
    argv = d.planned_argv
    assert argv[argv.index("-m") + 1] == f"{REPO}/{CHOSEN}"
    audit = AuditEvent.objects.get(action="deployment.create", target_id=str(d.pk))
    assert audit.detail["engine"] == "llamacpp" and audit.detail["model"] == f"{REPO}:Q8_0"


@pytest.mark.worker
@pytest.mark.engine
@pytest.mark.timeout(300)
def test_a_hub_gguf_is_fetched_alone_then_served(
    host_worker: Any,
    model_root: Path,
    demo_repo: bytes,
    hub: HubStub,
    operator: Any,
    tmp_path: Path,
) -> None:
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server built here: run scripts/llama.sh")
    hf_home = tmp_path / "hf-home"
    worker = start_fetch_worker(
        host_worker,
        WORKER_HOST,
        model_root,
        hub.url,
        hf_home,
        SHARDBOARD_LLAMA_SERVER_BIN=str(binary),
    )
    request = LaunchRequest(
        name="hubgguf", model_ref=f"{REPO}:{CHOSEN}", host_name=WORKER_HOST, engine="llamacpp"
    )
    d = deployment_create(user=operator, request=request)
    try:
        wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=120, interval_s=0.5)
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    assert d.status == Status.RUNNING, (d.failure_reason, worker.log()[-4000:])
    download = ModelDownload.objects.get(deployment=d)
    assert download.status == DownloadStatus.DONE and download.repo_id == REPO
    assert list(download.files) == [CHOSEN]
    assert download.bytes_done == download.bytes_total == len(demo_repo)
    assert hub.count(f"/{REPO}/resolve/main/{OTHER}") == 0
    snapshots = hf_home / "hub" / "models--sbtest--demo-GGUF" / "snapshots"
    model = d.argv[d.argv.index("-m") + 1]
    assert model.startswith(str(snapshots)) and model.endswith(f"/{CHOSEN}"), d.argv
    assert Path(model).read_bytes() == demo_repo
    assert d.env["HF_HUB_OFFLINE"] == "1"

    deployment_stop(user=operator, deployment=d)
    wait_for(lambda: _status(d) == "stopped", interval_s=0.2)

    # Launched again, the file is on the host: nothing is asked of the Hub's files.
    hub.reset_requests()
    request = LaunchRequest(
        name="hubgguf2", model_ref=f"{REPO}:{CHOSEN}", host_name=WORKER_HOST, engine="llamacpp"
    )
    again = deployment_create(user=operator, request=request)
    wait_for(lambda: _status(again) in ("running", "failed"), timeout_s=120, interval_s=0.5)
    assert again.status == Status.RUNNING, again.failure_reason
    assert not ModelDownload.objects.filter(deployment=again).exists()
    assert hub.count(f"/{REPO}/resolve/main/{CHOSEN}", "GET") <= 1  # the web's header read
    deployment_stop(user=operator, deployment=again)
    wait_for(lambda: _status(again) == "stopped", interval_s=0.2)


def _status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def test_a_gated_gguf_is_planned_with_the_launchers_token(
    db_host: Host, hub: HubStub, demo_repo: bytes, operator: Any
) -> None:
    """The header is read with the launcher's own token (the server has none), and the row
    keeps it sealed for the host's download."""
    hub.repos[REPO].info["gated"] = "manual"
    hub.tokens[TOKEN].add(REPO)
    request = LaunchRequest(
        name="gatedgguf", model_ref=f"{REPO}:Q8_0", host_name=HOST, engine="llamacpp"
    )
    with pytest.raises(DeploymentError, match="is gated: request access"):
        deployment_create(user=operator, request=request)
    d = deployment_create(user=operator, request=request, hub_token=TOKEN)
    assert (
        d.model_id == f"{REPO}/{CHOSEN}"
        and sealed.unseal(d.hub_token_sealed, deployment_id=d.pk) == TOKEN
    )
