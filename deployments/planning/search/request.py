"""``PlanRequest``: the user's overrides, and ``resolve``, which turns them into the
``Settings`` (memory/settings.py) that ``vllm serve`` would use on given GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.errors import PlanningError
from deployments.planning.memory.correction import Correction, matching
from deployments.planning.memory.kvcache import kv_element_bytes
from deployments.planning.memory.kvgroups import rules_for
from deployments.planning.memory.lora import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, LoraConfig
from deployments.planning.memory.platform import Platform, gpu_platform
from deployments.planning.memory.settings import Settings
from deployments.planning.memory.versions import DEFAULT_VLLM_VERSION, profile_for
from deployments.planning.model import quant as quant_mod
from deployments.planning.model.quant import QuantSpec
from deployments.planning.model.spec import ModelSpec
from deployments.planning.units import dtype_bytes

GOALS = ("balanced", "throughput")
DEVICES = ("gpu", "cpu")
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
    # "cpu": vLLM's CPU build on a host's CPU and RAM (search/cpu.py). ``kv_cache_bytes`` is
    # vLLM's --kv-cache-memory-bytes, the KV space each rank allocates (None: the planner
    # chooses it from free RAM); ``sleep_mode`` is whether the launch wants the engine to sleep.
    device: str = "gpu"
    kv_cache_bytes: int | None = None
    sleep_mode: bool = False
    # --enable-lora and its slots (memory/lora.py); None: vLLM's default once enabled
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None

    @property
    def lora(self) -> LoraConfig | None:
        """The LoRA settings vLLM would start with; None without --enable-lora."""
        if not self.enable_lora:
            return None
        return LoraConfig(
            max_loras=self.max_loras or DEFAULT_MAX_LORAS,
            max_lora_rank=self.max_lora_rank or DEFAULT_MAX_LORA_RANK,
            max_cpu_loras=self.max_cpu_loras,
        )

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
        if self.device not in DEVICES:
            raise PlanningError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        _positive("kv_cache_bytes", self.kv_cache_bytes)
        if self.kv_cache_bytes is not None and self.device != "cpu":
            raise PlanningError("kv_cache_bytes is planned for the CPU device only")
        if self.lora is not None:
            self.lora.validate()
        elif any(v is not None for v in (self.max_loras, self.max_lora_rank, self.max_cpu_loras)):
            raise PlanningError("max_loras, max_lora_rank and max_cpu_loras need enable_lora")
        if self.goal not in GOALS:
            raise PlanningError(f"goal must be one of {', '.join(GOALS)}, got {self.goal!r}")
        profile_for(self.vllm_version)


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise PlanningError(f"{name} must be a positive whole number, got {value}")


def resolve(spec: ModelSpec, req: PlanRequest, gpu_total_bytes: int, gpu_name: str) -> Settings:
    """Fill every default the way ``vllm serve`` would on this GPU."""
    profile = profile_for(req.vllm_version)
    return resolve_on(spec, req, gpu_platform(profile, gpu_total_bytes, gpu_name))


def resolve_on(spec: ModelSpec, req: PlanRequest, platform: Platform) -> Settings:
    """Fill every default the way ``vllm serve`` would on this platform (a GPU, or a CPU with
    its ranks): the platform gives its inputs (memory/platform.py), the rest is vLLM's own."""
    profile = profile_for(req.vllm_version)
    pooling = spec.pooling is not None
    dtype = platform.model_dtype(spec.dtype, req.dtype, pooling=pooling)
    tokens, seqs = platform.batching
    max_len = req.max_model_len or spec.derived_max_model_len
    if spec.pooling is not None and not spec.pooling.chunked_prefill:
        # whole prompts per step (vllm/engine/arg_utils.py:3180-3222)
        tokens = min((req.max_num_seqs or seqs) * max_len, max(max_len, tokens))
    mla_whole = spec.mla is not None and not platform.mla_chunked_prefill
    if mla_whole:  # platforms/cpu.py: MLA without chunked prefill takes whole prompts
        tokens = max(max_len, tokens)
    gmu = req.gpu_memory_utilization or profile.default_gpu_memory_utilization
    quant = _quant(spec, req.quantization)
    kv_dtype = req.kv_cache_dtype
    if kv_dtype == "auto" and quant is not None and quant.kv_cache_dtype:
        kv_dtype = quant.kv_cache_dtype  # vLLM's resolve_kv_cache_dtype_string (modelopt)
    gpu = platform.device == "gpu"
    return Settings(
        profile=profile,
        dtype=dtype,
        dtype_bytes=dtype_bytes(dtype),
        quant=quant,
        moe_align=(
            quant_mod.moe_alignment(quant, profile.version, platform.moe_generation)
            if platform.moe_generation
            else (1, 1)
        ),
        kv_element_bytes=kv_element_bytes(kv_dtype, dtype_bytes(dtype)),
        max_model_len=max_len,
        max_model_len_given=req.max_model_len is not None,
        max_num_seqs=req.max_num_seqs or seqs,
        max_num_batched_tokens=req.max_num_batched_tokens or tokens,
        gpu_memory_utilization=gmu,
        block_size=platform.block(req.block_size, mla=spec.mla is not None),
        enforce_eager=req.enforce_eager,
        runner="pooling" if pooling else None,
        convert=spec.pooling.convert if spec.pooling and spec.pooling.convert != "none" else None,
        kv_rules=rules_for(
            profile.version,
            dtype_bytes=dtype_bytes(dtype),
            dcp=req.decode_context_parallel_size or 1,
            kv_cache_dtype=kv_dtype,
            hopper=platform.gdn_checkpoints,
            sparse_mla=is_sparse_mla(spec),
            model_type=spec.model_type,
            kernel_block=platform.kernel_block,
            async_scheduling=platform.async_scheduling,
            forced_ssm_bytes=platform.forced_ssm_bytes,
            prefix_caching=not mla_whole,
        ),
        correction=(
            matching(req.corrections, platform.name, profile.version)
            if gpu and req.learned_correction
            else None
        ),
        lora=req.lora,
    )


def is_sparse_mla(spec: ModelSpec) -> bool:
    """DeepSeek-V3.2's MLA with a top-k indexer (``index_topk``): sparse attention."""
    plan = spec.layer_plan
    return plan is not None and any(c.indexer_bytes for caches in plan.caches for c in caches)


def _quant(spec: ModelSpec, method: str | None) -> QuantSpec | None:
    if not method:
        return spec.quant
    if spec.quant is not None:
        return spec.quant  # the checkpoint's own format; --quantization only names its kernel
    try:
        return quant_mod.runtime(method.lower())
    except ValueError as exc:
        raise PlanningError(str(exc)) from None
