"""KV-cache geometry per rank, as vLLM V1's kv_cache_interface and kv_cache_utils size it."""

from __future__ import annotations

from dataclasses import dataclass

from .spec import ModelSpec
from .units import cdiv
from .weights import kv_heads_per_rank, pp_layer_ranges


@dataclass(frozen=True, slots=True)
class StageKv:
    """KV layout of one pipeline stage on one TP rank."""

    page_bytes: int  # one block of one layer
    block_size: int
    full_layers: int
    sliding_layers: int
    sliding_window: int | None

    @property
    def groups(self) -> list[int]:
        """Layer counts of vLLM's KV-cache groups (hybrid allocator, uniform page size)."""
        kinds = [n for n in (self.full_layers, self.sliding_layers) if n]
        if len(kinds) <= 1:
            return kinds
        size = min(kinds) if max(kinds) >= min(kinds) * 1.25 else max(kinds)
        return [min(size, n - i) for n in kinds for i in range(0, n, size)]

    @property
    def block_bytes(self) -> int:
        """Bytes one block id costs: a page in every layer slot of the largest group."""
        return self.page_bytes * max(self.groups, default=0)

    def num_blocks(self, available_bytes: int) -> int:
        """Whole blocks that fit in the KV memory of this rank."""
        if available_bytes <= 0 or self.block_bytes == 0:
            return 0
        return available_bytes // self.block_bytes

    def tokens(self, num_blocks: int) -> int:
        """ "GPU KV cache size: N tokens" as vLLM prints it for these blocks."""
        return num_blocks // max(1, len(self.groups)) * self.block_size

    def request_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """KV memory one request of ``max_model_len`` needs (vLLM's max_memory_usage_bytes)."""
        full = cdiv(max_model_len, self.block_size) * self.page_bytes * self.full_layers
        if not self.sliding_layers or self.sliding_window is None:
            return full
        span = min(self.sliding_window - 1 + max_num_batched_tokens, max_model_len)
        return full + (cdiv(span, self.block_size) + 1) * self.page_bytes * self.sliding_layers

    def longest_fitting_len(self, available_bytes: int, max_num_batched_tokens: int) -> int:
        """Binary search, like vLLM's estimate of the max model length that fits."""
        low, high = 0, 1 << 24
        while low < high:
            mid = (low + high + 1) // 2
            if self.request_bytes(mid, max_num_batched_tokens) <= available_bytes:
                low = mid
            else:
                high = mid - 1
        return low


def kv_element_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per cached element: the model dtype for "auto", 1 for fp8 variants."""
    kind = kv_cache_dtype.lower()
    if kind == "auto":
        return model_dtype_bytes
    if kind.startswith("fp8") or kind.startswith("int8"):
        return 1
    if kind in ("float16", "bfloat16", "half"):
        return 2
    if kind in ("float32", "float"):
        return 4
    raise ValueError(f"unsupported kv-cache dtype {kv_cache_dtype!r}")


def stage_kv(
    spec: ModelSpec, *, tp: int, pp: int, pp_rank: int, block_size: int, element_bytes: int
) -> StageKv:
    """KV layout of stage ``pp_rank`` (each stage caches only its own layers)."""
    layers = pp_layer_ranges(spec.num_layers, pp)[pp_rank]
    sliding = sum(1 for i in layers if spec.is_sliding(i))
    if spec.mla is not None:
        page = block_size * spec.mla.latent_size * element_bytes
    else:
        page = block_size * kv_heads_per_rank(spec, tp) * spec.head_dim * 2 * element_bytes
    return StageKv(page, block_size, len(layers) - sliding, sliding, spec.sliding_window)


def kv_bytes_per_token(spec: ModelSpec, *, tp: int, element_bytes: int) -> int:
    """Textbook figure for the whole model on one TP rank: 2 × layers × kv heads × head × bytes."""
    per_layer = stage_kv(spec, tp=tp, pp=1, pp_rank=0, block_size=1, element_bytes=element_bytes)
    return per_layer.page_bytes * spec.num_layers
