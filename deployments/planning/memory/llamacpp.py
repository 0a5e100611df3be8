"""What llama-server allocates per device for a GGUF model: weights, KV cache, compute buffer.

Rules read from llama.cpp b11434 and checked on CPU against its own ``-lv 4`` lines
(bench/gguf_accuracy.py; tests/deployments/planning/fixtures/llamacpp_cases.json):

- Layer placement (src/llama-model.cpp, load_tensors): the L blocks and the output layer are
  L+1 "layers"; the last ``-ngl`` of them go to GPUs, layer ``il`` to the device
  ``upper_bound(cumulative -ts fractions, (il - first) / ngl)`` in float32; ``token_embd``
  always stays on the CPU. So the output layer lands on the last GPU, not on ``-mg``.
- KV (src/llama-kv-cache.cpp): per layer ``row_size(type_k, dk·Hkv) + row_size(type_v,
  dv·Hkv)`` bytes per cell, on the layer's device; cells = ``-c`` padded to 256 (unified).
- Row split (``-sm row``, deprecated in b11434): each layer's device still follows ``-ts`` and
  its matrices are cut by rows over the GPUs by the same shares (src/llama-model.cpp
  make_gpu_buft_list), so the per-GPU sums here are those of layer split; read from the
  source, not checked on GPUs.
- Compute (sched_reserve): llama.cpp measures its worst-case graph for one ``-ub`` batch; the
  estimate here is linear in ``-ub`` with the KQ matrix and mask added when flash attention is
  off, fitted on CPU runs. On GPUs it is not verified: the GPU margin covers it and the CUDA
  context.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from deployments.planning.errors import PlanningError
from deployments.planning.model.gguf import KV_CACHE_TYPES, GgufSpec, kv_row_bytes
from deployments.planning.units import cdiv

CONTEXT_PAD = 256  # llama_context: n_ctx is padded to 256 cells
SPLIT_MODES = ("layer", "row", "none")
# Compute buffer: bytes per -ub token, fitted on 15 CPU start-ups of b11434 (bench/gguf_accuracy.py;
# within -3.5 %/+4.3 % of the logged size on each, -2.5 %/-0.9 % on the 4 held out). The FFN's
# intermediates (gate, up, their product, in f32) dominate: ggml's allocator reuses the
# hidden-width tensors, so a per-embedding term fits negative and is left out. The per-cell term
# is the f16 KQ mask (n_kv × ub × 2 B); without flash attention the KQ scores and their f32 mask
# add about (3.5 H + 2.4) B per cell and token, ggml's allocator reusing part of them.
COMPUTE_PER_FFN = 19.09
COMPUTE_PER_CELL = 1.99
COMPUTE_PER_CELL_HEAD_NO_FA = 3.50
COMPUTE_PER_CELL_NO_FA = 2.43


@dataclass(frozen=True, slots=True)
class LlamaCppSettings:
    """The flags that size memory; each becomes an explicit llama-server flag."""

    context_tokens: int = 0  # -c; 0 is llama-server's default: the model's training context
    slots: int = 1  # -np
    cache_type_k: str = "f16"  # -ctk
    cache_type_v: str = "f16"  # -ctv
    flash_attn: bool = True  # -fa on|off
    ubatch: int = 512  # -ub
    split_mode: str = "layer"  # -sm

    def validate(self) -> None:
        if self.context_tokens < 0 or self.slots < 1 or self.ubatch < 1:
            raise PlanningError("context must be ≥ 0 tokens, slots and -ub at least 1")
        if self.split_mode not in SPLIT_MODES:
            raise PlanningError(f"split mode {self.split_mode!r}: one of {', '.join(SPLIT_MODES)}")
        for kind in (self.cache_type_k, self.cache_type_v):
            if kind not in KV_CACHE_TYPES:
                raise PlanningError(f"KV cache type {kind!r}: one of {', '.join(KV_CACHE_TYPES)}")


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """One device's share. ``device`` is "CPU" or the GPU's position in the plan (0, 1, …)."""

    device: str
    layers: tuple[int, ...]  # block indices it holds; the output layer is index block_count
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_buffer_bytes: int = 0  # the host's logits buffer: n_slots × vocab × 4 B

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.output_buffer_bytes


def context_cells(spec: GgufSpec, settings: LlamaCppSettings) -> int:
    """KV cells llama-server allocates: -c (or the training context) padded to 256."""
    asked = settings.context_tokens or spec.context_length
    if asked <= 0:
        raise PlanningError(f"{spec.name}: give a context size; the header states none")
    return cdiv(asked, CONTEXT_PAD) * CONTEXT_PAD


def cache_type_errors(spec: GgufSpec, settings: LlamaCppSettings) -> tuple[str, ...]:
    """Why llama-server would refuse these cache types, in its own terms."""
    errors = []
    for which, kind, dim in (
        ("K", settings.cache_type_k, spec.key_length),
        ("V", settings.cache_type_v, spec.value_length),
    ):
        block = KV_CACHE_TYPES[kind][0]
        if dim % block:
            errors.append(
                f"{which} cache type {kind} with block size {block} does not divide the head "
                f"dimension {dim} (llama_init_from_model refuses it): use f16"
            )
    if KV_CACHE_TYPES[settings.cache_type_v][0] > 1 and not settings.flash_attn:
        errors.append("a quantized V cache needs flash attention (-fa on)")
    return tuple(errors)


def kv_bytes_per_cell(spec: GgufSpec, settings: LlamaCppSettings, layers: Iterable[int]) -> int:
    """KV bytes one cell (token) takes in the given blocks."""
    return sum(
        kv_row_bytes(settings.cache_type_k, spec.kv_width(layer, value=False))
        + kv_row_bytes(settings.cache_type_v, spec.kv_width(layer, value=True))
        for layer in layers
    )


def _f32(x: float) -> float:
    return float(struct.unpack("f", struct.pack("f", x))[0])


def layer_devices(
    block_count: int, gpu_layers: int, splits: Sequence[float]
) -> tuple[int | None, ...]:
    """The device of each of the L+1 layers (None: the CPU), exactly as load_tensors assigns it."""
    if not splits or sum(splits) <= 0:
        return (None,) * (block_count + 1)
    cumulative, total = [], 0.0
    for share in splits:
        total = _f32(total + share)
        cumulative.append(total)
    points = [_f32(c / total) for c in cumulative]
    first = max(block_count + 1 - gpu_layers, 0)
    active = min(gpu_layers, block_count + 1)
    owners: list[int | None] = []
    for layer in range(block_count + 1):
        if layer < first or layer - first >= active:
            owners.append(None)
            continue
        x = _f32((layer - first) / active)
        owners.append(next((i for i, p in enumerate(points) if p > x), len(points) - 1))
    return tuple(owners)


def compute_bytes(spec: GgufSpec, settings: LlamaCppSettings, cells: int) -> int:
    """The compute buffer one device reserves for a -ub batch (an estimate; see the module)."""
    ub = min(settings.ubatch, cells)
    per_token = COMPUTE_PER_FFN * spec.feed_forward_length + COMPUTE_PER_CELL * cells
    if not settings.flash_attn:
        per_cell = COMPUTE_PER_CELL_HEAD_NO_FA * spec.head_count + COMPUTE_PER_CELL_NO_FA
        per_token += per_cell * cells
    return int(ub * per_token)


def device_memory(
    spec: GgufSpec,
    settings: LlamaCppSettings,
    *,
    gpu_layers: int,
    splits: Sequence[float],
) -> tuple[DeviceMemory, ...]:
    """The CPU's share first, then one entry per GPU of ``splits`` (layer split mode)."""
    settings.validate()
    cells = context_cells(spec, settings)
    owners = layer_devices(spec.block_count, gpu_layers, splits)
    devices: list[str] = ["CPU", *(str(i) for i in range(len(splits)))]
    out = []
    for index, name in enumerate(devices):
        gpu = None if index == 0 else index - 1
        held = tuple(il for il, owner in enumerate(owners) if owner == gpu)
        blocks = [il for il in held if il < spec.block_count]
        weights = sum(spec.layer_bytes[il] for il in blocks)
        weights += spec.output_bytes if spec.block_count in held else 0
        if gpu is None:
            # A tied output on the CPU is token_embd itself (the same mapped bytes); on a GPU
            # it is a copy (TENSOR_DUPLICATED in llama-model-loader.cpp).
            tied_here = spec.duplicated_bytes if spec.block_count in held else 0
            weights += spec.input_bytes - tied_here
        if gpu is not None and not held:
            out.append(DeviceMemory(name, (), 0, 0, 0))
            continue
        out.append(
            DeviceMemory(
                device=name,
                layers=held,
                weights_bytes=weights,
                kv_bytes=cells * kv_bytes_per_cell(spec, settings, blocks),
                compute_bytes=compute_bytes(spec, settings, cells),
                output_buffer_bytes=settings.slots * spec.vocab_size * 4 if gpu is None else 0,
            )
        )
    return tuple(out)
