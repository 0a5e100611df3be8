"""Hugging Face Hub access: search, model info and config.json, cached and offline-aware.

Web side and the ``plan`` command. No Django: ``catalog.hubaccess`` hands it Django's cache
and a database-backed config store. Imports huggingface_hub, nothing else of the project.
"""

from __future__ import annotations

from typing import Any

from deployments.catalog.hub.cache import (
    CachePolicy,
    ConfigStore,
    MemoryConfigStore,
    MemoryTtlStore,
    TtlStore,
)
from deployments.catalog.hub.cards import (
    Freshness,
    ModelCard,
    ModelSummary,
    SearchPage,
    SearchQuery,
)
from deployments.catalog.hub.client import HubClient
from deployments.catalog.hub.errors import (
    HubBadResponseError,
    HubEntryNotFoundError,
    HubError,
    HubGatedError,
    HubNotFoundError,
    HubRateLimitedError,
    HubRevisionNotFoundError,
    HubUnauthorizedError,
    HubUnavailableError,
    HubUnreachableError,
)

__all__ = [
    "CachePolicy",
    "ConfigStore",
    "Freshness",
    "HubBadResponseError",
    "HubClient",
    "HubEntryNotFoundError",
    "HubError",
    "HubGatedError",
    "HubNotFoundError",
    "HubRateLimitedError",
    "HubRevisionNotFoundError",
    "HubUnauthorizedError",
    "HubUnavailableError",
    "HubUnreachableError",
    "MemoryConfigStore",
    "MemoryTtlStore",
    "ModelCard",
    "ModelSummary",
    "SearchPage",
    "SearchQuery",
    "TtlStore",
    "client_from_settings",
]


def client_from_settings(
    settings: Any, *, cache: TtlStore, config_store: ConfigStore, token: str | None = None
) -> HubClient:
    """A client configured from Django settings: HF_ENDPOINT, HF_TOKEN, HF_CACHE_TTL_S."""
    defaults = CachePolicy()
    info_ttl_s = int(getattr(settings, "HF_CACHE_TTL_S", defaults.info_fresh_s))
    policy = CachePolicy(
        search_fresh_s=min(defaults.search_fresh_s, info_ttl_s),
        info_fresh_s=info_ttl_s,
        keep_s=max(defaults.keep_s, info_ttl_s),
    )
    return HubClient(
        endpoint=getattr(settings, "HF_ENDPOINT", None) or None,
        token=token or getattr(settings, "HF_TOKEN", None) or None,
        cache=cache,
        config_store=config_store,
        policy=policy,
        timeout_s=getattr(settings, "HUB_TIMEOUT_S", 10.0),
    )
