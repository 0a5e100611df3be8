"""A download's bookkeeping on the host worker: its row, its pushes, its manifest.

`for_launch` fetches a deployment's weights before its engine starts (the launch's step
"downloading"); `prefetch` runs an operator's pre-fetch. Each download is a ``ModelDownload``
row, updated once a second, and pushes its progress (bytes, rate, time left, files) to the
pages. A revision fetched whole gets a manifest (`manifest`): with it, a relaunch
of the same model finds every file in the cache and starts without asking the Hub anything.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone
from huggingface_hub import constants as hf_constants

from deployments.engines.phases import DOWNLOADING
from deployments.host.downloads import hub, inventory
from deployments.host.downloads.gguf import hub_gguf
from deployments.host.downloads.manifest import complete_snapshot, save_manifest
from deployments.host.launchphases import Recorder
from deployments.live import pushes
from deployments.models import Deployment, DownloadStatus, Engine, ModelDownload, Status
from monitoring.models import Host

log = logging.getLogger(__name__)
SAVE_EVERY_S = 1.0


def cache_dir() -> Path:
    """This host's Hub cache (HF_HOME/hub or HF_HUB_CACHE, as huggingface_hub reads them)."""
    return Path(hf_constants.HF_HUB_CACHE)


@dataclass(frozen=True, slots=True)
class Outcome:
    snapshot: Path | None = None  # where the engine finds the weights
    ended: str = ""  # why the launch goes no further ("": go on)


def _job(repo_id: str, revision: str, token: str | None, files: tuple[str, ...] = ()) -> hub.Job:
    return hub.Job(
        repo_id=repo_id,
        revision=revision or None,
        cache_dir=cache_dir(),
        endpoint=settings.HF_ENDPOINT or None,
        token=token,
        min_free_bytes=settings.SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES,
        only_files=files,
    )


def weights_of(d: Deployment) -> tuple[str, tuple[str, ...]]:
    """The repo a launch fetches from and the files it needs (none named: `select_files`)."""
    gguf = hub_gguf(d.model_id) if d.engine == Engine.LLAMACPP else None
    return (gguf.repo_id, gguf.files) if gguf else (d.model_id, ())


def _complete(repo_id: str, revision: str, files: tuple[str, ...]) -> Path | None:
    """An earlier whole download's snapshot, holding `files` where some are named (another
    quantization of a GGUF repo may be all that is there)."""
    found = complete_snapshot(repo_id, revision)
    if found is None or not all((found / name).is_file() for name in files):
        return None
    return found


def commit_for(d: Deployment, token: str | None) -> str:
    """The commit the revision of `d` stands for: the one a whole earlier download on this
    host holds (the Hub is not asked), else the Hub's; "" when the Hub cannot say."""
    repo_id, files = weights_of(d)
    found = _complete(repo_id, d.revision, files)
    if found is not None:
        return found.name
    try:
        return hub.resolve(_job(repo_id, d.revision, token, files)).commit
    except hub.DownloadError:
        return ""


def for_launch(d: Deployment, token: str | None, recorder: Recorder, commit: str = "") -> Outcome:
    """The weights of `d` on this host: from an earlier whole download, else from the Hub
    (at `commit` when the launch pinned one for every host). A Hub GGUF: its quantization's
    files only."""
    repo_id, files = weights_of(d)
    found = _complete(repo_id, d.revision, files)
    if found is not None:
        recorder.enter(DOWNLOADING, detail="already on this host")
        return Outcome(snapshot=found)
    row = _launch_row(d, d.host, d.revision, repo_id)
    recorder.enter(DOWNLOADING, download=row.pk)
    status = Status(d.status)  # pending, or restarting for an automatic restart

    def still_wanted() -> bool:
        return Deployment.objects.filter(pk=d.pk, status=status).exists()

    return _fetch_for(d, row, token, still_wanted, recorder, commit)


def for_node(d: Deployment, host: Host, commit: str, token: str | None) -> Outcome:
    """The weights of `d` on a further host of a launch over several hosts, at the commit the
    lead resolved (every node must load the same files), before this host's Ray node joins.
    Progress goes to the deployment's page with the host named."""
    found = complete_snapshot(d.model_id, commit)
    if found is not None:
        return Outcome(snapshot=found)
    row = _launch_row(d, host, commit)

    def still_wanted() -> bool:
        return Deployment.objects.filter(pk=d.pk, status__in=[Status.PENDING]).exists()

    return _fetch_for(d, row, token, still_wanted, None)


def _launch_row(d: Deployment, host: Host, revision: str, repo_id: str = "") -> ModelDownload:
    return ModelDownload.objects.create(
        host=host,
        repo_id=repo_id or d.model_id,
        revision=revision,
        deployment=d,
        created_by=d.created_by,
        status=DownloadStatus.DOWNLOADING,
    )


def _fetch_for(
    d: Deployment,
    row: ModelDownload,
    token: str | None,
    still_wanted: Callable[[], bool],
    recorder: Recorder | None,
    commit: str = "",
) -> Outcome:
    """`row.revision` names the manifest (the revision as asked); `commit`, where given, is
    what is fetched."""
    repo_id, files = weights_of(d)
    job = _job(repo_id, commit or row.revision, token, files)
    try:
        fetched = _run(row, job, still_wanted, recorder)
    except hub.Cancelled:
        return Outcome(ended="stopped during the download")
    except hub.DownloadError as exc:
        return Outcome(ended=f"download of {repo_id} failed on {row.host.name}: {exc}")
    return Outcome(snapshot=fetched.snapshot)


def prefetch(download_id: int, token: str | None) -> dict[str, Any]:
    row = ModelDownload.objects.select_related("host").get(pk=download_id)
    if row.status != DownloadStatus.QUEUED:
        return {"skipped": f"status is {row.status}"}
    if not ModelDownload.objects.filter(pk=row.pk, status=DownloadStatus.QUEUED).update(
        status=DownloadStatus.DOWNLOADING
    ):
        return {"skipped": "taken by another delivery"}

    def still_wanted() -> bool:
        return not ModelDownload.objects.filter(pk=row.pk, cancel_requested=True).exists()

    try:
        fetched = _run(row, _job(row.repo_id, row.revision, token), still_wanted, None)
    except hub.DownloadError as exc:
        return {"failed": str(exc)}
    return {"done": row.pk, "bytes": fetched.total_bytes}


def _run(
    row: ModelDownload,
    job: hub.Job,
    still_wanted: Callable[[], bool],
    recorder: Recorder | None,
) -> hub.Fetched:
    push = _Pusher(row, recorder)
    try:
        fetched = hub.fetch(job, on_progress=push, should_stop=lambda: not still_wanted())
    except hub.Cancelled as exc:
        _end(row, DownloadStatus.CANCELLED, str(exc), push)
        raise
    except hub.DownloadError as exc:
        _end(row, DownloadStatus.FAILED, str(exc), push)
        raise
    except Exception as exc:  # a network or disk error huggingface_hub did not wrap
        _end(row, DownloadStatus.FAILED, f"{type(exc).__name__}: {exc}", push)
        raise hub.DownloadError(f"{type(exc).__name__}: {exc}") from exc
    save_manifest(job.repo_id, row.revision, fetched)
    row.commit = fetched.commit
    _end(row, DownloadStatus.DONE, "", push)
    inventory.report_soon()
    return fetched


def _end(row: ModelDownload, status: DownloadStatus, error: str, push: _Pusher) -> None:
    row.status, row.error, row.finished_at = status, error[:2000], timezone.now()
    row.save(update_fields=["status", "error", "finished_at", "commit"])
    push.final()
    log.info("download %s of %s: %s %s", row.pk, row.repo_id, status, error)


class _Pusher:
    """Each progress report: to the pages (at most twice a second), to the row once a second."""

    def __init__(self, row: ModelDownload, recorder: Recorder | None) -> None:
        self.row, self.recorder = row, recorder
        if recorder is None:
            pushes.reset_progress(pushes.progress_key("download", row.pk))
        self.saved_at = 0.0
        self.last: hub.Progress | None = None

    def __call__(self, p: hub.Progress) -> None:
        self.last = p
        row = self.row
        row.commit, row.bytes_done, row.bytes_total = p.commit, p.done_bytes, p.total_bytes
        row.rate_bps, row.files = p.rate_bps, {n: list(v) for n, v in p.files.items()}
        if time.monotonic() - self.saved_at >= SAVE_EVERY_S:
            self.saved_at = time.monotonic()
            fields = ["commit", "bytes_done", "bytes_total", "rate_bps", "files"]
            row.save(update_fields=fields)
        self._push(p)

    def _push(self, p: hub.Progress, *, status: str = DownloadStatus.DOWNLOADING) -> None:
        extra = {
            "download": self.row.pk,
            "download_status": status,
            "rate_bps": round(p.rate_bps),
            "eta_s": None if p.eta_s is None else round(p.eta_s, 1),
            "files": {n: list(v) for n, v in sorted(p.files.items())},
        }
        if self.recorder is not None:
            self.recorder.progress(
                p.done_bytes, p.total_bytes, force=status != "downloading", **extra
            )
        else:
            payload = {
                "type": "deployment.progress",
                "id": self.row.deployment_id,  # a further host's launch download, else None
                "phase": DOWNLOADING,
                "done": p.done_bytes,
                "total": p.total_bytes,
                "repo_id": self.row.repo_id,
                "host": self.row.host.name,
                **extra,
            }
            if self.row.deployment_id is not None:
                payload["node_host"] = self.row.host.name  # the page's per-host weights row
            pushes.publish_progress(payload, stream=pushes.progress_key("download", self.row.pk))

    def final(self) -> None:
        row = self.row
        fields = ["bytes_done", "bytes_total", "rate_bps", "files"]
        row.save(update_fields=fields)
        p = self.last or hub.Progress(row.commit, row.bytes_done, row.bytes_total, 0, None, {})
        self._push(p, status=row.status)
