"""``PlanRequest``: the user's overrides, and ``resolve``, which turns them into the
``Settings`` (memory/settings.py) that ``vllm serve`` would use on given GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.errors import PlanningError
from deployments.planning.memory.correction import Correction, matching
from deployments.planning.memory.kvcache import kv_element_bytes
from deployments.planning.memory.kvgroups import is_hopper, rules_for
from deployments.planning.memory.settings import Settings
from deployments.planning.memory.versions import DEFAULT_VLLM_VERSION, default_batching, profile_for
from deployments.planning.model import quant as quant_mod
from deployments.planning.model.quant import QuantSpec
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import canonical_dtype, dtype_bytes

GOALS = ("balanced", "throughput")
PLACEMENTS = ("spread", "packed")
MAX_REPLICAS = 4096  # as many as the largest inventory has GPUs
KV_DTYPES = frozenset(
    {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}
)


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What to plan; ``None`` means vLLM's default for the target version and GPU."""

    model: str = ""  # the positional argument of ``vllm serve``
    revision: str = ""  # a Hub branch, tag or commit (``--revision``); "" = the default branch
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    vllm_version: str = DEFAULT_VLLM_VERSION
    enforce_eager: bool = False
    decode_context_parallel_size: int | None = None  # --decode-context-parallel-size
    # Planning requirements, not engine flags: full-length requests one replica must hold at
    # once, and whether to favour fewer GPUs per replica or more replicas.
    concurrency: int | None = None
    goal: str = "balanced"
    # Replicas of the layout to place (None: as many as fit), spread over hosts or packed.
    replicas: int | None = None
    placement: str = "spread"
    # Corrections learned from the fleet's start-ups (memory/correction.py), computed by the
    # caller from its recorded starts; one applies where its GPU model and version match.
    # ``learned_correction`` False plans as if there were none (the per-plan switch).
    corrections: tuple[Correction, ...] = ()
    learned_correction: bool = True

    def validate(self) -> None:
        """Raise PlanningError on numbers no vLLM would accept."""
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"):
            _positive(name, getattr(self, name))
        names = ("max_num_seqs", "max_num_batched_tokens", "block_size", "concurrency")
        for name in (*names, "decode_context_parallel_size"):
            _positive(name, getattr(self, name))
        _positive("replicas", self.replicas)
        if self.replicas is not None and self.replicas > MAX_REPLICAS:
            raise PlanningError(f"replicas must be at most {MAX_REPLICAS:,}, got {self.replicas:,}")
        if self.placement not in PLACEMENTS:
            raise PlanningError(
                f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        gmu = self.gpu_memory_utilization
        if gmu is not None and not 0 < gmu <= 1:
            raise PlanningError(f"gpu_memory_utilization must be in (0, 1], got {gmu}")
        if self.kv_cache_dtype not in KV_DTYPES:
            raise PlanningError(f"unsupported kv-cache dtype {self.kv_cache_dtype!r}")
        if self.block_size is not None and self.block_size % 16 and self.block_size not in (1, 8):
            raise PlanningError(
                f"block_size must be 1, 8 or a multiple of 16, got {self.block_size}"
            )
        if self.goal not in GOALS:
            raise PlanningError(f"goal must be one of {', '.join(GOALS)}, got {self.goal!r}")
        profile_for(self.vllm_version)


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise PlanningError(f"{name} must be a positive whole number, got {value}")


def resolve(spec: ModelSpec, req: PlanRequest, gpu_total_bytes: int, gpu_name: str) -> Settings:
    """Fill every default the way ``vllm serve`` would on this GPU."""
    profile = profile_for(req.vllm_version)
    dtype = _model_dtype(spec, req.dtype)
    tokens, seqs = default_batching(profile, gpu_total_bytes, gpu_name)
    max_len = req.max_model_len or spec.derived_max_model_len
    if spec.pooling is not None and not spec.pooling.chunked_prefill:
        # whole prompts per step (vllm/engine/arg_utils.py:3180-3222)
        tokens = min((req.max_num_seqs or seqs) * max_len, max(max_len, tokens))
    gmu = req.gpu_memory_utilization or profile.default_gpu_memory_utilization
    quant = _quant(spec, req.quantization)
    kv_dtype = req.kv_cache_dtype
    if kv_dtype == "auto" and quant is not None and quant.kv_cache_dtype:
        kv_dtype = quant.kv_cache_dtype  # vLLM's resolve_kv_cache_dtype_string (modelopt)
    generation = quant_mod.gpu_generation(gpu_name, gpu_total_bytes)
    return Settings(
        profile=profile,
        dtype=dtype,
        dtype_bytes=dtype_bytes(dtype),
        quant=quant,
        moe_align=quant_mod.moe_alignment(quant, profile.version, generation),
        kv_element_bytes=kv_element_bytes(kv_dtype, dtype_bytes(dtype)),
        max_model_len=max_len,
        max_model_len_given=req.max_model_len is not None,
        max_num_seqs=req.max_num_seqs or seqs,
        max_num_batched_tokens=req.max_num_batched_tokens or tokens,
        gpu_memory_utilization=gmu,
        block_size=req.block_size or 16,
        enforce_eager=req.enforce_eager,
        runner="pooling" if spec.pooling is not None else None,
        convert=spec.pooling.convert if spec.pooling and spec.pooling.convert != "none" else None,
        kv_rules=rules_for(
            profile.version,
            dtype_bytes=dtype_bytes(dtype),
            dcp=req.decode_context_parallel_size or 1,
            kv_cache_dtype=kv_dtype,
            hopper=is_hopper(gpu_name, gpu_total_bytes),
            sparse_mla=_sparse_mla(spec),
            model_type=spec.model_type,
        ),
        correction=(
            matching(req.corrections, gpu_name, profile.version) if req.learned_correction else None
        ),
    )


def _sparse_mla(spec: ModelSpec) -> bool:
    plan = spec.layer_plan
    return plan is not None and any(c.indexer_bytes for caches in plan.caches for c in caches)


def _model_dtype(spec: ModelSpec, requested: str) -> str:
    if requested.lower() != "auto":
        return canonical_dtype(requested)
    return "float16" if spec.dtype == "float32" else spec.dtype


def _quant(spec: ModelSpec, method: str | None) -> QuantSpec | None:
    if not method:
        return spec.quant
    if spec.quant is not None:
        return spec.quant  # the checkpoint's own format; --quantization only names its kernel
    try:
        return quant_mod.runtime(method.lower())
    except ValueError as exc:
        raise PlanningError(str(exc)) from None
