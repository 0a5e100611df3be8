"""``Settings``: a plan request resolved against a model and a GPU (every ``vllm serve``
default filled in), and the KV layout of one pipeline stage under them. The memory model reads
these; ``search/request.py`` makes them from a ``PlanRequest``."""

from __future__ import annotations

from dataclasses import dataclass, field

from deployments.planning.model.quant import QuantSpec
from deployments.planning.model.spec import ModelSpec

from .correction import Correction
from .kvcache import StageKv, stage_kv
from .kvgroups import KvRules
from .lora import LoraConfig
from .versions import VersionProfile


@dataclass(frozen=True, slots=True)
class Settings:
    """A request resolved against a model and the smallest GPU of a layout."""

    profile: VersionProfile
    dtype: str
    dtype_bytes: int
    quant: QuantSpec | None
    moe_align: tuple[int, int]  # MXFP4 expert padding of the kernel vLLM picks on this GPU
    kv_element_bytes: int
    max_model_len: int
    max_model_len_given: bool
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    block_size: int
    enforce_eager: bool
    kv_rules: KvRules = field(default_factory=KvRules)
    correction: Correction | None = None  # learned from the fleet's starts (correction.py)
    runner: str | None = None  # "pooling" for an embedding model (vLLM's --runner)
    convert: str | None = None  # "embed"/"classify": vLLM adapts a generative class (--convert)
    lora: LoraConfig | None = None  # --enable-lora: adapter slots allocated at start (lora.py)


def settings_kv(spec: ModelSpec, s: Settings, *, tp: int, pp: int, stage: int) -> StageKv:
    """The KV layout of one stage under these settings (block size, cache dtype, vLLM rules)."""
    return stage_kv(
        spec,
        tp=tp,
        pp=pp,
        pp_rank=stage,
        block_size=s.block_size,
        element_bytes=s.kv_element_bytes,
        rules=s.kv_rules,
    )
