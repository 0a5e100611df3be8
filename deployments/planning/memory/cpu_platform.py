"""vLLM's CPU platform: what its CPU build decides unlike a GPU, in one place.

The sizing every platform shares (weights per rank, KV layouts and groups, tokens from blocks)
stays in weights.py, kvcache.py, kvgroups.py and layout.py; this module holds only the CPU's own
settings and refusals, read from vLLM 0.32's CPU code:

- platforms/cpu.py ``check_and_update_config``: KV blocks of 128 tokens unless ``--block-size``
  is given (16 for the reference MLA kernel); async scheduling off; the legacy
  ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) becomes ``kv_cache_memory_bytes``.
- v1/worker/cpu_worker.py ``determine_available_memory``: with ``--kv-cache-memory-bytes`` every
  worker (TP rank) allocates that many bytes for its own KV cache, whatever the TP size; the
  engine takes the smallest block count over the ranks (kv_cache_utils.get_kv_cache_configs).
- v1/attention/backends/cpu_attn.py: the cache element is the model dtype unless an fp8 cache is
  asked for (utils/torch_utils.kv_cache_dtype_str_to_dtype), the ISA the kernel runs
  (``_get_attn_isa``), and the head sizes its compiled kernels take (the C++ dispatch of
  _C/_C_AVX2/_C_AVX512: 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512; other sizes
  start, then fail the first request with "Unsupported CPU attention configuration").
- config/model.py ``_resolve_auto_dtype``: dtype auto takes the platform's first supported dtype
  for a float32 checkpoint (bfloat16 on x86 and Linux aarch64; float16 for a pooling model).
- engine/arg_utils.py ``get_batch_defaults``: 2,048 batched tokens and 128 sequences per rank.

The two puzzles of shared/reference/vllm-cpu.md come from mixing models, not from the CPU:
its float32 row at "2 bytes an element" was the older demo shape (2 KV heads of head_dim 16 at
4 bytes: the same 128 bytes per layer and token as 1 head of 64 at 2 bytes), and its TP 2 row
"halving" was the current shape in float32 against a TP 1 row in bfloat16. Measured on this
build: the demo shape at float32 gives 131,072 tokens for 128 MiB at TP 1 and at TP 2 (its one
KV head replicated on both ranks, each allocating the whole space).
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments.planning.units import GIB, MIB

from .platform import Platform

BLOCK_SIZE = 128
MLA_BLOCK_SIZE = 16
KERNEL_BLOCK = 32  # cpu_attn.py get_supported_kernel_block_sizes: [MultipleOf(32)]
HEAD_SIZES = (32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# cpu_attention::ISA as the kernel prints it in its refusal: "head_dim=40 isa=1 kv_cache_idx=0"
# (seen on this build; kv_cache_idx 0 is a cache in the model's dtype)
ISA_CODES = {"amx": 0, "vec": 1, "vec16": 2}
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
BATCHED_TOKENS_PER_RANK = 2048
SEQS_PER_RANK = 128

# RAM of the engine's processes beyond weights and KV cache, measured on this build with the
# demo model (docs/performance.md): the API server and EngineCore ~0.85 GiB together, each
# worker ~0.45 GiB (PSS); rounded up, as the torch/oneDNN runtime grows with the model's ops.
ENGINE_BASE_BYTES = 1 * GIB
RANK_RUNTIME_BYTES = 640 * MIB
# Left free on the host when the KV space is chosen: free RAM is read when planning and moves
# with other processes, and vLLM refuses to start when a worker's KV space exceeds what is
# available after its weights loaded; a tenth of the RAM, at least 1 GiB.
RAM_MARGIN_FRACTION = 0.10
RAM_MARGIN_MIN_BYTES = 1 * GIB

SLEEP_REFUSAL = (
    'vLLM on the CPU has no sleep mode: it refuses --enable-sleep-mode at start ("Sleep mode is '
    'not supported on current platform"); an idle CPU deployment scales to zero instead'
)


@dataclass(frozen=True, slots=True)
class CpuKind:
    """What vLLM's CPU code branches on: ``platform.machine()`` and the /proc/cpuinfo flags
    (the fleet's ``Cpu`` carries them; memory/ does not import fleet/)."""

    arch: str = "x86_64"
    isa: tuple[str, ...] = ()
    name: str = ""


def platform(cpu: CpuKind, total_bytes: int, ranks: int) -> Platform:
    """vLLM's CPU build with ``ranks`` workers on this CPU (platforms/cpu.py
    ``check_and_update_config``): blocks of 128 tokens, kernels in multiples of 32, no async
    scheduling; the reference MLA kernel (no AMX) forces 16-token blocks and runs MLA without
    chunked prefill or prefix caching; with AVX-512 BF16 the SSM state is kept in float32
    ("Reset SSM cache type to float32")."""
    amx = "amx_tile" in cpu.isa
    return Platform(
        device="cpu",
        name=cpu.name or cpu.arch,
        total_bytes=total_bytes,
        block_size=BLOCK_SIZE,
        kernel_block=KERNEL_BLOCK,
        dtypes=supported_dtypes(cpu),
        batching=default_batching(ranks),
        async_scheduling=False,
        mla_block_size=None if amx else MLA_BLOCK_SIZE,
        mla_chunked_prefill=amx,
        forced_ssm_bytes=4 if "avx512_bf16" in cpu.isa else 0,
    )


def ram_margin_bytes(total_bytes: int) -> int:
    """What a plan leaves free of a host's RAM."""
    return max(RAM_MARGIN_MIN_BYTES, round(RAM_MARGIN_FRACTION * total_bytes))


def default_batching(ranks: int) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of ``vllm serve`` on the CPU."""
    return BATCHED_TOKENS_PER_RANK * ranks, SEQS_PER_RANK * ranks


def supported_dtypes(cpu: CpuKind) -> tuple[str, ...]:
    """CpuPlatform.supported_dtypes, first the one dtype auto prefers. macOS on Apple silicon
    ("arm64") has bfloat16 only with FEAT_BF16 (``bf16`` among the flags)."""
    arch = cpu.arch.lower()
    if arch.startswith(("ppc", "powerpc")):
        return ("bfloat16", "float32", "float16")
    if arch == "arm64" and "bf16" not in cpu.isa:
        return ("float16", "float32")
    return ("bfloat16", "float16", "float32")


def model_dtype(checkpoint_dtype: str, requested: str, cpu: CpuKind, *, pooling: bool) -> str:
    """The dtype vLLM runs the model in on this CPU (_get_and_verify_dtype, dtype auto)."""
    return platform(cpu, 0, 1).model_dtype(checkpoint_dtype, requested, pooling=pooling)


def attention_isa(cpu: CpuKind, *, dtype: str, block_size: int, head_size: int) -> str:
    """The kernel vLLM's CPU attention picks (cpu_attn._get_attn_isa)."""
    if head_size % 32 and head_size % 16 == 0:
        return "vec16"
    if "amx_tile" in cpu.isa and dtype == "bfloat16" and block_size % 32 == 0:
        return "amx"
    arch = cpu.arch.lower()
    if arch in ("aarch64", "arm64"):
        return "neon"
    if block_size % 32 == 0:
        if arch.startswith("riscv"):
            return "rvv"
        if arch == "s390x":
            return "vxe"
        if arch.startswith(("ppc", "powerpc")):
            return "vsx"
        return "vec"
    return "vec16"


def refusals(
    cpu: CpuKind,
    *,
    dtype: str,
    kv_cache_dtype: str,
    block_size: int,
    head_size: int,
    mla: bool,
    sleep_mode: bool,
    sparse_mla: bool = False,
    ungated_moe: bool = False,
) -> list[str]:
    """What vLLM's CPU build refuses for this model and these settings, in its own words where
    it has them; empty when none applies."""
    out = [SLEEP_REFUSAL] if sleep_mode else []
    if dtype not in supported_dtypes(cpu):
        have = ", ".join(supported_dtypes(cpu))
        out.append(f"this CPU ({cpu.name or cpu.arch}) has no {dtype} kernels; it runs {have}")
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        out.append(
            f"vLLM's CPU attention takes the KV cache dtypes {', '.join(KV_CACHE_DTYPES)}, "
            f"not {kv_cache_dtype}"
        )
    fp8 = kv_cache_dtype.startswith("fp8")
    if fp8 and not ({"amx_tile", "avx512f"} & set(cpu.isa)):
        out.append("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")
    if sparse_mla:  # platforms/cpu.py get_attn_backend_cls, before any memory is sized
        out.append("Sparse Attention is not supported on CPU.")
    if ungated_moe:  # fused_moe/config.py __post_init__: experts with relu2 (Nemotron-H's MoE)
        out.append(
            "is_act_and_mul=False is supported only for CUDA, XPU and ROCm for now: vLLM's "
            "fused MoE has no CPU kernel for experts with a non-gated activation"
        )
    if mla:
        return out
    isa = attention_isa(cpu, dtype=dtype, block_size=block_size, head_size=head_size)
    if fp8 and head_size % 32:
        out.append("FP8 KV cache requires head_size divisible by 32 on CPU.")
    elif head_size not in HEAD_SIZES:
        code = ISA_CODES.get(isa, isa)
        out.append(
            f"vLLM's CPU attention has no kernel for head size {head_size} (it takes "
            f"{', '.join(map(str, HEAD_SIZES))}): the engine starts, then fails the first "
            f'request with "Unsupported CPU attention configuration: head_dim={head_size} '
            f'isa={code} kv_cache_idx=0"'
        )
    return out


def threads_bind(ids: tuple[int, ...], ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND: the CPU ids in ``ranks`` equal contiguous runs, one per rank
    ("0|1", "0-3|4-7"); "" when there are fewer ids than ranks. Contiguous ids keep a rank on
    one NUMA node where the kernel numbers each node's CPUs together (Linux does)."""
    if ranks < 1 or len(ids) < ranks:
        return ""
    per = len(ids) // ranks
    return "|".join(_ranges(ids[r * per : (r + 1) * per]) for r in range(ranks))


def _ranges(ids: tuple[int, ...]) -> str:
    """``0,1,2,5`` → "0-2,5"."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
