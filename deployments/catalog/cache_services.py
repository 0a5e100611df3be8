"""Model weights on the hosts, the web side: what each host's Hub cache holds (as its host
worker reported it), pre-fetching a model onto chosen hosts, cancelling that, and deleting an
unused revision. Services check the role and write the audit row in their transaction; the
host worker's tasks (`deployments.prefetch`, `deployments.cache_delete`) are sent by name
after commit."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest

from controlpanel.audit import audit_event
from controlpanel.celery import app as celery_app
from controlpanel.celery import host_queue
from controlpanel.roles import Role, has_role
from deployments.handoff import sealed
from deployments.models import (
    ACTIVE,
    CachedModel,
    Deployment,
    DownloadStatus,
    HostDisk,
    ModelDownload,
)
from monitoring.models import Host

log = logging.getLogger(__name__)
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
_REVISION = re.compile(r"^[\w./-]{1,100}$")
LIVE = (DownloadStatus.QUEUED, DownloadStatus.DOWNLOADING)


class CacheError(Exception):
    """Refused, with a message for the operator."""


def _require(user: Any, role: Role) -> None:
    if not has_role(user, role):
        raise CacheError(f"Your role does not allow this: it needs {role.label}.")


def _send(task: str, arg: int, host: str) -> None:
    try:
        celery_app.send_task(task, args=[arg], queue=host_queue(host))
    except Exception as exc:  # the row is committed; the operator sees it stay queued
        log.warning("could not send %s(%s) to %s: %s", task, arg, host, exc)


def prefetch_start(
    *,
    user: Any,
    repo_id: str,
    revision: str,
    host_names: list[str],
    hub_token: str | None = None,
    http_request: HttpRequest | None = None,
) -> list[ModelDownload]:
    """One download per chosen host (every host of a multi-host plan at once)."""
    _require(user, Role.OPERATOR)
    repo_id, revision = repo_id.strip(), revision.strip()
    if not _REPO.fullmatch(repo_id):
        raise CacheError("Model: give a Hub id such as Qwen/Qwen2.5-7B-Instruct.")
    if revision and not _REVISION.fullmatch(revision):
        raise CacheError("Revision: a branch, tag or commit (letters, digits, . _ - /).")
    names = sorted({n for n in host_names if n})
    if not names:
        raise CacheError("Choose at least one host.")
    hosts = list(Host.objects.filter(name__in=names))
    unknown = sorted(set(names) - {h.name for h in hosts})
    if unknown:
        raise CacheError(f"Unknown host(s): {', '.join(unknown)}.")
    if offline := [h.name for h in hosts if not h.is_online()]:
        raise CacheError(f"Host(s) offline (no heartbeat lately): {', '.join(offline)}.")
    rows = _create_downloads(user, repo_id, revision, hosts, hub_token, http_request)
    for row in rows:
        transaction.on_commit(partial(_send, "deployments.prefetch", row.pk, row.host.name))
    return rows


@transaction.atomic
def _create_downloads(
    user: Any,
    repo_id: str,
    revision: str,
    hosts: list[Host],
    hub_token: str | None,
    http_request: HttpRequest | None,
) -> list[ModelDownload]:
    busy = ModelDownload.objects.filter(
        host__in=hosts, repo_id=repo_id, revision=revision, status__in=LIVE
    ).values_list("host__name", flat=True)
    if busy:
        raise CacheError(f"{repo_id} is already being fetched onto {', '.join(sorted(busy))}.")
    rows = [
        ModelDownload.objects.create(
            host=h,
            repo_id=repo_id,
            revision=revision,
            created_by=user,
            hub_token_sealed=sealed.seal(hub_token or ""),
        )
        for h in hosts
    ]
    audit_event(
        actor=user,
        action="model.prefetch",
        target_type="model",
        target_id=repo_id,
        detail={
            "revision": revision,
            "hosts": [h.name for h in hosts],
            "ids": [r.pk for r in rows],
        },
        request=http_request,
    ).save()
    return rows


@transaction.atomic
def download_cancel(
    *, user: Any, download: ModelDownload, http_request: HttpRequest | None = None
) -> None:
    _require(user, Role.OPERATOR)
    if download.status not in LIVE or download.deployment_id:
        raise CacheError("Only a running pre-fetch can be cancelled (stop a launch instead).")
    ModelDownload.objects.filter(pk=download.pk).update(cancel_requested=True)
    audit_event(
        actor=user,
        action="model.prefetch_cancel",
        target_type="model",
        target_id=download.repo_id,
        detail={"download": download.pk, "host": download.host.name},
        request=http_request,
    ).save()


def users_of(cached: CachedModel) -> list[Deployment]:
    """Active deployments on that host that serve that model (any revision that resolves to
    this commit, or none pinned)."""
    return list(
        Deployment.objects.filter(
            host_id=cached.host_id, model_id=cached.repo_id, status__in=list(ACTIVE)
        ).filter(Q(revision="") | Q(revision=cached.commit) | Q(revision__in=cached.refs or []))
    )


def cached_delete(
    *, user: Any, cached: CachedModel, http_request: HttpRequest | None = None
) -> None:
    """Delete a revision from a host's cache; refused while a deployment uses it."""
    _require(user, Role.OPERATOR)
    with transaction.atomic():
        if using := users_of(cached):
            names = ", ".join(sorted({d.name for d in using}))
            raise CacheError(
                f"{cached.repo_id} is in use on {cached.host.name} by {names}: stop it first."
            )
        audit_event(
            actor=user,
            action="model.cache_delete",
            target_type="host",
            target_id=cached.host.name,
            detail={
                "repo_id": cached.repo_id,
                "commit": cached.commit,
                "size_bytes": cached.size_bytes,
            },
            request=http_request,
        ).save()
        transaction.on_commit(
            lambda: _send("deployments.cache_delete", cached.pk, cached.host.name)
        )


@dataclass(frozen=True, slots=True)
class HostCache:
    host: Host
    disk: HostDisk | None
    models: list[tuple[CachedModel, list[Deployment]]]
    downloads: list[ModelDownload]

    @property
    def used_bytes(self) -> int:
        return sum(m.size_bytes for m, _ in self.models)


def hosts_cache() -> list[HostCache]:
    """Every live host with its disk, its cached revisions (and who uses each), its downloads."""
    hosts = Host.objects.filter(retired_at__isnull=True).order_by("name")
    disks = {d.host_id: d for d in HostDisk.objects.all()}
    cached = list(CachedModel.objects.select_related("host"))
    active = list(
        Deployment.objects.filter(status__in=list(ACTIVE)).only(
            "name", "host_id", "model_id", "revision", "status"
        )
    )
    recent = ModelDownload.objects.select_related("host", "deployment").order_by("-created_at")
    out = []
    for h in hosts:
        models = [(c, _using(c, active)) for c in cached if c.host_id == h.pk]
        downloads = [d for d in recent.filter(host=h)[:10]]
        out.append(HostCache(h, disks.get(h.pk), models, downloads))
    return out


def _using(c: CachedModel, active: list[Deployment]) -> list[Deployment]:
    revisions = {"", c.commit, *(c.refs or [])}
    return [
        d
        for d in active
        if d.host_id == c.host_id and d.model_id == c.repo_id and d.revision in revisions
    ]


def hosts_holding(repo_ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Per repo id, the hosts holding a whole copy of it: one query for a page of cards."""
    out: dict[str, set[str]] = {}
    rows = CachedModel.objects.filter(repo_id__in=repo_ids, complete=True)
    for repo_id, host in rows.values_list("repo_id", "host__name"):
        out.setdefault(repo_id, set()).add(host)
    return {repo_id: tuple(sorted(hosts)) for repo_id, hosts in out.items()}


def on_hosts(repo_id: str) -> list[CachedModel]:
    """Where a model is on disk (the Models pages' column)."""
    return list(CachedModel.objects.filter(repo_id=repo_id).select_related("host"))
