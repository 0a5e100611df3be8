"""The shape of the random Llama the llama-server engine tests start (written by
`deployments.catalog.gguf_write.write_random_llama`) and the KV bytes it must get."""

from __future__ import annotations

from deployments.catalog.gguf_write import LlamaShape

# The random Llama these tests start: head_dim 32, so a quantized KV cache is allowed (§2.3).
TINY = LlamaShape(hidden=64, layers=2, heads=2, kv_heads=1)


def kv_bytes(cells: int) -> int:
    """The f16 KV cache llama.cpp allocates for `cells` tokens of TINY (reference §4.1)."""
    head_dim = TINY.hidden // TINY.heads
    return cells * TINY.layers * 2 * TINY.kv_heads * head_dim * 2
