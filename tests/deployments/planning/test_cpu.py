"""vLLM's CPU build as a device: plans on a host's CPU, their KV tokens against the engine's own
logged "CPU KV cache size", the core ranges, and the refusals before launch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deployments import planning
from deployments.planning.memory import cpu_platform

GIB = 1 << 30
MIB = 1 << 20
CPU = planning.Cpu("Test CPU", cores=2, total_bytes=23 * GIB, free_bytes=20 * GIB, isa=("avx2",))


def llama(*, hidden: int, heads: int, kv: int, layers: int, dtype: str = "float32") -> dict:
    """A config.json of the tiny random Llamas the real starts ran (tests/support/cpu_shapes)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hidden // heads,
        "vocab_size": 384,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
        "dtype": dtype,
    }


DEMO = llama(hidden=128, heads=2, kv=1, layers=2)


def plan_on(config: dict, cpu: planning.Cpu = CPU, **request: object) -> planning.PlanResult:
    spec = planning.ModelSpec.from_config(config)
    inv = planning.Inventory((planning.Host("h", (), cpu=cpu),))
    return planning.plan(spec, inv, planning.PlanRequest(device="cpu", **request))  # type: ignore[arg-type]


# Real starts of vLLM 0.32's CPU build on this 2-core AVX2 machine (docs/performance.md): the
# tiny random Llama's shape (hidden, heads, KV heads, layers), --dtype (auto: bfloat16 here),
# --kv-cache-memory-bytes, TP, --max-model-len, and the "CPU KV cache size" the engine logged.
STARTS = [
    # shape            dtype      KV bytes    TP  max len  logged
    ((128, 2, 1, 2), "float32", 128 * MIB, 1, 512, 131_072),
    ((128, 2, 1, 2), "float32", 128 * MIB, 2, 512, 131_072),
    ((128, 2, 1, 2), "auto", 128 * MIB, 1, 512, 262_144),
    ((128, 2, 1, 2), "auto", 128 * MIB, 2, 512, 262_144),
    ((256, 2, 2, 4), "auto", 200 * MIB, 1, 512, 51_200),
    ((256, 2, 2, 4), "auto", 200 * MIB, 2, 512, 102_400),
    ((256, 2, 2, 4), "auto", 1024 * MIB, 1, 500, 256_000),
    ((192, 6, 3, 3), "auto", 96 * MIB, 1, 300, 68_200),
    ((192, 6, 3, 3), "float32", 48 * MIB, 1, 512, 21_760),
    ((320, 4, 4, 2), "float32", 64 * MIB, 2, 512, 26_112),
]


@pytest.mark.parametrize(("shape", "dtype", "kv_bytes", "tp", "max_len", "logged"), STARTS)
def test_planned_kv_tokens_are_what_vllm_logged(
    shape: tuple[int, int, int, int], dtype: str, kv_bytes: int, tp: int, max_len: int, logged: int
) -> None:
    hidden, heads, kv, layers = shape
    config = llama(hidden=hidden, heads=heads, kv=kv, layers=layers)
    request = {"dtype": dtype, "kv_cache_bytes": kv_bytes, "max_model_len": max_len}
    p = plan_on(config, tensor_parallel_size=tp, **request).plans[0]
    assert p.fits, p.reasons
    assert p.kv_cache_tokens == logged
    assert p.max_concurrency == round(logged / max_len, 2)


def test_a_cpu_plan_is_one_device_slot_with_its_flags() -> None:
    p = plan_on(DEMO, tensor_parallel_size=2, kv_cache_bytes=128 * MIB).plans[0]
    assert (p.device, p.fits, p.label) == ("cpu", True, "CPU, TP 2")
    assert p.gpus == ((planning.GpuRef("h", 0),),)
    assert len(p.per_gpu) == 1
    mem = p.per_gpu[0]
    assert mem.kv_cache_bytes == 2 * 128 * MIB  # every rank allocates the whole space
    assert mem.total_bytes == mem.weights_bytes + mem.activation_bytes + mem.non_torch_bytes + (
        mem.kv_cache_bytes
    )
    assert mem.gpu_total_bytes == 23 * GIB
    e = p.engine_settings
    assert (e.kv_cache_memory_bytes, e.cpu_threads_bind) == (128 * MIB, "0|1")
    assert e.gpu_memory_utilization is None and e.max_num_seqs == 256


def test_no_host_cpu_no_plan() -> None:
    spec = planning.ModelSpec.from_config(DEMO)
    inv = planning.parse_gpus("2x80GiB")
    result = planning.plan(spec, inv, planning.PlanRequest(device="cpu"))
    assert result.plans == () and "CPU" in result.reason


def test_the_kv_space_is_chosen_from_free_ram_for_the_requests_it_can_serve() -> None:
    p = plan_on(DEMO, max_model_len=512).plans[0]
    assert p.fits and p.tensor_parallel_size == 1
    # 128 sequences × 4 blocks of 128 tokens, plus vLLM's null block, at 512 B a token (bf16)
    assert p.engine_settings.kv_cache_memory_bytes == (128 * 4 + 1) * 128 * 512
    assert p.max_concurrency >= 128


def test_little_free_ram_bounds_the_chosen_kv_space() -> None:
    tight = replace(CPU, total_bytes=8 * GIB, free_bytes=2 * GIB + 640 * MIB + 30 * MIB)
    p = plan_on(DEMO, cpu=tight, max_model_len=512).plans[0]
    room = tight.free_bytes - cpu_platform.ram_margin_bytes(tight.total_bytes)
    assert p.fits and p.per_gpu[0].total_bytes <= room
    assert 0 < p.engine_settings.kv_cache_memory_bytes < (128 * 4 + 1) * 128 * 512  # type: ignore[operator]


@pytest.mark.parametrize(
    ("threads", "ranks", "bind"),
    [
        ((0, 1), 2, "0|1"),
        (tuple(range(8)), 2, "0-3|4-7"),
        (tuple(range(8)), 1, "0-7"),
        ((0, 1, 2, 5, 6, 7), 2, "0-2|5-7"),
        ((0, 2, 4, 6), 2, "0,2|4,6"),
        ((0,), 2, ""),
    ],
)
def test_one_core_range_per_rank(threads: tuple[int, ...], ranks: int, bind: str) -> None:
    assert cpu_platform.threads_bind(threads, ranks) == bind


def test_tp_larger_than_the_cores_is_refused() -> None:
    p = plan_on(DEMO, tensor_parallel_size=4).plans[0]
    assert not p.fits
    assert p.reasons[0] == "tensor parallel size 4 needs a core per rank; this CPU has 2"


def test_one_rank_per_numa_node_leads() -> None:
    two_nodes = replace(CPU, cores=8, numa_nodes=2)
    result = plan_on(DEMO, cpu=two_nodes)
    assert [p.tensor_parallel_size for p in result.plans][:2] == [2, 1]
    assert result.plans[0].engine_settings.cpu_threads_bind == "0-3|4-7"
    assert "NUMA" in result.reason


REFUSALS = [
    (
        "head size 16",
        llama(hidden=64, heads=4, kv=2, layers=2),
        {},
        CPU,
        'the engine starts, then fails the first request with "Unsupported CPU attention '
        'configuration: head_dim=16 isa=2 kv_cache_idx=0"',
    ),
    (
        "head size 40",
        llama(hidden=160, heads=4, kv=1, layers=2),
        {},
        CPU,
        "head_dim=40 isa=1 kv_cache_idx=0",  # the engine's own words on its first request
    ),
    (
        "sleep mode",
        DEMO,
        {"sleep_mode": True},
        CPU,
        "Sleep mode is not supported on current platform",
    ),
    (
        "bfloat16 on a CPU without it",
        DEMO,
        {"dtype": "bfloat16"},
        replace(CPU, arch="arm64", isa=("neon",)),
        "has no bfloat16 kernels; it runs float16, float32",
    ),
    (
        "fp8 KV cache without AVX-512",
        DEMO,
        {"kv_cache_dtype": "fp8"},
        CPU,
        "FP8 KV cache on CPU requires x86 with AVX-512 or AMX.",
    ),
    (
        "RAM too small",
        DEMO,
        {},
        replace(CPU, total_bytes=4 * GIB, free_bytes=2 * GIB),
        "RAM too small",
    ),
    (
        "KV space larger than free RAM",
        DEMO,
        {"kv_cache_bytes": 30 * GIB},
        CPU,
        "on kv cache allocation is less than requested memory for kv",
    ),
    (
        "KV space smaller than one request",
        DEMO,
        {"kv_cache_bytes": 64 * 1024, "max_model_len": 512},
        CPU,
        "To serve at least one request with the model's max seq len (512)",
    ),
    (
        "heads not divisible by TP",
        llama(hidden=192, heads=3, kv=1, layers=2),
        {"tensor_parallel_size": 2},
        CPU,
        "must be divisible by tensor parallel size (2)",
    ),
]


@pytest.mark.parametrize(
    ("config", "request_", "cpu", "words"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refused_before_launch_with_the_reason(
    config: dict, request_: dict, cpu: planning.Cpu, words: str
) -> None:
    result = plan_on(config, cpu=cpu, **request_)
    assert result.plans and not any(p.fits for p in result.plans)
    assert any(words in r for r in result.plans[0].reasons), result.plans[0].reasons


def test_dtype_auto_follows_the_platform() -> None:
    x86 = cpu_platform.CpuKind()
    mac = cpu_platform.CpuKind(arch="arm64")
    assert cpu_platform.model_dtype("float32", "auto", x86, pooling=False) == "bfloat16"
    assert cpu_platform.model_dtype("float32", "auto", x86, pooling=True) == "float16"
    assert cpu_platform.model_dtype("float32", "auto", mac, pooling=False) == "float16"
    assert cpu_platform.model_dtype("bfloat16", "auto", x86, pooling=False) == "bfloat16"
    assert cpu_platform.model_dtype("float32", "float32", x86, pooling=False) == "float32"


def test_kv_bytes_are_for_the_cpu_device_only() -> None:
    with pytest.raises(planning.PlanningError, match="CPU device only"):
        planning.PlanRequest(kv_cache_bytes=GIB).validate()
    with pytest.raises(planning.PlanningError, match="device must be one of"):
        planning.PlanRequest(device="tpu").validate()
