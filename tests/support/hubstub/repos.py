"""Recorded model repos for the Hub stand-in: API JSON, files, synthetic safetensors headers."""

from __future__ import annotations

import copy
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1}
DTYPE_BYTES |= {"U8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "BOOL": 1}

# What /api/models returns per item when neither `expand` nor `full` is asked for.
DEFAULT_LIST_KEYS = (
    "_id",
    "id",
    "likes",
    "trendingScore",
    "private",
    "downloads",
    "tags",
    "pipeline_tag",
    "library_name",
    "createdAt",
    "modelId",
)


@dataclass(frozen=True)
class RepoFile:
    name: str
    content: bytes | None  # None: the stand-in knows the size but serves no bytes
    size: int
    lfs: bool
    path: Path | None = None  # served whole from this file on disk (a large sparse one)

    @property
    def whole(self) -> bool:
        """The stand-in has every byte of it (not only a safetensors header)."""
        return self.path is not None or (
            self.content is not None and len(self.content) == self.size
        )

    @property
    def etag(self) -> str:
        digest = hashlib.sha256 if self.lfs else hashlib.sha1
        return digest((self.content or self.name.encode()) + str(self.size).encode()).hexdigest()


@dataclass
class StubRepo:
    info: dict[str, Any]
    refs: dict[str, str]
    files: dict[str, RepoFile] = field(default_factory=dict)

    @property
    def repo_id(self) -> str:
        return str(self.info["id"])

    @property
    def gated(self) -> bool:
        return bool(self.info.get("gated"))

    def resolve_revision(self, revision: str | None) -> str | None:
        if revision is None:
            return self.refs["main"]
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.refs.values() else None

    def api_info(self, *, sha: str, blobs: bool, expand: list[str]) -> dict[str, Any]:
        data = copy.deepcopy(self.info)
        data["sha"] = sha
        data["siblings"] = [self._sibling(f, blobs=blobs) for f in self.files.values()]
        data["usedStorage"] = sum(f.size for f in self.files.values())
        if expand:
            return _subset(data, ["_id", "id", *expand])
        return data

    def list_item(self, *, expand: list[str], full: bool) -> dict[str, Any]:
        data = copy.deepcopy(self.info)
        data["siblings"] = [{"rfilename": name} for name in self.files]
        if full:
            return data
        return _subset(data, ["_id", "id", *expand] if expand else list(DEFAULT_LIST_KEYS))

    def _sibling(self, f: RepoFile, *, blobs: bool) -> dict[str, Any]:
        if not blobs:
            return {"rfilename": f.name}
        sibling: dict[str, Any] = {"rfilename": f.name, "size": f.size, "blobId": f.etag[:40]}
        if f.lfs:
            sibling["lfs"] = {"size": f.size, "sha256": f.etag, "pointerSize": 135}
        return sibling


def _subset(data: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    return {k: data[k] for k in keys if k in data}


def safetensors_file(shard_index: int, counts: dict[str, int]) -> tuple[bytes, int, list[str]]:
    """A header with one flat tensor per dtype: (header bytes, file size, tensor names)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for dtype, count in counts.items():
        end = offset + count * DTYPE_BYTES[dtype]
        header[f"stub.{shard_index}.{dtype}"] = {
            "dtype": dtype,
            "shape": [count],
            "data_offsets": [offset, end],
        }
        offset = end
    raw = json.dumps(header).encode()
    prefix = struct.pack("<Q", len(raw)) + raw
    names = [k for k in header if k != "__metadata__"]
    return prefix, len(prefix) + offset, names


def _build_files(stub: dict[str, Any]) -> dict[str, RepoFile]:
    files: dict[str, RepoFile] = {}
    for entry in stub["files"]:
        name = entry["rfilename"]
        if name == "config.json":
            content = (FIXTURES / stub["config_file"]).read_bytes()
            files[name] = RepoFile(name, content, len(content), lfs=False)
        else:
            files[name] = RepoFile(name, None, entry["size"], lfs=bool(entry.get("lfs")))
    weight_map: dict[str, str] = {}
    total_size = 0
    for index, (name, counts) in enumerate(stub["shards"].items()):
        header, size, tensor_names = safetensors_file(index, counts)
        files[name] = RepoFile(name, header, size, lfs=True)
        weight_map |= {tensor: name for tensor in tensor_names}
        total_size += size - len(header)
    if len(stub["shards"]) > 1:
        index_json = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
        content = json.dumps(index_json, indent=2).encode()
        name = "model.safetensors.index.json"
        files[name] = RepoFile(name, content, len(content), lfs=False)
    return files


def load_repos(directory: Path = FIXTURES / "models") -> dict[str, StubRepo]:
    repos: dict[str, StubRepo] = {}
    for path in sorted(directory.glob("*.json")):
        fixture = json.loads(path.read_text())
        repo = StubRepo(info=fixture["info"], refs=dict(fixture["stub"]["refs"]))
        repo.files = _build_files(fixture["stub"])
        repos[repo.repo_id] = repo
    return repos
