"""The host worker's download tasks (sent by name from the Models on hosts page), and the
cache inventory it reports from the moment it is ready."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from deployments.handoff import sealed
from deployments.host.downloads import fetching, inventory
from deployments.models import CachedModel, ModelDownload


@shared_task(name="deployments.prefetch", acks_late=True)
def prefetch(download_id: int) -> dict[str, Any]:
    row = ModelDownload.objects.get(pk=download_id)
    token = sealed.unseal(row.hub_token_sealed, what=f"download {row.pk}'s Hub token")
    ModelDownload.objects.filter(pk=row.pk).update(hub_token_sealed="")
    return fetching.prefetch(download_id, token or settings.HF_TOKEN or None)


@shared_task(name="deployments.cache_delete", acks_late=True)
def cache_delete(cached_id: int) -> dict[str, Any]:
    """Remove a model revision from this host's cache (the web checked that nothing uses it
    and wrote the audit row)."""
    row = CachedModel.objects.select_related("host").filter(pk=cached_id).first()
    if row is None:
        return {"skipped": "already gone"}
    freed = inventory.delete(row.repo_id, row.commit)
    inventory.report()
    return {"deleted": row.repo_id, "freed_bytes": freed}


@worker_ready.connect
def on_worker_ready(**_: Any) -> None:
    inventory.start_reporting()
