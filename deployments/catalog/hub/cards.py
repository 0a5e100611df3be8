"""What the Hub client returns: frozen dataclasses, convertible to plain dicts for the cache."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Sort = Literal["downloads", "likes", "trending", "updated"]
Quantization = Literal["awq", "gptq", "fp8", "none", "any"]

SORTS: tuple[str, ...] = ("downloads", "likes", "trending", "updated")
QUANTIZATION_FILTERS: tuple[str, ...] = ("awq", "gptq", "fp8", "none", "any")


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str = ""
    sort: Sort = "downloads"
    min_params: int | None = None
    max_params: int | None = None
    quantization: Quantization = "any"
    license: str | None = None
    gated: bool | None = None
    page: int = 1
    page_size: int = 20

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {self.sort!r}")
        if self.quantization not in QUANTIZATION_FILTERS:
            raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_FILTERS)}")
        if self.page < 1 or not 1 <= self.page_size <= 100:
            raise ValueError("page must be >= 1 and page_size between 1 and 100")
        bounds = (self.min_params, self.max_params)
        if any(b is not None and b < 0 for b in bounds):
            raise ValueError("parameter bounds must be positive")


@dataclass(frozen=True, slots=True)
class Freshness:
    """Where a result came from. `cached_at` is when it was fetched from the Hub."""

    from_cache: bool
    cached_at: datetime
    offline: bool = False  # served from cache because the Hub could not be reached


@dataclass(frozen=True, slots=True)
class ModelSummary:
    repo_id: str
    author: str | None
    sha: str | None
    parameters: int | None
    parameters_by_dtype: dict[str, int]
    weights_bytes_estimate: int | None
    architecture: str | None
    context_length: int | None  # only when its config.json is already in the config store
    quantization: str | None
    license: str | None
    gated: bool
    downloads: int
    likes: int
    trending_score: int
    last_modified: datetime | None
    library_name: str | None


@dataclass(frozen=True, slots=True)
class SearchPage:
    query: SearchQuery
    items: tuple[ModelSummary, ...]
    has_next: bool
    freshness: Freshness

    @property
    def page(self) -> int:
        return self.query.page

    @property
    def from_cache(self) -> bool:
        return self.freshness.from_cache

    @property
    def cached_at(self) -> datetime:
        return self.freshness.cached_at


@dataclass(frozen=True, slots=True)
class ModelCard:
    repo_id: str
    revision: str | None
    sha: str
    url: str
    author: str | None
    architecture: str | None
    model_type: str | None
    context_length: int | None
    dtype: str | None
    quantization: str | None
    quantization_config: dict[str, Any] | None
    parameters: int | None
    parameters_by_dtype: dict[str, int]
    weights_bytes: int | None
    weight_files: int
    license: str | None
    gated: bool
    gate_mode: str | None  # "auto" or "manual" when gated
    private: bool
    last_modified: datetime | None
    downloads: int
    likes: int
    library_name: str | None
    pipeline_tag: str | None
    tags: tuple[str, ...]
    config: dict[str, Any] | None  # the full config.json; None when it could not be read
    config_error: str | None  # why `config` is None (e.g. gated without access)
    freshness: Freshness = field(compare=False)
    # a sentence-transformers repo: {"modules": modules.json, "pooling": its Pooling config};
    # vLLM serves such a repo with its pooling runner (None: not one, or a card cached before)
    sentence_transformers: dict[str, Any] | None = None

    @property
    def from_cache(self) -> bool:
        return self.freshness.from_cache

    @property
    def cached_at(self) -> datetime:
        return self.freshness.cached_at


def to_data(value: Any) -> Any:
    """A dataclass tree as JSON-friendly builtins (datetimes as ISO strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return {"__dt__": value.isoformat()}
    if isinstance(value, tuple | list):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {k: to_data(v) for k, v in value.items()}
    return value


def _revive(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__dt__"}:
            return datetime.fromisoformat(value["__dt__"])
        return {k: _revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


def summary_from_data(data: dict[str, Any]) -> ModelSummary:
    return ModelSummary(**_revive(data))


def card_from_data(data: dict[str, Any], freshness: Freshness) -> ModelCard:
    values = _revive({k: v for k, v in data.items() if k != "freshness"})
    values["tags"] = tuple(values["tags"])
    return ModelCard(**values, freshness=freshness)
