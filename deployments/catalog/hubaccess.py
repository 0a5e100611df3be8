"""The hub client wired to Django: the cache (Redis) for search/info, the database for configs."""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import redis
from django.conf import settings
from django.core.cache import cache

from deployments.catalog.hub import HubClient, client_from_settings
from deployments.models import HubConfig

log = logging.getLogger(__name__)


class SafeCache:
    """Django's cache, where Redis being down means a miss, not an error page."""

    def get(self, key: str) -> Any:
        try:
            return cache.get(key)
        except redis.RedisError as exc:
            log.warning("cache read failed (Redis down?): %s", exc)
            return None

    def set(self, key: str, value: Any, timeout: int) -> None:
        try:
            cache.set(key, value, timeout)
        except redis.RedisError as exc:
            log.warning("cache write failed (Redis down?): %s", exc)


class DbConfigStore:
    def get(self, repo_id: str, sha: str) -> dict[str, Any] | None:
        row = HubConfig.objects.filter(repo_id=repo_id, sha=sha).first()
        return row.config if row else None

    def put(self, repo_id: str, sha: str, config: dict[str, Any]) -> None:
        HubConfig.objects.get_or_create(repo_id=repo_id, sha=sha, defaults={"config": config})


@lru_cache(maxsize=1)
def _shared_client() -> HubClient:
    return client_from_settings(settings, cache=SafeCache(), config_store=DbConfigStore())


def hub_client(token: str | None = None) -> HubClient:
    """The shared client, or one with a user's own token (never cached, never logged)."""
    if token:
        return client_from_settings(
            settings, cache=SafeCache(), config_store=DbConfigStore(), token=token
        )
    return _shared_client()
