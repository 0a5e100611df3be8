"""What this host's Hub cache holds, reported to the database with the disk's free space.

`scan_cache_dir` lists the revisions and their sizes; a revision counts as complete when a
whole download of it left its manifest (``fetching``) and every file of that list is there.
Reported when the worker starts, after every download or deletion, and every
SHARDBOARD_CACHE_SCAN_INTERVAL_S; a revision gone from disk loses its row.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone
from huggingface_hub import constants as hf_constants
from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from deployments.host.downloads.manifest import manifests
from deployments.models import CachedModel, HostDisk
from monitoring.models import Host

log = logging.getLogger(__name__)
_wake = threading.Event()
_started = threading.Lock()
_thread: threading.Thread | None = None


def cache_dir() -> Path:
    return Path(hf_constants.HF_HUB_CACHE)


def _complete_files() -> dict[str, set[str]]:
    return {m["commit"]: set(m["files"]) for m in manifests()}


def scan() -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(one dict per model revision on disk, the disk's free and total bytes)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(root)
    disk = {"free_bytes": usage.free, "total_bytes": usage.total}
    try:
        info = scan_cache_dir(root)
    except CacheNotFound:
        return [], disk
    complete = _complete_files()
    found = []
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for rev in repo.revisions:
            names = {_relative(rev.snapshot_path, f.file_path) for f in rev.files}
            wanted = complete.get(rev.commit_hash)
            found.append(
                {
                    "repo_id": repo.repo_id,
                    "commit": rev.commit_hash,
                    "refs": sorted(rev.refs),
                    "size_bytes": rev.size_on_disk,
                    "files": rev.nb_files,
                    "complete": wanted is not None and wanted <= names,
                    "last_used_at": dt.datetime.fromtimestamp(repo.last_accessed, tz=dt.UTC),
                    "snapshot_path": str(rev.snapshot_path),
                }
            )
    return found, disk


def _relative(snapshot: Path, path: Path) -> str:
    try:
        return str(Path(path).relative_to(snapshot))
    except ValueError:
        return Path(path).name


def report() -> int:
    """Write this host's cache to the database; the number of model revisions on it."""
    host = Host.objects.filter(name=settings.SHARDBOARD_HOST_NAME).first()
    if host is None:
        return 0
    revisions, disk = scan()
    now = timezone.now()
    with transaction.atomic():
        HostDisk.objects.update_or_create(
            host=host, defaults={"cache_dir": str(cache_dir()), "scanned_at": now, **disk}
        )
        keep = []
        for rev in revisions:
            row, _ = CachedModel.objects.update_or_create(
                host=host,
                repo_id=rev["repo_id"],
                commit=rev["commit"],
                defaults={**rev, "scanned_at": now},
            )
            keep.append(row.pk)
        CachedModel.objects.filter(host=host).exclude(pk__in=keep).delete()
    return len(revisions)


def delete(repo_id: str, commit: str) -> int:
    """Remove one revision from the cache (blobs no other revision shares); bytes freed."""
    info = scan_cache_dir(cache_dir())
    hashes = [
        rev.commit_hash
        for repo in info.repos
        if repo.repo_id == repo_id and repo.repo_type == "model"
        for rev in repo.revisions
        if rev.commit_hash == commit
    ]
    if not hashes:
        return 0
    strategy = info.delete_revisions(*hashes)
    strategy.execute()
    return int(strategy.expected_freed_size)


def report_soon() -> None:
    _wake.set()


def start_reporting() -> None:
    """The reporting thread of this worker (once): at start, on a wake-up, and periodically."""
    global _thread
    with _started:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_loop, name="cache-inventory", daemon=True)
        _thread.start()


def _loop() -> None:
    while True:
        try:
            report()
        except (DatabaseError, OSError) as exc:
            log.warning("Hub cache inventory not reported: %s", exc)
        finally:
            close_old_connections()
        _wake.wait(settings.SHARDBOARD_CACHE_SCAN_INTERVAL_S)
        _wake.clear()
