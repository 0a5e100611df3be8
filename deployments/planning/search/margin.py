"""How sure a fit is: the planner's error band, and layouts that fit only inside it ("tight").

The band comes from ``bench/planner_accuracy.py`` on ``../shared/planner-cases``: over the
nine start-ups there (0.17.0 and 0.19.0 on 79.19 GiB H100s) the predicted KV cache is off by
-0.038 to +0.055 GiB, at most 0.074 % of the memory budget. Nine start-ups of one GPU kind
say little about run-to-run and driver differences in the memory outside PyTorch (the CUDA
context, NCCL buffers: hundreds of MiB), so the band is about seven times that worst error,
0.5 % of the budget, and never under 256 MiB.

Versions keep their own rules where their profiling differs. Before 0.20 vLLM captures the
CUDA graphs after sizing the KV cache, outside ``gpu_memory_utilization``: the graph pool is
what may run the GPU out of memory once the cache is allocated (the logs show 0.5-1.9 GiB of
graphs where the planner predicts 0.3-0.7), so the memory left beyond the budget must hold
the band plus the predicted pool again. From 0.20 vLLM takes its own estimate of the pool
from the KV budget; no case checks that estimate, so half the predicted pool widens the
KV band instead.

The sampler is warmed up once more after the KV cache and the CUDA graphs are allocated
(gpu_worker.compile_or_warm_up_model: "called after capture_model on purpose"), on
min(max_num_seqs, max_num_batched_tokens) dummy requests with top-k and top-p set, so it takes
the sort path of apply_top_k_top_p_pytorch (v1/sample/ops/topk_topp_sampler.py). gpt-oss-20b
(201,088-token vocabulary, 1,024 requests) at gpu_memory_utilization 0.95 on one H100 ran out
of memory there with vLLM 0.19 (vllm-memory.md §6) although the profile had fit. No log gives
that peak, and the public start-ups at 0.95 passed the same warm-up (gemma-2-9b with a 256,000
vocabulary among them), so what runs out is not the sampler alone; the rule is therefore a
warning, not part of the prediction, and only for MXFP4 checkpoints, where it was seen: a plan
is tight when what the GPU keeps beyond the budget and graphs, less the band, cannot hold the
sort path's working set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deployments.planning.fleet.inventory import Gpu
from deployments.planning.memory.correction import Correction
from deployments.planning.memory.layout import GpuMemory, LayoutMemory
from deployments.planning.memory.settings import Settings, settings_kv
from deployments.planning.memory.versions import VersionProfile
from deployments.planning.memory.weights import Shard, rank_weights_bytes
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import MIB, gib

FLOOR_BYTES = 256 * MIB
BUDGET_FRACTION = 0.005
GRAPHS_IN_BUDGET_SHARE = 0.5  # >= 0.20: vLLM's own graph estimate comes out of the KV cache
GRAPHS_OUTSIDE_SHARE = 1.0  # < 0.20: the pool above the budget may be twice the prediction
# per logit beside the model-dtype logits: fp32 copy 4, sorted values 4, int64 sort indices 8,
# sorted probabilities 4, top-k mask 1 (apply_top_k_top_p_pytorch, vLLM 0.33)
SAMPLER_SORT_BYTES_PER_LOGIT = 21


@dataclass(frozen=True, slots=True)
class Band:
    """± bytes on one GPU's predicted KV cache and on what it leaves free beyond the budget."""

    kv_bytes: int
    outside_bytes: int


def band(profile: VersionProfile, mem: GpuMemory, learned: Correction | None = None) -> Band:
    """The error band of one rank's prediction, by the rules of the target vLLM version.

    With a correction learned from this GPU model's starts under this version, the spread
    those starts showed replaces the a-priori share of the budget (never under the floor)."""
    base = max(FLOOR_BYTES, round(BUDGET_FRACTION * mem.budget_bytes))
    if learned is not None:
        base = max(FLOOR_BYTES, learned.spread_bytes)
    if profile.cuda_graphs_in_budget:
        return Band(base + round(GRAPHS_IN_BUDGET_SHARE * mem.cuda_graph_bytes), base)
    return Band(base, base + round(GRAPHS_OUTSIDE_SHARE * mem.cuda_graph_bytes))


def layout_tight(
    spec: ModelSpec, s: Settings, layout: LayoutMemory, *, requests: int
) -> tuple[str, ...]:
    """Why a fitting layout is within the band of a limit; empty when it has room to spare.

    ``requests``: the full-length requests it must hold at once (vLLM itself insists on one).
    """
    if not layout.fits:
        return ()
    out = (
        _kv(spec, s, layout, requests),
        _outside(s, layout.per_gpu),
        _sampler_warmup(spec, s, layout),
        _mxfp4_unmeasured_load(spec, s, layout, requests),
    )
    return tuple(r for r in out if r)


def _kv(spec: ModelSpec, s: Settings, layout: LayoutMemory, requests: int) -> str:
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    length = layout.max_model_len
    worst: tuple[int, int, int, int] | None = None  # (room, need, stage, rank)
    for stage in range(pp):
        rank = stage * tp
        mem = layout.per_gpu[rank]
        kv = settings_kv(spec, s, tp=tp, pp=pp, stage=stage)
        need = kv.request_bytes(length, s.max_num_batched_tokens) * requests
        room = mem.kv_cache_bytes - need - band(s.profile, mem, s.correction).kv_bytes
        if worst is None or room < worst[0]:
            worst = (room, need, stage, rank)
    if worst is None or worst[0] >= 0 or layout.per_gpu[worst[3]].kv_cache_bytes < worst[1]:
        return ""
    _, need, stage, rank = worst
    mem = layout.per_gpu[rank]
    what = (
        f"one {length:,}-token request"
        if requests == 1
        else f"{requests} requests of {length:,} tokens"
    )
    where = f" on pipeline stage {stage + 1} of {pp}" if pp > 1 else ""
    text = (
        f"needs {gib(need):.2f} GiB of KV cache for {what}{where}; predicted "
        f"{gib(mem.kv_cache_bytes):.2f} ± {gib(band(s.profile, mem, s.correction).kv_bytes):.2f} GiB"
    )
    shorter = comfortable_length(spec, s, layout, requests=requests)
    if 0 < shorter < length:
        text += f"; a context of {shorter:,} tokens would leave that margin"
    return text


def _outside(s: Settings, per_gpu: tuple[GpuMemory, ...]) -> str:
    """What the GPU keeps beyond the budget (and, before 0.20, beyond the graph pool)."""
    mem = min(per_gpu, key=lambda m: m.free_bytes - band(s.profile, m, s.correction).outside_bytes)
    b = band(s.profile, mem, s.correction)
    if mem.free_bytes >= b.outside_bytes:
        return ""
    gmu = s.gpu_memory_utilization
    if s.profile.cuda_graphs_in_budget:
        return (
            f"leaves {gib(mem.free_bytes):.2f} GiB of a {gib(mem.gpu_total_bytes):.2f} GiB GPU "
            f"outside gpu_memory_utilization {gmu:g}; the planner's margin is "
            f"{gib(b.outside_bytes):.2f} GiB"
        )
    return (
        f"leaves {gib(mem.free_bytes):.2f} GiB of a {gib(mem.gpu_total_bytes):.2f} GiB GPU free "
        f"after the {gib(mem.budget_bytes):.2f} GiB budget and {gib(mem.cuda_graph_bytes):.2f} "
        f"GiB of CUDA graphs, which vLLM {s.profile.label} captures outside "
        f"gpu_memory_utilization; the planner's margin is {gib(b.outside_bytes):.2f} GiB"
    )


def sampler_warmup_bytes(spec: ModelSpec, s: Settings) -> int:
    """The sampler warm-up's working set on the last pipeline stage (see the module note)."""
    reqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    return reqs * spec.vocab_size * (s.dtype_bytes + SAMPLER_SORT_BYTES_PER_LOGIT)


def _sampler_warmup(spec: ModelSpec, s: Settings, layout: LayoutMemory) -> str:
    if s.quant is None or s.quant.method != "mxfp4":
        return ""
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    last = layout.per_gpu[(pp - 1) * tp : pp * tp]
    if not last:
        return ""
    mem = min(last, key=lambda m: m.free_bytes - band(s.profile, m, s.correction).outside_bytes)
    room = mem.free_bytes - band(s.profile, mem, s.correction).outside_bytes
    need = sampler_warmup_bytes(spec, s)
    if room >= need:
        return ""
    reqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    return (
        f"vLLM warms the sampler up on {reqs:,} dummy requests after allocating the KV cache: "
        f"about {gib(need):.2f} GiB ({reqs:,} × {spec.vocab_size:,} logits, top-k/top-p sort) "
        f"where {gib(mem.free_bytes):.2f} GiB are left beyond the budget and CUDA graphs, less "
        f"the planner's margin of {gib(band(s.profile, mem, s.correction).outside_bytes):.2f} GiB; it may run "
        "out of memory there (lower max_num_seqs or gpu_memory_utilization)"
    )


# MXFP4 loads measured on Hopper were ~8 % above the checkpoint (gpt-oss-20b: 13.7 GiB for
# 12.82 GiB, issue 23), as the (hidden 256, intermediate 128) padding gives, with versions that
# already ran the OAI Triton kernel there: triton_kernels is vendored from 0.12 and picked on
# SM90 when torch >= 2.8 (quantization/mxfp4.py get_mxfp4_backend; 0.19+
# fused_moe/oracle/mxfp4.py, Triton before Marlin). The Triton Hopper layout read in the wheels
# (third_party/triton_kernels/tensor_details/layout_details/hopper_value.py) pads to 64 only,
# which is how 0.33 is planned (quant.moe_alignment); no 0.33 start-up confirms that saving.
MEASURED_HOPPER_MXFP4_ALIGN = (256, 128)


def _mxfp4_unmeasured_load(
    spec: ModelSpec, s: Settings, layout: LayoutMemory, requests: int
) -> str:
    """Tight when the layout fits only thanks to that unconfirmed saving."""
    if s.quant is None or s.quant.method != "mxfp4" or s.moe_align[0] != 1:
        return ""
    tp, pp, length = (
        layout.tensor_parallel_size,
        layout.pipeline_parallel_size,
        layout.max_model_len,
    )
    for stage in range(pp):
        mem = layout.per_gpu[stage * tp]
        planned = Shard(tp, pp, stage, s.dtype_bytes, s.quant, s.moe_align)
        measured = Shard(tp, pp, stage, s.dtype_bytes, s.quant, MEASURED_HOPPER_MXFP4_ALIGN)
        extra = rank_weights_bytes(spec, measured) - rank_weights_bytes(spec, planned)
        kv = settings_kv(spec, s, tp=tp, pp=pp, stage=stage)
        need = kv.request_bytes(length, s.max_num_batched_tokens) * requests
        left = kv.check_bytes(mem.kv_cache_bytes - extra)
        if left < need:
            what = (
                f"one {length:,}-token request needs"
                if requests == 1
                else f"{requests} requests of {length:,} tokens need"
            )
            return (
                f"fits only if vLLM {s.profile.label} loads the MXFP4 experts "
                f"{gib(extra):.2f} GiB smaller than start-ups of earlier versions on Hopper did "
                f"(~8 % above the checkpoint, also on the Triton kernel): then "
                f"{gib(max(left, 0)):.2f} GiB of KV cache would be left for "
                f"the {gib(need):.2f} GiB that {what}"
            )
    return ""


def startup_tight(s: Settings, layout: LayoutMemory, gpus: Sequence[tuple[str, Gpu]]) -> str:
    """vLLM refuses to start unless a device has gmu × total free: GPUs partly in use whose
    free memory is within the band of that ("" when none is)."""
    worst: tuple[int, str, Gpu, GpuMemory] | None = None
    for mem, (host, gpu) in zip(layout.per_gpu, gpus, strict=False):
        if gpu.free_bytes >= gpu.total_bytes:
            continue  # nothing else on it: the budget check above covers it
        room = gpu.free_bytes - mem.budget_bytes - band(s.profile, mem, s.correction).outside_bytes
        if room < 0 and gpu.free_bytes >= mem.budget_bytes and (worst is None or room < worst[0]):
            worst = (room, host, gpu, mem)
    if worst is None:
        return ""
    _, host, gpu, mem = worst
    return (
        f"vLLM checks at start that {gib(mem.budget_bytes):.2f} GiB "
        f"({s.gpu_memory_utilization:g} × {gib(gpu.total_bytes):.2f} GiB) are free on GPU "
        f"{host}:{gpu.index}; it has {gib(gpu.free_bytes):.2f} GiB free, within the planner's "
        f"margin of {gib(band(s.profile, mem, s.correction).outside_bytes):.2f} GiB"
    )


def comfortable_length(spec: ModelSpec, s: Settings, layout: LayoutMemory, *, requests: int) -> int:
    """The longest context (whole blocks) whose KV cache leaves the band free on every stage."""
    tp, pp = layout.tensor_parallel_size, layout.pipeline_parallel_size
    best = layout.max_model_len
    for stage in range(pp):
        mem = layout.per_gpu[stage * tp]
        kv = settings_kv(spec, s, tp=tp, pp=pp, stage=stage)
        room = (mem.kv_cache_bytes - band(s.profile, mem, s.correction).kv_bytes) // max(
            requests, 1
        )
        best = min(best, kv.longest_fitting_len(room, s.max_num_batched_tokens))
    return best // s.block_size * s.block_size
