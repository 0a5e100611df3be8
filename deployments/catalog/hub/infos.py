"""Pure readings of huggingface_hub's ModelInfo into Shardboard's cards and search filters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from huggingface_hub.hf_api import ModelInfo

from deployments.catalog.hub import parse
from deployments.catalog.hub.cards import ModelSummary, SearchQuery


def _tags(info: ModelInfo) -> list[str]:
    return list(info.tags or [])


def keep(info: ModelInfo, q: SearchQuery) -> bool:
    tags = _tags(info)
    if info.pipeline_tag not in (None, "text-generation"):
        return False
    has_st = info.safetensors is not None
    if parse.is_gguf_only(tags=tags, library_name=info.library_name, has_safetensors=has_st):
        return False
    method = parse.quantization(info.config, tags)
    if q.quantization == "none" and method is not None:
        return False
    if q.quantization not in ("any", "none") and method != q.quantization:
        return False
    licence = parse.license_of(tags)
    if q.license and (licence or "").lower() != q.license.lower():
        return False
    if q.gated is not None and bool(info.gated) != q.gated:
        return False
    total = info.safetensors.total if info.safetensors else None
    return parse.within(total, q.min_params, q.max_params)


def summary(info: ModelInfo) -> ModelSummary:
    tags = _tags(info)
    by_dtype = dict(info.safetensors.parameters) if info.safetensors else {}
    return ModelSummary(
        repo_id=info.id,
        author=info.author,
        sha=info.sha,
        parameters=info.safetensors.total if info.safetensors else None,
        parameters_by_dtype=by_dtype,
        weights_bytes_estimate=parse.weights_bytes_from_params(by_dtype),
        architecture=parse.architecture(info.config),
        context_length=None,
        quantization=parse.quantization(info.config, tags),
        license=parse.license_of(tags),
        gated=bool(info.gated),
        downloads=info.downloads or 0,
        likes=info.likes or 0,
        trending_score=info.trending_score or 0,
        last_modified=info.last_modified,
        library_name=info.library_name,
    )


def _weight_files(info: ModelInfo) -> list[int | None]:
    return [s.size for s in info.siblings or [] if s.rfilename.endswith(".safetensors")]


def card_fields(
    info: ModelInfo,
    revision: str | None,
    endpoint: str,
    config: dict[str, Any] | None,
    config_error: str | None,
    by_dtype: Mapping[str, int],
) -> dict[str, Any]:
    tags = _tags(info)
    meta = config or info.config or {}
    sizes = _weight_files(info)
    known = [s for s in sizes if s is not None]
    gguf_total = (info.gguf or {}).get("total")
    card_license = getattr(info.card_data, "license", None) if info.card_data else None
    return {
        "repo_id": info.id,
        "revision": revision,
        "sha": str(info.sha),
        "url": f"{endpoint}/{info.id}",
        "author": info.author,
        "architecture": parse.architecture(meta),
        "model_type": meta.get("model_type"),
        "context_length": parse.context_length(config) or (info.gguf or {}).get("context_length"),
        "dtype": parse.torch_dtype(config),
        "quantization": parse.quantization(meta, tags),
        "quantization_config": meta.get("quantization_config"),
        "parameters": sum(by_dtype.values()) or gguf_total,
        "parameters_by_dtype": dict(by_dtype),
        "weights_bytes": sum(known) if known else parse.weights_bytes_from_params(by_dtype),
        "weight_files": len(sizes),
        "license": parse.license_of(tags, card_license if isinstance(card_license, str) else None),
        "gated": bool(info.gated),
        "gate_mode": info.gated or None,
        "private": bool(info.private),
        "last_modified": info.last_modified,
        "downloads": info.downloads or 0,
        "likes": info.likes or 0,
        "library_name": info.library_name,
        "pipeline_tag": info.pipeline_tag,
        "tags": tags,
        "config": config,
        "config_error": config_error,
    }
