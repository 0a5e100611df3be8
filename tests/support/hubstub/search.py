"""/api/models semantics of the Hub stand-in: filters, sort (descending), cursor pagination."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from typing import Any

from tests.support.hubstub.repos import StubRepo

SORT_KEYS = {"downloads", "likes", "trendingScore", "lastModified", "createdAt"}
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_BOUND = re.compile(r"^(min|max):(\d+(?:\.\d+)?)([KMBT]?)$", re.IGNORECASE)


class BadQuery(ValueError):
    pass


def parse_num_parameters(value: str) -> tuple[int | None, int | None]:
    low: int | None = None
    high: int | None = None
    for part in value.split(","):
        match = _BOUND.match(part.strip())
        if match is None:
            raise BadQuery(f"invalid num_parameters: {value!r}")
        bound = int(float(match.group(2)) * _UNITS[match.group(3).upper()])
        if match.group(1).lower() == "min":
            low = bound
        else:
            high = bound
    return low, high


def _total_params(repo: StubRepo) -> int | None:
    safetensors = repo.info.get("safetensors")
    return int(safetensors["total"]) if safetensors else None


def _matches_tag(repo: StubRepo, value: str) -> bool:
    info = repo.info
    return value in info.get("tags", []) or value in (
        info.get("pipeline_tag"),
        info.get("library_name"),
    )


def _keep(repo: StubRepo, query: dict[str, list[str]]) -> bool:
    info = repo.info
    if (search := _one(query, "search")) and search.lower() not in repo.repo_id.lower():
        return False
    if (author := _one(query, "author")) and info.get("author") != author:
        return False
    if (tag := _one(query, "pipeline_tag")) and info.get("pipeline_tag") != tag:
        return False
    if not all(_matches_tag(repo, value) for value in query.get("filter", [])):
        return False
    if (gated := _one(query, "gated")) is not None and repo.gated != (gated.lower() == "true"):
        return False
    return _in_size_range(repo, _one(query, "num_parameters"))


def _in_size_range(repo: StubRepo, num_parameters: str | None) -> bool:
    if num_parameters is None:
        return True
    low, high = parse_num_parameters(num_parameters)
    total = _total_params(repo)
    if total is None:
        return False
    return (low is None or total >= low) and (high is None or total <= high)


def _one(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def decode_cursor(cursor: str) -> int:
    try:
        return int(json.loads(base64.urlsafe_b64decode(cursor.encode()))["offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BadQuery(f"invalid cursor: {cursor!r}") from exc


def matching(repos: Iterable[StubRepo], query: dict[str, list[str]]) -> list[StubRepo]:
    sort = _one(query, "sort") or "trendingScore"
    if sort not in SORT_KEYS:
        raise BadQuery(f"invalid sort: {sort!r}")
    kept = [repo for repo in repos if _keep(repo, query)]
    return sorted(kept, key=lambda r: (r.info.get(sort) or 0, r.repo_id), reverse=True)


def page_of(
    repos: list[StubRepo], query: dict[str, list[str]], *, page_cap: int
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of items and the offset of the next page (None on the last page)."""
    offset = decode_cursor(cursor) if (cursor := _one(query, "cursor")) else 0
    limit = int(_one(query, "limit") or page_cap)
    size = max(1, min(limit, page_cap))
    expand = query.get("expand", [])
    full = (_one(query, "full") or "").lower() == "true"
    chunk = repos[offset : offset + size]
    items = [repo.list_item(expand=expand, full=full) for repo in chunk]
    next_offset = offset + size
    return items, next_offset if next_offset < len(repos) else None
