"""Repos whose files the Hub stand-in serves whole: a model folder (the tiny generated model's
safetensors, configs and tokenizer) and, for progress to be seen, large sparse files read from
disk. `StubRepo`s like the recorded ones, so every route answers for them alike."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from tests.support.hubstub.repos import DTYPE_BYTES, RepoFile, StubRepo

LFS_FROM_BYTES = 10 * 1024  # as the Hub: big files go through LFS (ETag = sha256)
MIB = 1 << 20
# The repos `serve_tiny` adds: the tiny model, the same behind a gate, and the same with a
# large sparse file more (its download takes long enough to be watched).
TINY = "sbtest/tiny-llama"
GATED = "sbtest/gated-tiny"
BIG = "sbtest/big-weights"


def serve_tiny(hub: Any, tiny_model: Path, scratch: Path, big_bytes: int = 48 * MIB) -> None:
    hub.add_repo(folder_repo(TINY, tiny_model))
    hub.add_repo(folder_repo(GATED, tiny_model, gated=True))
    sparse = {"extra.safetensors": big_bytes}
    hub.add_repo(folder_repo(BIG, tiny_model, sparse_files=sparse, scratch=scratch))


def folder_repo(
    repo_id: str,
    folder: Path,
    *,
    gated: bool = False,
    sparse_files: dict[str, int] | None = None,
    scratch: Path | None = None,
) -> StubRepo:
    """The files of `folder` as a repo at one commit; `sparse_files` adds files of zeros of
    those sizes (written sparse under `scratch`, so a GiB costs no disk)."""
    files: dict[str, RepoFile] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        name = str(path.relative_to(folder))
        content = path.read_bytes()
        files[name] = RepoFile(name, content, len(content), lfs=len(content) >= LFS_FROM_BYTES)
    for name, size in (sparse_files or {}).items():
        if scratch is None:
            raise ValueError("sparse files need a scratch folder")
        target = scratch / name.replace("/", "__")
        with target.open("wb") as out:
            out.truncate(size)
        files[name] = RepoFile(name, None, size, lfs=True, path=target)
    sha = hashlib.sha1("\n".join([repo_id, *sorted(files)]).encode()).hexdigest()  # noqa: S324 - an id
    info = _info(repo_id, folder, gated=gated, sha=sha)
    repo = StubRepo(info=info, refs={"main": sha})
    repo.files = files
    return repo


def _info(repo_id: str, folder: Path, *, gated: bool, sha: str) -> dict[str, Any]:
    config = json.loads((folder / "config.json").read_text())
    parameters = _parameters(folder)
    return {
        "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id
        "id": repo_id,
        "modelId": repo_id,
        "author": repo_id.split("/")[0],
        "sha": sha,
        "lastModified": "2026-11-30T10:00:00.000Z",
        "createdAt": "2026-11-30T10:00:00.000Z",
        "private": False,
        "gated": "manual" if gated else False,
        "disabled": False,
        "downloads": 1,
        "likes": 0,
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["transformers", "safetensors", config.get("model_type", "llama")],
        "config": {k: config[k] for k in ("architectures", "model_type") if k in config},
        "safetensors": {"parameters": parameters, "total": sum(parameters.values())},
    }


def _parameters(folder: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in tensor["shape"]:
                count *= dim
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + count
    assert all(dtype in DTYPE_BYTES for dtype in counts), counts
    return counts
