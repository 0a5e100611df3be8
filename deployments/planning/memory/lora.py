"""LoRA memory: the adapter slots vLLM allocates at start when LoRA is enabled.

vLLM 0.32/0.33 (lora/model_manager.py ``_create_lora_modules``) wraps every supported module of
the model, whatever adapters come later: each linear layer (LinearBase), the MoE experts, the
input embedding and the LM head (the model's ``embedding_modules``). Each wrapper allocates,
for ``max_loras`` slots, A and B stacks padded to ``max_lora_rank`` in the LoRA dtype (the
model's dtype by default), on the device, while the model loads: so they count with the
weights and come out of the KV cache's share. Per slot (not fully sharded, no expert
parallelism; lora/layers/*.py ``create_lora_weights``):

- column-parallel (qkv, gate_up, up): A ``r × in`` per slice (q, k, v; gate, up), B
  ``out_per_rank × r`` per slice;
- row-parallel (o_proj, down_proj): A ``r × in_per_rank``, B ``out × r``;
- the embedding: A ``vocab × r``, B ``hidden × r`` (the whole vocabulary on every rank);
- the LM head (LogitsProcessorWithLoRA): A ``r × hidden``, B ``vocab × r``;
- MoE experts (FusedMoEWithLoRA): per expert, gate and up A ``r × hidden`` and B
  ``intermediate_per_rank × r``, down A ``r × intermediate_per_rank`` and B ``hidden × r``; the
  router (a ReplicatedLinear) A ``r × hidden``, B ``experts × r``.

Measured against the tensors vLLM 0.32 (CPU build) allocated for the demo model (2 layers,
hidden 128, 2 heads of 64, 1 KV head, MLP 256, vocab 384, rank 8, 2 slots, bfloat16): 163,840
bytes, exactly (docs/performance.md). Adapters cached beyond the slots (``max_cpu_loras``) live
in host memory, not on the GPU. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.errors import PlanningError
from deployments.planning.model.layers import STATE_KINDS
from deployments.planning.model.spec import ModelSpec, MoeSpec

# vLLM's LoRAConfig.max_lora_rank Literal (config/lora.py, 0.32)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORAS = 1  # LoRAConfig.max_loras
DEFAULT_MAX_LORA_RANK = 16  # LoRAConfig.max_lora_rank


@dataclass(frozen=True, slots=True)
class LoraConfig:
    """``--max-loras`` (adapters in one batch: the slots), ``--max-lora-rank`` and
    ``--max-cpu-loras`` (adapters kept loaded; None: ``max_loras``, vLLM's default)."""

    max_loras: int = DEFAULT_MAX_LORAS
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK
    max_cpu_loras: int | None = None

    @property
    def cached(self) -> int:
        """Adapters vLLM keeps loaded before it evicts the least recently used."""
        return self.max_cpu_loras or self.max_loras

    def validate(self) -> None:
        """vLLM's own checks (LoRAConfig), with its words where it has them."""
        if isinstance(self.max_loras, bool) or self.max_loras < 1:
            raise PlanningError(f"max_loras must be at least 1, got {self.max_loras}")
        if self.max_lora_rank not in LORA_RANKS:
            ranks = ", ".join(str(r) for r in LORA_RANKS)
            raise PlanningError(f"max_lora_rank must be one of {ranks}, got {self.max_lora_rank}")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise PlanningError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras})."
            )


def lora_bytes(
    spec: ModelSpec, lora: LoraConfig, *, dtype_bytes: int, tp: int, layers: range, first: bool,
    last: bool,
) -> int:  # fmt: skip
    """The LoRA stacks one rank allocates: its stage's ``layers``, the embedding on the
    ``first`` stage and the LM head on the ``last``."""
    r = lora.max_lora_rank
    per_slot = sum(_layer(spec, i, r, tp) for i in layers)
    if first:
        per_slot += spec.vocab_size * r + spec.hidden_size * r
    if last and spec.pooling is None:
        per_slot += r * spec.hidden_size + spec.vocab_size * r
    return per_slot * lora.max_loras * dtype_bytes


def _layer(spec: ModelSpec, layer: int, r: int, tp: int) -> int:
    moe = spec.moe if spec.is_moe(layer) else None
    return _attention(spec, r, tp) + (_moe(spec, moe, r, tp) if moe else _mlp(spec, r, tp))


def _attention(spec: ModelSpec, r: int, tp: int) -> int:
    h, d = spec.hidden_size, spec.head_dim
    q_out = spec.num_heads * d // tp
    kv_out = max(1, spec.num_kv_heads // tp) * d
    qkv = 3 * r * h + (q_out + 2 * kv_out) * r
    o_proj = r * q_out + h * r
    return qkv + o_proj


def _mlp(spec: ModelSpec, r: int, tp: int, inter: int | None = None) -> int:
    h = spec.hidden_size
    per_rank = (spec.intermediate_size if inter is None else inter) // tp
    slices = 2 if spec.gated_mlp else 1
    up = slices * (r * h + per_rank * r)
    down = r * per_rank + h * r
    return up + down


def _moe(spec: ModelSpec, moe: MoeSpec, r: int, tp: int) -> int:
    h, per_rank = spec.hidden_size, moe.expert_intermediate_size // tp
    slices = 2 if spec.gated_mlp else 1
    expert = slices * (r * h + per_rank * r) + r * per_rank + h * r
    router = r * h + moe.num_experts * r
    shared = _mlp(spec, r, tp, moe.shared_intermediate_size) if moe.shared_intermediate_size else 0
    return moe.num_experts * expert + router + shared


def lora_warnings(spec: ModelSpec) -> tuple[str, ...]:
    """Where the LoRA figure is the dense rule's estimate rather than vLLM's own layers."""
    plan = spec.layer_plan
    mixers = plan is not None and (
        plan.blocks or any(c.kind in STATE_KINDS for caches in plan.caches for c in caches)
    )
    if spec.mla is not None or mixers:
        return (
            "LoRA memory is estimated as for plain attention layers: this model's attention "
            "(MLA, linear attention or Mamba mixers) wraps other modules",
        )
    return ()
