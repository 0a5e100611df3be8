"""Torch memory of vLLM's profile run, non-torch growth and the CUDA-graph pool, per rank.

The profile run pushes ``max_num_batched_tokens`` through the model, then warms the sampler
up on ``max_num_seqs`` dummy requests. The peak it records is the larger of the two phases
plus what stays allocated through both (the run's hidden states, fused-MoE and MLA
workspaces)."""

from __future__ import annotations

from deployments.planning.model.spec import ModelSpec, MoeSpec
from deployments.planning.units import MIB

from .settings import Settings
from .weights import Shard, kv_heads_per_rank, pp_layer_ranges

# NCCL channel/NVLS buffers plus custom all-reduce IPC buffers, once TP > 1 (H100 NVLink logs)
TP_COMM_NVLINK_BYTES = 1874 * MIB
TP_COMM_PCIE_BYTES = 600 * MIB
GRAPH_BYTES_PER_LAYER_PER_SIZE = 320 * 1024


def activation_bytes(spec: ModelSpec, shard: Shard, s: Settings) -> int:
    """Peak torch memory above the weights during the profile run on this rank."""
    # The pooling runner warms its pooler up instead of a sampler: no logits over the vocab.
    sampler = _sampler_bytes(spec, s) if shard.is_last and spec.pooling is None else 0
    return _persistent_bytes(spec, shard, s) + max(_forward_bytes(spec, shard, s), sampler)


def non_torch_bytes(s: Settings, *, tp: int, tp_over_nvlink: bool) -> int:
    """Memory outside PyTorch's allocator that appears while profiling."""
    comm = 0
    if tp > 1:
        comm = TP_COMM_NVLINK_BYTES if tp_over_nvlink else TP_COMM_PCIE_BYTES
    return s.profile.base_non_torch_bytes + comm


def cuda_graph_bytes(spec: ModelSpec, shard: Shard, s: Settings) -> int:
    """Graph pool: per-graph bookkeeping for every capture size and layer, plus the largest
    captured batch's activations."""
    if s.enforce_eager:
        return 0
    sizes = capture_sizes(s.max_num_seqs)
    layers = len(pp_layer_ranges(spec.num_layers, shard.pp)[shard.pp_rank])
    largest = _forward_bytes(spec, shard, s, tokens=sizes[-1])
    return len(sizes) * layers * GRAPH_BYTES_PER_LAYER_PER_SIZE + largest


def capture_sizes(max_num_seqs: int) -> list[int]:
    """vLLM's default cudagraph capture sizes up to ``min(2 × max_num_seqs, 512)``."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    return [n for n in sizes if n <= top] or [1]


def _sampler_bytes(spec: ModelSpec, s: Settings) -> int:
    # logits in model dtype, then fp32 logits, probabilities and renormalised probabilities
    reqs = min(s.max_num_seqs, s.max_num_batched_tokens)
    per_logit = s.dtype_bytes + s.profile.sampler_extra_bytes_per_logit
    return reqs * spec.vocab_size * per_logit


def _persistent_bytes(spec: ModelSpec, shard: Shard, s: Settings) -> int:
    tokens, b = s.max_num_batched_tokens, s.dtype_bytes
    total = 2 * tokens * spec.hidden_size * b
    if spec.moe is not None:
        total += _moe_workspace_bytes(spec.moe, spec, shard, s, tokens)
    total += _encoder_cache_bytes(spec, s)
    if spec.mla is not None:
        chunk = min(max(8 * s.max_model_len, 4 * s.max_num_seqs * s.block_size), 128 * 1024)
        total += max(chunk, 2048) * spec.mla.latent_size * b
    return total


def _encoder_cache_bytes(spec: ModelSpec, s: Settings) -> int:
    """Multimodal models: the profile run first encodes as many largest images as the encoder
    budget (max(max_num_batched_tokens, one image's tokens)) holds and keeps their embeddings
    in the encoder cache through the decoder's dummy run (gpu_model_runner.profile_run,
    encoder_cache_manager.compute_mm_encoder_budget)."""
    tokens, width = spec.vision_embeds
    if not tokens:
        return 0
    items = max(1, max(s.max_num_batched_tokens, tokens) // tokens)
    return items * tokens * width * s.dtype_bytes


def _moe_workspace_bytes(
    moe: MoeSpec, spec: ModelSpec, shard: Shard, s: Settings, tokens: int
) -> int:
    rows = tokens * moe.experts_per_token
    n = moe.expert_intermediate_size // shard.tp
    up = 2 * n if spec.gated_mlp else n
    return rows * (max(up, spec.hidden_size) + n) * s.dtype_bytes


def _forward_bytes(spec: ModelSpec, shard: Shard, s: Settings, *, tokens: int = 0) -> int:
    t, b, h = tokens or s.max_num_batched_tokens, s.dtype_bytes, spec.hidden_size
    inter = spec.intermediate_size // shard.tp
    if spec.moe is not None and spec.moe.shared_intermediate_size:
        inter = max(inter, spec.moe.shared_intermediate_size // shard.tp)
    up = 2 * inter if spec.gated_mlp else inter
    mlp = t * (up + inter) * b
    heads = spec.num_heads // shard.tp
    attn = t * (2 * heads + 2 * kv_heads_per_rank(spec, shard.tp)) * spec.head_dim * b
    return max(mlp, attn) + 2 * t * h * b
