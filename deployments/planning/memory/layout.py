"""Per-GPU memory of one TP × PP layout, and what vLLM would make of it at start-up."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import GIB, gib

from .activation import activation_bytes, cuda_graph_bytes, non_torch_bytes
from .checks import layout_errors
from .kvcache import StageKv
from .lora import lora_bytes, lora_warnings
from .settings import Settings, settings_kv
from .weights import Shard, pp_layer_ranges, rank_weights_bytes


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """One rank's memory as vLLM accounts it; ``total_bytes`` is what it will hold."""

    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_cache_bytes: int
    total_bytes: int
    gpu_total_bytes: int
    budget_bytes: int  # total × gpu_memory_utilization
    correction_bytes: int = 0  # of non_torch_bytes: the fleet-learned correction (correction.py)
    lora_bytes: int = 0  # LoRA adapter slots (lora.py), loaded with the weights

    @property
    def free_bytes(self) -> int:
        """What is left on the device once the engine is up."""
        return self.gpu_total_bytes - self.total_bytes


@dataclass(frozen=True, slots=True)
class LayoutMemory:
    """Outcome of one layout: per rank (stage-major), KV capacity, and why it would fail."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    per_gpu: tuple[GpuMemory, ...]
    kv_cache_tokens: int
    max_model_len: int
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    requested_max_model_len: int = 0  # what was asked (or the model's own); 0: max_model_len
    longest_fitting_len: int = 0  # vLLM's estimate when max_model_len does not fit (0: it does)
    concurrency: float | None = None  # vLLM's "Maximum concurrency" (None: tokens / length)

    @property
    def context_clipped(self) -> bool:
        """The layout serves a shorter context than was asked for."""
        return 0 < self.max_model_len < self.requested_max_model_len

    @property
    def fits(self) -> bool:
        """vLLM would start and serve at least one request of ``max_model_len``."""
        return not self.reasons

    @property
    def max_concurrency(self) -> float:
        """Full-length requests the KV cache holds at once, as vLLM logs it ("Maximum
        concurrency for N tokens per request"); KV tokens over ``max_model_len`` when unknown."""
        if self.concurrency is not None:
            return self.concurrency
        return self.kv_cache_tokens / self.max_model_len if self.max_model_len else 0.0


def evaluate_layout(
    spec: ModelSpec, s: Settings, *, tp: int, pp: int, gpu_totals: list[int], nvlink: bool = True
) -> LayoutMemory:
    """Memory on each of the ``tp × pp`` GPUs whose total sizes are ``gpu_totals``."""
    errors = layout_errors(spec, tp, pp, s)
    if errors:
        empty = tuple(_empty(t, s) for t in gpu_totals)
        return LayoutMemory(tp, pp, empty, 0, s.max_model_len, tuple(errors), (), s.max_model_len)
    cache: dict[tuple[int, int], tuple[GpuMemory, StageKv]] = {}
    for r, total in enumerate(gpu_totals):
        if (r // tp, total) not in cache:
            cache[r // tp, total] = _rank(spec, s, tp, pp, r // tp, total, nvlink)
    ranks = [cache[r // tp, t] for r, t in enumerate(gpu_totals)]
    judged = (
        _judge_encoder(s, tp, pp, ranks) if spec.encoder_only else judge_ranks(s, tp, pp, ranks)
    )
    guessed = spec.layer_plan.warnings if spec.layer_plan is not None else ()
    guessed += lora_warnings(spec) if s.lora is not None else ()
    return replace(judged, warnings=judged.warnings + guessed) if guessed else judged


def _empty(total: int, s: Settings) -> GpuMemory:
    return GpuMemory(0, 0, 0, 0, 0, 0, total, math.ceil(total * s.gpu_memory_utilization))


def _rank(
    spec: ModelSpec, s: Settings, tp: int, pp: int, stage: int, total: int, nvlink: bool
) -> tuple[GpuMemory, StageKv]:
    shard = Shard(tp, pp, stage, s.dtype_bytes, s.quant, s.moe_align)
    budget = math.ceil(total * s.gpu_memory_utilization)
    weights = rank_weights_bytes(spec, shard)
    lora = rank_lora_bytes(spec, s, tp, pp, stage)
    act = activation_bytes(spec, shard, s)
    base_other = non_torch_bytes(s, tp=tp, tp_over_nvlink=nvlink)
    other = base_other
    if s.correction is not None:
        other = max(0, other + s.correction.outside_bytes)
    graphs = cuda_graph_bytes(spec, shard, s)
    in_budget = graphs if s.profile.cuda_graphs_in_budget else 0
    # An encoder has no KV cache spec: vLLM skips the profile and allocates no cache.
    kv = 0 if spec.encoder_only else budget - weights - lora - act - other - in_budget
    used = weights + lora + act + other + graphs + max(kv, 0)
    mem = GpuMemory(weights, act, other, graphs, kv, used, total, budget, other - base_other, lora)
    kv_layout = settings_kv(spec, s, tp=tp, pp=pp, stage=stage)
    return mem, kv_layout


def rank_lora_bytes(spec: ModelSpec, s: Settings, tp: int, pp: int, stage: int) -> int:
    """The LoRA slots' bytes on a rank of `stage` (vLLM allocates them with the weights)."""
    if s.lora is None:
        return 0
    layers = pp_layer_ranges(spec.num_layers, pp)[stage]
    return lora_bytes(
        spec, s.lora, dtype_bytes=s.dtype_bytes, tp=tp, layers=layers, first=stage == 0,
        last=stage == pp - 1,
    )  # fmt: skip


def judge_ranks(
    s: Settings, tp: int, pp: int, ranks: list[tuple[GpuMemory, StageKv]]
) -> LayoutMemory:
    """vLLM's verdict on ranks whose KV memory is known (any platform): the context that fits,
    blocks as the smallest rank holds them, the logged tokens and concurrency."""
    reasons: list[str] = []
    warnings: list[str] = [s.quant.warning] if s.quant and s.quant.warning else []
    if s.correction is not None:
        warnings.append(s.correction.line())
    max_len, fitting = _fit_length(s, ranks, reasons, warnings)
    blocks = min(kv.num_blocks(mem.kv_cache_bytes) for mem, kv in ranks)
    tokens = min(_tokens(s, kv, blocks, max_len) for _, kv in ranks)
    concurrency = min(_concurrency(s, kv, blocks, max_len) for _, kv in ranks)
    reasons += _graph_overflow(s, [mem for mem, _ in ranks])
    per_gpu = tuple(_clamped(mem) for mem, _ in ranks)
    if not reasons and concurrency < 4:
        warnings.append(
            f"little KV headroom: {tokens} tokens hold {concurrency:.2f} requests "
            f"of {max_len} tokens"
        )
    return LayoutMemory(
        tp,
        pp,
        per_gpu,
        tokens,
        max_len,
        tuple(reasons),
        tuple(warnings),
        s.max_model_len,
        fitting,
        concurrency,
    )


def _judge_encoder(
    s: Settings, tp: int, pp: int, ranks: list[tuple[GpuMemory, StageKv]]
) -> LayoutMemory:
    """An encoder-only pooling model: weights and one batch's activations, no KV cache. A step
    takes whole prompts (no chunked prefill), so ``max_num_batched_tokens`` bounds how many
    full-length requests run at once, and requests beyond it queue."""
    reasons = [encoder_overflow(mem) for mem, _ in ranks if mem.total_bytes > mem.budget_bytes]
    if s.max_num_batched_tokens < s.max_model_len:
        reasons.append(
            f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len "
            f"({s.max_model_len}): a pooling model without chunked prefill takes each prompt "
            "whole in one step"
        )
    at_once = min(s.max_num_seqs, s.max_num_batched_tokens // max(s.max_model_len, 1))
    warnings = [s.quant.warning] if s.quant and s.quant.warning else []
    per_gpu = tuple(mem for mem, _ in ranks)
    return LayoutMemory(
        tp, pp, per_gpu, 0, s.max_model_len, tuple(reasons[:1]), tuple(warnings),
        s.max_model_len, 0, float(at_once),
    )  # fmt: skip


def encoder_overflow(mem: GpuMemory) -> str:
    """Weights and activations above the share: vLLM runs out of memory loading or warming up."""
    return (
        f"weights and activations need {gib(mem.total_bytes):.2f} GiB, more than the "
        f"{gib(mem.budget_bytes):.2f} GiB share of this {gib(mem.gpu_total_bytes):.2f} GiB GPU "
        "(gpu_memory_utilization × total)"
    )


def _clamped(mem: GpuMemory) -> GpuMemory:
    if mem.kv_cache_bytes >= 0:
        return mem
    return replace(mem, kv_cache_bytes=0)


def _fit_length(
    s: Settings, ranks: list[tuple[GpuMemory, StageKv]], reasons: list[str], warnings: list[str]
) -> tuple[int, int]:
    """The max_model_len vLLM ends up with, appending its errors when none fits; and its
    estimate of the longest that would (0 when the length asked for fits)."""
    worst = min(ranks, key=lambda r: r[0].kv_cache_bytes)
    available = worst[0].kv_cache_bytes
    if available <= 0:
        text = no_kv_memory(s.profile.version)
        reasons.append(f"{text} (KV cache memory would be {gib(available):.2f} GiB)")
        return s.max_model_len, 0
    fitting = min(
        kv.longest_fitting_len(kv.check_bytes(m.kv_cache_bytes), s.max_num_batched_tokens)
        for m, kv in ranks
    )
    if fitting >= s.max_model_len:
        return s.max_model_len, 0
    needed = max(kv.request_bytes(s.max_model_len, s.max_num_batched_tokens) for _, kv in ranks)
    if s.max_model_len_given or fitting < s.block_size:
        check = worst[1].check_bytes(available)
        reasons.append(too_long(s.profile.version, s.max_model_len, needed, check, fitting))
        return s.max_model_len, fitting
    clipped = fitting // s.block_size * s.block_size
    warnings.append(f"context clipped to {clipped} tokens (the model allows {s.max_model_len})")
    return clipped, 0


# The wording of kv_cache_utils.py (kv_cache_planning.py from 0.29) by version: "models's"
# until 0.21, a docs link from 0.13, the CPU-backend remark from 0.22; the estimate only when
# positive at every version read (0.10.1-0.33).
TYPO_UNTIL = (0, 22, 0)
DOCS_LINK_FROM = (0, 13, 0)
CPU_REMARK_FROM = (0, 22, 0)
DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def no_kv_memory(version: tuple[int, int, int]) -> str:
    """check_enough_kv_cache_memory when nothing is left for the cache."""
    text = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    if version >= CPU_REMARK_FROM:
        text += "when initializing the engine (this flag also controls CPU memory reservation "
        return text + f"on the CPU backend, despite its name). {DOCS}"
    text += "when initializing the engine."
    return f"{text} {DOCS}" if version >= DOCS_LINK_FROM else text


def too_long(
    version: tuple[int, int, int], length: int, needed: int, available: int, fitting: int
) -> str:
    """_check_enough_kv_cache_memory's refusal of one request of ``length`` tokens."""
    owner = "models's" if version < TYPO_UNTIL else "model's"
    estimate = (
        f"Based on the available memory, the estimated maximum model length is {fitting}. "
        if fitting > 0
        else ""
    )
    flag = "`gpu_memory_utilization`"
    if version >= CPU_REMARK_FROM:
        flag += " (which also controls CPU memory on the CPU backend)"
    text = (
        f"To serve at least one request with the {owner} max seq len ({length}), "
        f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({available / GIB:.2f} GiB). {estimate}Try increasing {flag} or "
        "decreasing `max_model_len` when initializing the engine."
    )
    return f"{text} {DOCS}" if version >= DOCS_LINK_FROM else text


def _tokens(s: Settings, kv: StageKv, blocks: int, max_len: int) -> int:
    """vLLM's logged figure: from 0.21 int(concurrency × max_model_len), which for a context
    that is not a whole number of blocks (or with windows, states, DCP) is not blocks × size."""
    if not s.profile.hybrid_tokens_from_concurrency:
        return kv.tokens(blocks)
    pages = kv.request_pages(max_len, s.max_num_batched_tokens)
    return int(blocks / pages * max_len) if pages else 0


def _concurrency(s: Settings, kv: StageKv, blocks: int, max_len: int) -> float:
    """get_max_concurrency_for_kv_cache_config (v1/core/kv_cache_utils.py, every version read):
    blocks over the blocks one request of ``max_len`` claims in all groups. Before 0.21 the
    logged token count (blocks per group × block size) is not this times the length: for
    Qwen3.5-27B, 4 groups of 16 layers, it counts every Gated DeltaNet group as attention."""
    pages = kv.request_pages(max_len, s.max_num_batched_tokens)
    return blocks / pages if pages else 0.0


def _graph_overflow(s: Settings, mems: list[GpuMemory]) -> list[str]:
    if s.profile.cuda_graphs_in_budget:
        return []
    over = [m for m in mems if m.budget_bytes + m.cuda_graph_bytes > m.gpu_total_bytes]
    if not over:
        return []
    m = over[0]
    return [
        f"CUDA out of memory capturing CUDA graphs: {gib(m.cuda_graph_bytes):.2f} GiB of graphs "
        f"do not fit above the {gib(m.budget_bytes):.2f} GiB budget on a "
        f"{gib(m.gpu_total_bytes):.2f} GiB GPU; lower gpu_memory_utilization"
    ]
