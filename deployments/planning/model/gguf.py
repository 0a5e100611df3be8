"""``GgufSpec``: a GGUF model as llama.cpp loads it, from the file's header alone.

The catalog reads the header (the ``gguf`` package; on the Hub a ranged read) and hands in the
metadata key/values and one ``GgufTensor`` per tensor with its stored bytes. Nothing here
multiplies parameters by a nominal bits-per-weight: a "Q4_K_M" file mixes types, so the sums
are of the real per-tensor sizes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from deployments.planning.errors import ModelSpecError

# ggml type → (elements per block, bytes per block), from ggml's type traits
# (gguf.constants.GGML_QUANT_SIZES): the cache types llama-server accepts for -ctk/-ctv.
KV_CACHE_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}
# llama.cpp's LLM_FFN/ftype names as `general.file_type` numbers them (llama.h, llama_ftype).
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4",
}  # fmt: skip
_BLOCK = re.compile(r"blk\.(\d+)\.")
INPUT_TENSORS = ("token_embd.", "token_embd_norm.", "token_types.", "position_embd.")
OUTPUT_TENSORS = ("output.", "output_norm.", "cls.", "cls_out.")


@dataclass(frozen=True, slots=True)
class GgufTensor:
    name: str
    ggml_type: str  # "Q4_K", "F16", ...
    n_elements: int
    n_bytes: int  # as stored: n_elements / block elements × block bytes


@dataclass(frozen=True, slots=True)
class GgufSpec:
    """Shape and per-layer bytes; ``layer_bytes[i]`` is every ``blk.i.*`` tensor together."""

    name: str
    architecture: str
    block_count: int
    embedding_length: int
    head_count: int
    head_count_kv: tuple[int, ...]  # per block (0: a block without attention, e.g. recurrent)
    key_length: int
    value_length: int
    vocab_size: int
    feed_forward_length: int  # the widest block's FFN (0 when the header does not say)
    context_length: int  # n_ctx_train: llama-server's -c 0 and the per-slot cap
    file_type: str  # "Q4_K_M", "Q8_0", ... or "" when the header does not say
    layer_bytes: tuple[int, ...]
    input_bytes: int  # token_embd and friends: always on the CPU
    output_bytes: int  # output_norm + output (+ token_embd again when tied): the last GPU
    duplicated_bytes: int  # no output.weight: llama.cpp loads token_embd again as the output
    tensor_types: Mapping[str, int]  # ggml type → bytes, for the model page
    sliding_window: int = 0  # 0: no SWA layers (the SWA KV rule is not modelled yet)

    @property
    def tied_output(self) -> bool:
        return self.duplicated_bytes > 0

    @property
    def file_tensor_bytes(self) -> int:
        """The file's tensor data: the tied output is stored once."""
        return self.input_bytes + sum(self.layer_bytes) + self.output_bytes - self.duplicated_bytes

    def kv_width(self, layer: int, value: bool) -> int:
        """Elements of K (or V) one token writes in one layer: head dim × KV heads."""
        return (self.value_length if value else self.key_length) * self.head_count_kv[layer]


def _key(metadata: Mapping[str, object], arch: str, field: str) -> object:
    return metadata.get(f"{arch}.{field}")


def _int(metadata: Mapping[str, object], arch: str, field: str, default: int | None = None) -> int:
    value = _key(metadata, arch, field)
    if isinstance(value, bool) or not isinstance(value, int):
        if default is None:
            raise ModelSpecError(f"the GGUF header has no {arch}.{field}")
        return default
    return value


def _per_layer(value: object, count: int, what: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * count
    if isinstance(value, Sequence) and len(value) == count:
        return tuple(int(v) for v in value)
    raise ModelSpecError(f"the GGUF header's {what} is neither a number nor one per block")


def _layer_of(name: str) -> int | None:
    match = _BLOCK.match(name)
    return int(match.group(1)) if match else None


def gguf_spec(
    metadata: Mapping[str, object], tensors: Sequence[GgufTensor], *, name: str
) -> GgufSpec:
    """A ``GgufSpec`` from the header's key/values and tensor list (what ``gguf`` reads)."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelSpecError("the GGUF header has no general.architecture")
    blocks = _int(metadata, arch, "block_count")
    embd = _int(metadata, arch, "embedding_length")
    heads = _per_layer(_key(metadata, arch, "attention.head_count"), blocks, "head_count")
    kv_raw = _key(metadata, arch, "attention.head_count_kv")
    kv_heads = heads if kv_raw is None else _per_layer(kv_raw, blocks, "head_count_kv")
    head_dim = embd // max(heads[0], 1)
    layer_bytes = [0] * blocks
    input_bytes = output_bytes = 0
    types: dict[str, int] = {}
    for tensor in tensors:
        types[tensor.ggml_type] = types.get(tensor.ggml_type, 0) + tensor.n_bytes
        layer = _layer_of(tensor.name)
        if layer is not None and layer < blocks:
            layer_bytes[layer] += tensor.n_bytes
        elif tensor.name.startswith(OUTPUT_TENSORS):
            output_bytes += tensor.n_bytes
        else:  # the input layer, and layer-less extras (rope_freqs, an MTP block): the CPU
            input_bytes += tensor.n_bytes
    names = {t.name for t in tensors}
    tied = "output.weight" not in names
    embd_bytes = sum(t.n_bytes for t in tensors if t.name == "token_embd.weight")
    return GgufSpec(
        name=name,
        architecture=arch,
        block_count=blocks,
        embedding_length=embd,
        head_count=heads[0],
        head_count_kv=kv_heads,
        key_length=_int(metadata, arch, "attention.key_length", head_dim),
        value_length=_int(metadata, arch, "attention.value_length", head_dim),
        vocab_size=_vocab_size(metadata, arch, tensors),
        feed_forward_length=_widest(_key(metadata, arch, "feed_forward_length")),
        context_length=_int(metadata, arch, "context_length", 0),
        file_type=_file_type(metadata.get("general.file_type")),
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_bytes,
        output_bytes=output_bytes + (embd_bytes if tied else 0),
        duplicated_bytes=embd_bytes if tied else 0,
        tensor_types=types,
        sliding_window=_int(metadata, arch, "attention.sliding_window", 0),
    )


def _vocab_size(metadata: Mapping[str, object], arch: str, tensors: Sequence[GgufTensor]) -> int:
    declared = _key(metadata, arch, "vocab_size")
    if isinstance(declared, int) and not isinstance(declared, bool):
        return declared
    tokens = metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, Sequence):
        return len(tokens)
    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    width = _int(metadata, arch, "embedding_length")
    return embd.n_elements // width if embd else 0


def _widest(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, Sequence) and value:
        return max(int(v) for v in value)
    return 0


def _file_type(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return FILE_TYPES.get(value, f"type {value}")
    return ""


def kv_row_bytes(cache_type: str, elements: int) -> int:
    """Bytes of one KV row of ``elements`` values in a cache type (ggml_row_size)."""
    if cache_type not in KV_CACHE_TYPES:
        raise ModelSpecError(
            f"unknown KV cache type {cache_type!r} (one of {', '.join(KV_CACHE_TYPES)})"
        )
    block_elems, block_bytes = KV_CACHE_TYPES[cache_type]
    return elements // block_elems * block_bytes
