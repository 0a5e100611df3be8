"""A sentence-transformers repo's pooling files, which make vLLM serve it as an embedding model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from huggingface_hub.hf_api import ModelInfo

from deployments import planning

MODULES = "modules.json"
ENCODER_CONFIG = "sentence_bert_config.json"  # its max_seq_length is vLLM's max_model_len


def spec_kwargs(st: dict[str, Any] | None) -> dict[str, Any]:
    """The ``ModelSpec.from_config`` arguments of what ``sentence_transformers`` read."""
    st = st or {}
    length = st.get("max_seq_length")
    return {
        "st_modules": st.get("modules"),
        "st_pooling": st.get("pooling"),
        "st_max_seq_length": length if isinstance(length, int) else None,
    }


def sentence_transformers(
    info: ModelInfo, read_json: Callable[[str], Any]
) -> dict[str, Any] | None:
    """modules.json and its Pooling module's config.json, as vLLM's get_pooling_config reads
    them (transformers_utils/config.py:1030-1066); None when the repo has no modules.json.
    ``read_json`` reads one file of the repo at the card's commit."""
    names = {s.rfilename for s in info.siblings or []}
    return read_files(names, read_json)


def read_files(names: set[str], read_json: Callable[[str], Any]) -> dict[str, Any] | None:
    """The same from any store of files: ``names`` are the files there (relative paths)."""
    if MODULES not in names:
        return None
    modules = read_json(MODULES)
    if not isinstance(modules, list):  # a JSON list of modules, or not a real modules.json
        return None
    pool = next(
        (m for m in modules if isinstance(m, dict) and m.get("type") in planning.ST_POOLING_TYPES),
        None,
    )
    path = f"{pool.get('path') or ''}/config.json".lstrip("/") if pool else ""
    pooling = read_json(path) if path in names else None
    encoder = read_json(ENCODER_CONFIG) if ENCODER_CONFIG in names else None
    return {
        "modules": modules,
        "pooling": pooling if isinstance(pooling, dict) else None,
        "max_seq_length": encoder.get("max_seq_length") if isinstance(encoder, dict) else None,
    }
