"""vLLM's hybrid KV-cache manager for one pipeline stage on one TP rank: per-layer cache specs,
one shared page size (Mamba state padded, attention block sizes raised), layers grouped by kind
into equal-sized groups, and what one request at ``max_model_len`` claims from the shared pool.

Rules from vLLM 0.33: v1/core/kv_cache_planning.py (unify_kv_cache_spec_page_size,
_get_kv_cache_groups_uniform_page_size, _max_memory_usage_bytes_from_groups),
v1/core/kv_cache_utils.py (get_max_concurrency_for_kv_cache_config), v1/kv_cache_interface.py
(max_memory_usage_bytes of each spec), platforms/interface.py (_align_hybrid_block_size). Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from deployments.planning.model.layers import STATE_KINDS, Kind, LayerCache
from deployments.planning.units import cdiv

MAX_SEARCH_LEN = 1 << 24


@dataclass(frozen=True, slots=True)
class KvRules:
    """What the target vLLM version and flags decide about the KV-cache manager."""

    group_ratio: float = 1.5  # bucket sizes within this ratio share the larger group size
    extra_in_flight_batches: int = 1  # async scheduling keeps pp + 1 batches in flight
    mamba_align: bool = True  # prefix caching on: a Mamba layer holds 2 (+ checkpoint) states
    chunked_hybrid: bool = False  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE (0.14+: on)
    dcp: int = 1  # --decode-context-parallel-size
    state_dtype_bytes: int = 2  # the model dtype, for states that follow it
    ds_mla: bool = False  # --kv-cache-dtype fp8_ds_mla: 656 bytes per latent
    kv_cache_dtype: str = "auto"  # after the checkpoint's own choice (ModelOpt FP8) is applied
    null_block: bool = True  # the fit check leaves out the block BlockPool holds back
    gdn_checkpoints: bool = True  # FlashInfer GDN prefill (Hopper) exports align checkpoints
    mamba_checkpoints: bool = True  # Mamba-2 mixers keep one prefill checkpoint page
    mamba_all: bool = False  # "all" mode: a Mamba state cached per block, like attention
    default_ssm_bytes: int = 4  # NemotronHForCausalLMConfig's SSM dtype where config has none
    # What the platform sets (memory/platform.py): its attention backend's smallest kernel
    # block, which a hybrid model's attention block is a multiple of; asynchronous scheduling
    # (a second batch in flight); an SSM state dtype it forces (bytes, 0: none)
    kernel_block: int = 16
    async_scheduling: bool = True
    forced_ssm_bytes: int = 0


# The version each rule arrived in, read from the wheels' sources (vllm/…) of 0.10.1.1, 0.11
# to 0.13, 0.15 to 0.33 (0.14 not read: the group ratio and the wording sit between 0.13 and
# 0.15, which agree). Before the first entry, the rule is off.
GROUP_RATIO_125_FROM = (0, 12, 0)  # v1/core/kv_cache_utils.py: before, the smallest bucket
# envs.py VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to "1" from 0.14.0
# (0.14.0 envs.py:1468-1470; "0" in 0.13.0 :1432-1434 and 0.11.0 :1389-1391; "1" in 0.15,
# 0.20, 0.26, 0.32, 0.33): chunked local attention keeps the hybrid manager, so a chunked
# layer holds its current chunk, not the whole context (Llama 4 on the CPU build, issue 38)
CHUNKED_HYBRID_FROM = (0, 14, 0)
GROUP_RATIO_15_FROM = (0, 18, 0)  # "max_num_layers < min_num_layers * 1.5"
IN_FLIGHT_FROM = (0, 26, 0)  # config/vllm.py max_in_flight_tokens (max_concurrent_batches)
HYBRID_PREFIX_CACHING_FROM = (0, 26, 0)  # config/model.py is_prefix_caching_supported: hybrid
NULL_BLOCK_CHECK_FROM = (0, 29, 0)  # kv_cache_utils.py "Reserve the null block …"
MAMBA_CHECKPOINT_FROM = (0, 32, 0)  # mamba_mixer2.py num_prefill_checkpoint_blocks=1
GDN_CHECKPOINT_FROM = (0, 33, 0)  # gdn/qwen_gdn_linear_attn.py, gdn_attn.py 64-token grid
# models/config.py MambaModelConfig: "all" if the model SupportsMambaPrefixCaching, else
# "align", from hybrid prefix caching (0.26) until 0.28, where "align" became the only default
MAMBA_ALL_UNTIL = (0, 28, 0)
MAMBA_ALL_MODELS = frozenset({"falcon_h1", "granitemoehybrid", "jamba", "nemotron_h", "zamba2"})
MAMBA1_CHUNK = 2048  # config/model.py get_mamba_chunk_size: Mamba-1 has no chunk
# models/config.py NemotronHForCausalLMConfig: absent before 0.13 (the model dtype), then
# getattr(hf_config, "mamba_ssm_cache_dtype", "float16"), "float32" from 0.20
SSM_FP16_DEFAULT_FROM = (0, 13, 0)
SSM_FP32_DEFAULT_FROM = (0, 20, 0)


def default_ssm_bytes(version: tuple[int, int, int], dtype_bytes: int) -> int:
    """Bytes of Nemotron-H's SSM state element when config.json names no dtype."""
    if version >= SSM_FP32_DEFAULT_FROM:
        return 4
    return 2 if version >= SSM_FP16_DEFAULT_FROM else dtype_bytes


def group_ratio(version: tuple[int, int, int]) -> float:
    """_get_kv_cache_groups_uniform_page_size's tolerance; 1.0: the smallest bucket always."""
    if version >= GROUP_RATIO_15_FROM:
        return 1.5
    return 1.25 if version >= GROUP_RATIO_125_FROM else 1.0


GDN_CHECKPOINT_ALIGNMENT = 64  # v1/attention/backends/gdn_attn.py
HOPPER = ("h100", "h200", "h800", "h20", "gh200")
NOT_HOPPER = (
    *("a100", "a800", "a10", "a30", "l40", "l4", "a6000", "rtx", "v100", "t4"),
    *("b100", "b200", "b300", "gb200", "gb300", "mi2", "mi3"),
)


def is_hopper(gpu_name: str, gpu_total_bytes: int) -> bool:
    """vLLM picks FlashInfer's GDN prefill on SM90 only (Blackwell needs CUDA 13); a GPU known
    only by its size is taken for H100/H200 class between 70 and 160 GiB, as the batching
    defaults do."""
    name = gpu_name.lower()
    if any(h in name for h in HOPPER):
        return True
    if any(n in name for n in NOT_HOPPER):
        return False
    return 70 << 30 <= gpu_total_bytes < 160 << 30


def rules_for(
    version: tuple[int, int, int],
    *,
    dtype_bytes: int,
    dcp: int = 1,
    kv_cache_dtype: str = "auto",
    hopper: bool = True,
    sparse_mla: bool = False,
    model_type: str = "",
    kernel_block: int = 16,
    async_scheduling: bool = True,
    forced_ssm_bytes: int = 0,
    prefix_caching: bool = True,
) -> KvRules:
    """The rules of vLLM ``version`` (the table above).

    ``kv_cache_dtype`` is the resolved one (a ModelOpt checkpoint's FP8 under ``auto``). Sparse
    MLA (DeepSeek-V3.2's indexer) on FlashMLA sparse serves any fp8 cache in the fp8_ds_mla
    layout (mla_attention.py ``_canonicalize_sparse_mla_kv_cache_dtype``). Hybrid prefix
    caching from 0.26 puts Gated DeltaNet in "align" mode; 0.26-0.27 put the hybrids whose
    vLLM class declares SupportsMambaPrefixCaching (``model_type`` in MAMBA_ALL_MODELS) in
    "all" mode instead. ``hopper``, ``kernel_block``, ``async_scheduling`` and
    ``forced_ssm_bytes`` are the platform's (memory/platform.py); ``prefix_caching`` False
    where the platform turns it off (MLA on a CPU without AMX), which leaves Mamba in "none"."""
    ds_mla = kv_cache_dtype == "fp8_ds_mla" or (sparse_mla and kv_cache_dtype.startswith("fp8"))
    return KvRules(
        group_ratio=group_ratio(version),
        extra_in_flight_batches=1 if version >= IN_FLIGHT_FROM else 0,
        mamba_align=version >= HYBRID_PREFIX_CACHING_FROM and prefix_caching,
        dcp=dcp,
        state_dtype_bytes=dtype_bytes,
        ds_mla=ds_mla,
        kv_cache_dtype=kv_cache_dtype,
        null_block=version >= NULL_BLOCK_CHECK_FROM,
        chunked_hybrid=version >= CHUNKED_HYBRID_FROM,
        gdn_checkpoints=version >= GDN_CHECKPOINT_FROM and hopper,
        mamba_checkpoints=version >= MAMBA_CHECKPOINT_FROM,
        mamba_all=HYBRID_PREFIX_CACHING_FROM <= version < MAMBA_ALL_UNTIL
        and model_type in MAMBA_ALL_MODELS,
        default_ssm_bytes=default_ssm_bytes(version, dtype_bytes),
        kernel_block=kernel_block,
        async_scheduling=async_scheduling,
        forced_ssm_bytes=forced_ssm_bytes,
    )


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """One layer's cache after page unification."""

    kind: Kind
    page_bytes: int
    block_size: int
    window: int = 0

    def pages(self, max_len: int, in_flight: int, rules: KvRules) -> int:
        """Blocks one request of ``max_len`` holds in this layer (max_memory_usage_bytes)."""
        if self.kind in STATE_KINDS and rules.mamba_all:
            return cdiv(max_len, self.block_size)  # MambaSpec "all": a state every block
        if self.kind in STATE_KINDS:
            # align mode (0.26+): the running state, the previous block's and, where the kernel
            # exports one (Mamba-2 from 0.32, Gated DeltaNet with FlashInfer from 0.33), a
            # prefill checkpoint
            if not rules.mamba_align:
                return 1
            checkpoint = (
                rules.mamba_checkpoints if self.kind is Kind.MAMBA else rules.gdn_checkpoints
            )
            return 3 if checkpoint else 2
        if self.kind is Kind.SLIDING:
            return cdiv(min(self.window - 1 + in_flight, max_len), self.block_size) + 1
        if self.kind is Kind.CHUNKED:
            return cdiv(min(self.window + in_flight, max_len), self.block_size)
        return cdiv(cdiv(max_len, rules.dcp), self.block_size)


@dataclass(frozen=True, slots=True)
class StageKv:
    """KV layout of one stage on one rank: its groups share one pool of equal-sized blocks."""

    specs: tuple[tuple[CacheSpec, int], ...]  # each distinct layer cache and how many layers
    group_specs: tuple[CacheSpec, ...]  # one per KV-cache group
    group_size: int  # layer slots per group (the last group of a kind may be padding)
    rules: KvRules = field(default_factory=KvRules)
    pp: int = 1

    @property
    def page_bytes(self) -> int:
        """The one page size every layer shares."""
        return self.specs[0][0].page_bytes if self.specs else 0

    @property
    def block_size(self) -> int:
        """Tokens per block of the full-attention layers (the reported unit)."""
        sizes = [s.block_size for s, _ in self.specs if s.kind not in STATE_KINDS]
        return min(sizes, default=0)

    @property
    def groups(self) -> list[int]:
        """Layers in each KV-cache group (a padded group counts its real layers)."""
        size = self.group_size
        return [min(size, n - i) for _, n in self.specs for i in range(0, n, size)]

    def count(self, kind: Kind) -> int:
        """Layers of ``kind`` on this stage."""
        return sum(n for s, n in self.specs if s.kind is kind)

    @property
    def block_bytes(self) -> int:
        """Bytes one block id costs: a page in every layer slot of a group."""
        return self.page_bytes * self.group_size

    def check_bytes(self, available_bytes: int) -> int:
        """What vLLM's one-request check and max-length estimate plan against."""
        return available_bytes - (self.block_bytes if self.rules.null_block else 0)

    def num_blocks(self, available_bytes: int) -> int:
        """Whole blocks that fit in the KV memory of this rank."""
        if available_bytes <= 0 or self.block_bytes == 0:
            return 0
        return available_bytes // self.block_bytes

    def tokens(self, num_blocks: int) -> int:
        """Tokens as versions before 0.21 printed them: blocks per group × block size."""
        return num_blocks // max(1, len(self.group_specs)) * self.block_size

    def request_pages(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` takes from the pool, over all groups."""
        in_flight = max_num_batched_tokens * self.in_flight_batches
        return sum(g.pages(max_model_len, in_flight, self.rules) for g in self.group_specs)

    @property
    def in_flight_batches(self) -> int:
        """config/vllm.py ``max_concurrent_batches`` (from 0.26; one batch before): pp + 1
        with async scheduling (Model Runner V2), else pp."""
        if not self.rules.extra_in_flight_batches:
            return 1
        return self.pp + 1 if self.rules.async_scheduling else self.pp

    def request_bytes(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        """KV memory one request of ``max_model_len`` needs (vLLM's max_memory_usage_bytes)."""
        return self.block_bytes * self.request_pages(max_model_len, max_num_batched_tokens)

    def longest_fitting_len(self, available_bytes: int, max_num_batched_tokens: int) -> int:
        """Binary search, like vLLM's estimate of the max model length that fits."""
        low, high = 0, MAX_SEARCH_LEN
        while low < high:
            mid = (low + high + 1) // 2
            if self.request_bytes(mid, max_num_batched_tokens) <= available_bytes:
                low = mid
            else:
                high = mid - 1
        return low


@dataclass(frozen=True, slots=True)
class Geometry:
    """Per-rank sizes the specs are built from."""

    tp: int
    block_size: int
    element_bytes: int  # KV cache element
    state_bytes: int  # one linear/Mamba layer's state per sequence (0: none)
    ds_mla: bool = False
    chunk_size: int = 0  # the Mamba kernel's chunk ("all" mode aligns blocks to it)


def counted(caches: Iterable[LayerCache]) -> list[tuple[LayerCache, int]]:
    """Each distinct cache with its number of layers, counted by identity: a LayerPlan shares
    one object among equal caches, and the search runs this for every layout."""
    counts: dict[int, int] = {}
    objects: dict[int, LayerCache] = {}
    for c in caches:
        counts[id(c)] = counts.get(id(c), 0) + 1
        objects[id(c)] = c
    return [(objects[k], n) for k, n in counts.items()]


def stage_layout(
    caches: list[tuple[LayerCache, int]], geo: Geometry, rules: KvRules, *, pp: int = 1
) -> StageKv:
    """Group the caches of one stage (each with its layer count) as vLLM's manager does."""
    promoted = [(_promoted(c, rules), n) for c, n in caches]
    attn = [c for c, _ in promoted if c.kind not in STATE_KINDS]
    states = {c.kind for c, _ in promoted if c.kind in STATE_KINDS}
    block = _block_size(attn, geo, states, rules)
    raw = [(_raw_spec(c, geo, block), n) for c, n in promoted]
    if not raw:
        return StageKv((), (), 0, rules, pp)
    specs = _merged(_unified(raw))
    group_specs, size = _grouped(specs, rules.group_ratio)
    return StageKv(specs, group_specs, size, rules, pp)


def _promoted(cache: LayerCache, rules: KvRules) -> LayerCache:
    """Chunked layers are cached at full length where vLLM keeps the hybrid manager off for
    them (its default before 0.14: a latency regression with chunked local attention)."""
    if cache.kind is Kind.CHUNKED and (not rules.chunked_hybrid or not cache.window):
        return LayerCache(Kind.FULL, cache.kv_heads, cache.head_dim)
    return cache


FP8_DS_MLA_BYTES = 656  # 512 fp8 latent + 4 fp32 scales + 64 bf16 rope (MLAAttentionSpec)


def per_token_bytes(cache: LayerCache, tp: int, element_bytes: int, *, ds_mla: bool = False) -> int:
    """One token of one layer on one rank: K and V (MLA: the latent, not split over TP)."""
    if cache.kind is Kind.MLA:
        latent = FP8_DS_MLA_BYTES if ds_mla else cache.head_dim * element_bytes
        return latent + cache.indexer_bytes
    return max(1, cache.kv_heads // tp) * cache.head_dim * 2 * element_bytes


def _block_size(attn: list[LayerCache], geo: Geometry, states: set[Kind], rules: KvRules) -> int:
    """_align_hybrid_block_size: raise the attention block until its page holds a state (on
    the prefill-checkpoint grid of FlashInfer's Gated DeltaNet in align mode)."""
    if not (states and attn and geo.state_bytes):
        return geo.block_size
    one = per_token_bytes(attn[0], geo.tp, geo.element_bytes, ds_mla=geo.ds_mla)
    if rules.mamba_all:  # whole kernel chunks (lcm with the 16-token kernel block)
        chunk = math.lcm(geo.chunk_size or MAMBA1_CHUNK, 16)
        return max(geo.block_size, chunk * cdiv(cdiv(geo.state_bytes, one), chunk))
    kernel = rules.kernel_block  # the backend's smallest kernel block (16 on CUDA, 32 on CPU)
    align = max(kernel, geo.block_size)
    if attn[0].kind is Kind.MLA:
        align = max(align, 128)
    if rules.mamba_align and rules.gdn_checkpoints and states == {Kind.LINEAR}:
        align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
    needed = align * cdiv(geo.state_bytes, align * one)
    return max(geo.block_size, kernel * cdiv(needed, kernel))


def _raw_spec(cache: LayerCache, geo: Geometry, block: int) -> CacheSpec:
    if cache.kind in STATE_KINDS:
        return CacheSpec(cache.kind, geo.state_bytes, block)
    page = block * per_token_bytes(cache, geo.tp, geo.element_bytes, ds_mla=geo.ds_mla)
    return CacheSpec(cache.kind, page, block, cache.window)


def _unified(specs: list[tuple[CacheSpec, int]]) -> list[tuple[CacheSpec, int]]:
    """unify_kv_cache_spec_page_size: smaller pages grow their block size when they divide
    the largest page, else (Mamba state, odd attention pages) are padded to it."""
    top = max(s.page_bytes for s, _ in specs)
    out = []
    for s, n in specs:
        if s.page_bytes == top:
            out.append((s, n))
        elif s.kind not in STATE_KINDS and s.page_bytes and top % s.page_bytes == 0:
            grown = CacheSpec(s.kind, top, s.block_size * (top // s.page_bytes), s.window)
            out.append((grown, n))
        else:
            out.append((CacheSpec(s.kind, top, s.block_size, s.window), n))
    return out


def _merged(specs: list[tuple[CacheSpec, int]]) -> tuple[tuple[CacheSpec, int], ...]:
    """Layers whose caches became identical share a bucket (e.g. heads that differ only
    before the page is unified)."""
    counts: dict[CacheSpec, int] = {}
    for s, n in specs:
        counts[s] = counts.get(s, 0) + n
    return tuple(counts.items())


def _grouped(
    specs: tuple[tuple[CacheSpec, int], ...], ratio: float
) -> tuple[tuple[CacheSpec, ...], int]:
    """_get_kv_cache_groups_uniform_page_size: one group size for every kind (the smallest
    kind's count, or the largest when they are close), each kind split into that many slots."""
    if len(specs) == 1:
        return (specs[0][0],), specs[0][1]
    smallest, largest = min(n for _, n in specs), max(n for _, n in specs)
    size = largest if largest < smallest * ratio else smallest
    groups = tuple(s for s, n in specs for _ in range(cdiv(n, size)))
    return groups, size
