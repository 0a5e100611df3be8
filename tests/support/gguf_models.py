"""GGUF files for tests: headers of big models (no data) and Hub stand-in repos of them.

A header-only file has the tensor list of, say, a 70B Q4_K_M model and its real size on the
Hub stand-in, but the stand-in holds only the header's bytes: a client that reads more than a
ranged header gets zeros, and the test can count what it asked for.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.support.hubstub.repos import RepoFile, StubRepo

Q4_K = gguf.GGMLQuantizationType.Q4_K
Q6_K = gguf.GGMLQuantizationType.Q6_K
F32 = gguf.GGMLQuantizationType.F32


@dataclass(frozen=True)
class BigLlama:
    layers: int = 80
    hidden: int = 8192
    heads: int = 64
    kv_heads: int = 8
    ffn: int = 28672
    vocab: int = 128256
    context: int = 131072


def _nbytes(kind: gguf.GGMLQuantizationType, elements: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return elements // block * size


def big_llama_header(path: Path, shape: BigLlama, *, file_type: int = 15) -> tuple[bytes, int]:
    """(header bytes, full file size) of a Llama of ``shape``: Q4_K matrices, Q6_K output and
    ``attn_v``/``ffn_down`` (a "Q4_K_M" mix), f32 norms. Writes the header to ``path``."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_vocab_size(shape.vocab)
    writer.add_file_type(file_type)
    kv = shape.kv_heads * shape.hidden // shape.heads
    tensors = [("token_embd.weight", (shape.vocab, shape.hidden), Q4_K)]
    for i in range(shape.layers):
        tensors += [
            (f"blk.{i}.attn_norm.weight", (shape.hidden,), F32),
            (f"blk.{i}.attn_q.weight", (shape.hidden, shape.hidden), Q4_K),
            (f"blk.{i}.attn_k.weight", (kv, shape.hidden), Q4_K),
            (f"blk.{i}.attn_v.weight", (kv, shape.hidden), Q6_K),
            (f"blk.{i}.attn_output.weight", (shape.hidden, shape.hidden), Q4_K),
            (f"blk.{i}.ffn_norm.weight", (shape.hidden,), F32),
            (f"blk.{i}.ffn_gate.weight", (shape.ffn, shape.hidden), Q4_K),
            (f"blk.{i}.ffn_up.weight", (shape.ffn, shape.hidden), Q4_K),
            (f"blk.{i}.ffn_down.weight", (shape.hidden, shape.ffn), Q6_K),
        ]
    tensors += [
        ("output_norm.weight", (shape.hidden,), F32),
        ("output.weight", (shape.vocab, shape.hidden), Q6_K),
    ]
    data_bytes = 0
    for name, dims, kind in tensors:
        elements = 1
        for d in dims:
            elements *= d
        nbytes = _nbytes(kind, elements)
        # GGUF lists dims fastest-first; add_tensor_info takes the numpy (row-major) shape.
        writer.add_tensor_info(name, dims, np.dtype(np.float32), nbytes, raw_dtype=kind)
        data_bytes += -(-nbytes // 32) * 32
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header = path.read_bytes()
    return header, -(-len(header) // 32) * 32 + data_bytes  # the data starts aligned to 32


def gguf_repo(repo_id: str, files: dict[str, tuple[bytes, int]]) -> StubRepo:
    """A Hub repo of GGUF files: name → (the bytes the stand-in holds, the file's size)."""
    served = {
        name: RepoFile(name, content, size, lfs=True) for name, (content, size) in files.items()
    }
    sha = hashlib.sha1("\n".join([repo_id, *sorted(served)]).encode()).hexdigest()  # noqa: S324 - an id
    info = {
        "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id
        "id": repo_id,
        "modelId": repo_id,
        "author": repo_id.split("/")[0],
        "sha": sha,
        "lastModified": "2026-11-30T10:00:00.000Z",
        "createdAt": "2026-11-30T10:00:00.000Z",
        "private": False,
        "gated": False,
        "disabled": False,
        "downloads": 1,
        "likes": 0,
        "library_name": "gguf",
        "pipeline_tag": "text-generation",
        "tags": ["gguf", "llama"],
    }
    repo = StubRepo(info=info, refs={"main": sha})
    repo.files = served
    return repo
