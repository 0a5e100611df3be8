"""Reading a local model folder for the planner: config.json, safetensors headers, index.

The impure edge of the planner: it reads files and hands plain values to
``deployments.planning`` (which does no I/O)."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from deployments.planning import (
    ModelSpec,
    SafetensorsSummary,
    with_hf_quant_config,
)

MAX_HEADER_BYTES = 100 * 1024 * 1024
MAX_CONFIG_BYTES = 4 * 1024 * 1024  # the largest real config.json is a few hundred KiB
VISION_MARKERS = (
    "vision_tower",
    "vision_model",
    "visual.",
    "vision_encoder",
    "multi_modal_projector",
    "mm_projector",
    "image_newline",
    "vision_embed",
    "embed_vision",
)


class ModelFilesError(ValueError):
    """The folder cannot be read as a model; the message is one line for the user."""


def read_model_folder(folder: Path) -> tuple[dict[str, Any], SafetensorsSummary | None]:
    """config.json as a dict, and what the safetensors headers or index say (None: no files)."""
    if not folder.is_dir():
        raise ModelFilesError(f"{folder}: no such model folder")
    config = read_config(folder / "config.json")
    hf_quant = folder / "hf_quant_config.json"
    if hf_quant.is_file():
        config = with_hf_quant_config(config, _read_json(hf_quant))
    return config, read_safetensors_summary(folder)


def read_config(path: Path) -> dict[str, Any]:
    """Parse config.json, the one reader of it; a missing, huge or bad file is ModelFilesError."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelFilesError(f"{path}: config.json is implausibly large")
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFilesError(f"{path.parent}: no config.json in this folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFilesError(f"{path}: unreadable JSON, not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path}: expected a JSON object")
    return data


def read_safetensors_summary(folder: Path) -> SafetensorsSummary | None:
    """Per-dtype parameter counts from every ``*.safetensors`` header, plus the index size."""
    counts: Counter[str] = Counter()
    vision = 0
    for path in sorted(folder.glob("*.safetensors")):
        for name, dtype, elements in tensor_entries(read_header(path)):
            counts[dtype] += elements
            vision += elements if is_vision_tensor(name) else 0
    total = index_total_bytes(folder / "model.safetensors.index.json")
    if not counts and total is None:
        return None
    return SafetensorsSummary(dict(counts), vision_parameters=vision, total_bytes=total)


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file: 8-byte little-endian length, then JSON."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(8)
            if len(raw) < 8:
                raise ModelFilesError(f"{path}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER_BYTES:
                raise ModelFilesError(f"{path}: not a safetensors file (header of {length} bytes)")
            header = json.loads(fh.read(length).decode("utf-8"))
    except OSError as exc:
        raise ModelFilesError(f"{path}: unreadable ({exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelFilesError(f"{path}: not a safetensors file (bad JSON header)") from None
    if not isinstance(header, dict):
        raise ModelFilesError(f"{path}: not a safetensors file (header is not an object)")
    return header


def tensor_entries(header: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(name, dtype, elements) of every tensor in a header."""
    out = []
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        elements = 1
        for dim in info.get("shape", []):
            elements *= int(dim)
        out.append((name, str(info.get("dtype", "")), elements))
    return out


def is_vision_tensor(name: str) -> bool:
    """Whether a tensor belongs to a vision tower or its projector."""
    return any(marker in name for marker in VISION_MARKERS)


def index_total_bytes(path: Path) -> int | None:
    """``metadata.total_size`` of model.safetensors.index.json, None when absent."""
    if not path.exists():
        return None
    data = read_config_like(path)
    size = (data.get("metadata") or {}).get("total_size")
    return int(size) if isinstance(size, int | float) else None


def folder_spec(folder: Path) -> ModelSpec:
    """The planner's ModelSpec of a local folder: config.json, the safetensors headers, and a
    sentence-transformers model's modules.json, Pooling config and sentence_bert_config.json,
    which make vLLM serve it with the pooling runner (planning.model.pooling)."""
    from deployments.catalog.hub.sentence_tf import read_files, spec_kwargs

    config, summary = read_model_folder(folder)
    names = {str(p.relative_to(folder)) for p in folder.glob("*.json")}
    names |= {str(p.relative_to(folder)) for p in folder.glob("*/config.json")}
    st = read_files(names, lambda name: _read_any_json(folder / name))
    return ModelSpec.from_config(config, safetensors=summary, name=folder.name, **spec_kwargs(st))


def _read_any_json(path: Path) -> Any:
    """A small JSON file of the folder (a list or an object); ModelFilesError if unreadable."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ModelFilesError(f"{path}: implausibly large")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFilesError(f"{path}: unreadable JSON ({exc})") from None


def read_config_like(path: Path) -> dict[str, Any]:
    """Any JSON object file, with the same error handling as config.json."""
    return read_config(path) if path.name == "config.json" else _read_json(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFilesError(f"{path}: unreadable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelFilesError(f"{path}: expected a JSON object")
    return data
