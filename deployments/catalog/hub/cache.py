"""Cache seams of the Hub client. Django passes its cache (Redis) and a DB-backed config store."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol


class TtlStore(Protocol):
    """The subset of Django's cache API the client uses: values are JSON-friendly dicts."""

    def get(self, key: str) -> Any: ...

    def set(self, key: str, value: Any, timeout: int) -> None: ...


class ConfigStore(Protocol):
    """config.json by (repo id, commit sha): immutable, so never expires."""

    def get(self, repo_id: str, sha: str) -> dict[str, Any] | None: ...

    def put(self, repo_id: str, sha: str, config: dict[str, Any]) -> None: ...


class MemoryTtlStore:
    """In-process TtlStore for tests and the management commands."""

    def __init__(self) -> None:
        self._items: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self._lock:
            expires, value = self._items.get(key, (0.0, None))
            return value if expires > time.monotonic() else None

    def set(self, key: str, value: Any, timeout: int) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + timeout, value)

    def __len__(self) -> int:
        return len(self._items)


class MemoryConfigStore:
    def __init__(self) -> None:
        self._items: dict[tuple[str, str], dict[str, Any]] = {}

    def get(self, repo_id: str, sha: str) -> dict[str, Any] | None:
        return self._items.get((repo_id, sha))

    def put(self, repo_id: str, sha: str, config: dict[str, Any]) -> None:
        self._items[(repo_id, sha)] = config

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Entries are fresh for `fresh_s`; older ones are kept `keep_s` to serve when offline."""

    search_fresh_s: int = 600
    info_fresh_s: int = 3600
    keep_s: int = 14 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Entry:
    data: Any
    cached_at: datetime

    def age(self, now: datetime) -> timedelta:
        return now - self.cached_at

    def to_value(self) -> dict[str, Any]:
        return {"v": 1, "cached_at": self.cached_at.isoformat(), "data": self.data}

    @staticmethod
    def from_value(value: Any) -> Entry | None:
        if not isinstance(value, dict) or value.get("v") != 1:
            return None  # absent, or written by another version of this code
        return Entry(value["data"], datetime.fromisoformat(value["cached_at"]))


def token_scope(token: str | None) -> str:
    """Cache entries are partitioned by token, so private results never reach other users."""
    if not token:
        return "anon"
    return "t" + hashlib.sha256(token.encode()).hexdigest()[:16]


def key(kind: str, scope: str, *parts: Any) -> str:
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return f"shardboard:hub:v1:{kind}:{scope}:{digest[:40]}"
