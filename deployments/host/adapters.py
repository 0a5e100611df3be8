"""Host-worker side of LoRA adapters: fetch one (its folder under this host's model roots, or
its two files from the Hub into this host's Hub cache) and ask the replica's vLLM to load or
unload it (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``, routed by vLLM when
VLLM_ALLOW_RUNTIME_LORA_UPDATING is set: the vLLM adapter sets it with --enable-lora).

The engine is only ever given a path this worker resolved itself, never one a user typed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlpanel import enginehttp
from deployments.catalog.adapters import CONFIG, WEIGHTS, AdapterSourceError, resolve_local_adapter
from deployments.host.downloads import fetching, hub
from deployments.models import (
    AdapterReplica,
    AdapterStatus,
    Deployment,
    DeploymentAdapter,
    Engine,
    Status,
)
from deployments.models.adapters import WANTED

log = logging.getLogger(__name__)
REQUEST_TIMEOUT_S = 60.0  # a load reads the adapter from disk into the engine's slots


class AdapterLoadError(Exception):
    """The adapter could not be fetched or the engine refused it; the message says which."""


def load(placement_id: int) -> dict[str, Any]:
    """Task body: load one adapter into one running replica; a stale delivery is a no-op."""
    p = _placement(placement_id)
    if p is None or p.status != AdapterStatus.LOADING or p.adapter.status not in WANTED:
        return {"skipped": "not to be loaded"}
    if p.replica.status != Status.RUNNING:
        return {"skipped": f"replica is {p.replica.status}: it loads its adapters as it starts"}
    _load_into(p.replica, p)
    return {"adapter": p.adapter.name, "status": p.status}


def unload(placement_id: int) -> dict[str, Any]:
    """Task body: take one adapter off one replica's engine."""
    p = _placement(placement_id)
    if p is None or p.status == AdapterStatus.UNLOADED:
        return {"skipped": "already unloaded"}
    d = p.replica
    if d.status == Status.RUNNING and d.port:
        try:
            _post(d, "/v1/unload_lora_adapter", {"lora_name": p.adapter.name})
        except AdapterLoadError as exc:
            if "cannot be found" not in str(exc):  # already gone from the engine: done
                log.warning("adapter %s on %s: unload failed: %s", p.adapter.name, d.pk, exc)
    _set(p, AdapterStatus.UNLOADED, "")
    _settle(p.adapter_id)
    return {"adapter": p.adapter.name, "status": "unloaded"}


def before_rotation(d: Deployment, base_url: str) -> list[str]:
    """A vLLM replica with LoRA, ready and not yet in the gateway's rotation (a start, a
    restart, a wake): the deployment's adapters loaded into it first."""
    if d.engine != Engine.VLLM or not d.snapshot.engine_args.enable_lora:
        return []
    return load_all(d, base_url, d.engine_api_key())


def load_all(d: Deployment, base_url: str, api_key: str | None) -> list[str]:
    """Before a starting replica enters rotation: every adapter its deployment wants, loaded
    into its engine (a failure is recorded on that adapter's row, and the replica goes on
    serving the base model and the others). Returns the names loaded."""
    loaded = []
    adapters = DeploymentAdapter.objects.filter(deployment_id=d.group_id, status__in=list(WANTED))
    for adapter in adapters:
        p, _ = AdapterReplica.objects.get_or_create(adapter=adapter, replica=d)
        if _load_into(d, p, base_url=base_url, api_key=api_key):
            loaded.append(adapter.name)
    return loaded


def _load_into(
    d: Deployment, p: AdapterReplica, *, base_url: str | None = None, api_key: str | None = None
) -> bool:
    adapter = p.adapter
    try:
        path = fetch(adapter)
        body = {"lora_name": adapter.name, "lora_path": str(path), "load_inplace": True}
        _post(d, "/v1/load_lora_adapter", body, base_url=base_url, api_key=api_key)
    except AdapterLoadError as exc:
        log.warning("adapter %s on deployment %s: %s", adapter.name, d.pk, exc)
        _set(p, AdapterStatus.FAILED, str(exc))
        _settle(adapter.pk)
        return False
    _set(p, AdapterStatus.LOADED, "")
    _settle(adapter.pk)
    return True


def fetch(adapter: DeploymentAdapter) -> Path:
    """The adapter's folder on this host: resolved inside this host's model roots, or its two
    files fetched from the Hub at the commit the web read them at."""
    if adapter.source.startswith("local:"):
        try:
            return resolve_local_adapter(adapter.source)
        except AdapterSourceError as exc:
            raise AdapterLoadError(f"not on this host: {exc}") from exc
    job = hub.Job(
        repo_id=adapter.source,
        revision=adapter.revision or None,
        cache_dir=fetching.cache_dir(),
        endpoint=settings.HF_ENDPOINT or None,
        token=settings.HF_TOKEN or None,
        min_free_bytes=settings.SHARDBOARD_DOWNLOAD_MIN_FREE_BYTES,
        only_files=(CONFIG, WEIGHTS),
    )
    try:
        return hub.fetch(job, on_progress=lambda _: None, should_stop=lambda: False).snapshot
    except hub.DownloadError as exc:
        raise AdapterLoadError(f"the Hub download failed: {exc}") from exc


def _post(
    d: Deployment,
    path: str,
    body: dict[str, Any],
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> None:
    key = api_key if base_url is not None else d.engine_api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        answer = enginehttp.client().post(
            (base_url or d.base_url) + path, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S
        )
    except httpx.HTTPError as exc:
        raise AdapterLoadError(f"the engine did not answer {path}: {exc}") from exc
    if answer.status_code != 200:
        raise AdapterLoadError(f"the engine refused it ({answer.status_code}): {_message(answer)}")


def _message(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:500]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:1000]
    return str(body)[:1000]


def _placement(placement_id: int) -> AdapterReplica | None:
    return (
        AdapterReplica.objects.select_related("adapter", "replica__host")
        .filter(pk=placement_id)
        .first()
    )


def _set(p: AdapterReplica, status: AdapterStatus, error: str) -> None:
    p.status, p.error = status, error[:2000]
    p.save(update_fields=["status", "error", "updated_at"])


def _settle(adapter_id: int) -> None:
    """The adapter's own state once its replicas answered: loaded where any replica holds it,
    failed where none could; unloaded once every replica let it go."""
    with transaction.atomic():
        adapter = DeploymentAdapter.objects.select_for_update().get(pk=adapter_id)
        states = set(adapter.placements.values_list("status", flat=True))
        if adapter.status == AdapterStatus.UNLOADING and states <= {AdapterStatus.UNLOADED}:
            adapter.status, adapter.unloaded_at = AdapterStatus.UNLOADED, timezone.now()
        elif adapter.status in WANTED and AdapterStatus.LOADED in states:
            adapter.status, adapter.error = AdapterStatus.LOADED, ""
        elif adapter.status in WANTED and states == {AdapterStatus.FAILED}:
            adapter.status = AdapterStatus.FAILED
            adapter.error = (
                adapter.placements.exclude(error="").values_list("error", flat=True).first()
                or "no replica could load it"
            )
        else:
            return
        adapter.save(update_fields=["status", "unloaded_at", "error"])
