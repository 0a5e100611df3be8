"""llama.cpp per-device memory and the layer split, against llama.cpp's own rules (b11434)."""

from dataclasses import replace

import pytest

from deployments.planning import PlanningError, parse_gpus
from deployments.planning.memory.llamacpp import (
    LlamaCppSettings,
    cache_type_errors,
    context_cells,
    device_memory,
    kv_bytes_per_cell,
    layer_devices,
)
from deployments.planning.model.gguf import GgufSpec, GgufTensor, gguf_spec
from deployments.planning.search.llamacpp import (
    LlamaCppRequest,
    balanced_counts,
    one_machine,
    plan_llamacpp,
)

GIB = 1 << 30
MIB = 1 << 20


def llama(layers: int = 80, *, layer_bytes: int = int(0.48 * GIB), head_dim: int = 128) -> GgufSpec:
    """Llama-3.1-70B Q4_K_M in round figures (reference llamacpp.md §4.4)."""
    return GgufSpec(
        name="llama-70b",
        architecture="llama",
        block_count=layers,
        embedding_length=8192,
        head_count=64,
        head_count_kv=(8,) * layers,
        key_length=head_dim,
        value_length=head_dim,
        vocab_size=128256,
        feed_forward_length=28672,
        context_length=131072,
        file_type="Q4_K_M",
        layer_bytes=(layer_bytes,) * layers,
        input_bytes=int(0.55 * GIB),
        output_bytes=int(0.80 * GIB),
        duplicated_bytes=0,
        tensor_types={},
    )


@pytest.mark.parametrize(
    ("kind", "per_token"),
    [("f16", 131072), ("q8_0", 69632), ("q4_0", 36864), ("f32", 262144)],
)
def test_kv_bytes_per_token_by_cache_type(kind, per_token):
    """Llama-3.1-8B: 32 × (2·1024·2) B = 128 KiB per token in f16 (reference §4.1)."""
    spec = llama(32)
    settings = LlamaCppSettings(cache_type_k=kind, cache_type_v=kind)
    assert kv_bytes_per_cell(spec, settings, range(32)) == per_token


@pytest.mark.parametrize(("asked", "cells"), [(1, 256), (256, 256), (1000, 1024), (4097, 4352)])
def test_context_is_padded_to_256(asked, cells):
    assert context_cells(llama(), LlamaCppSettings(context_tokens=asked)) == cells


def test_no_context_means_the_training_context():
    assert context_cells(llama(), LlamaCppSettings()) == 131072


@pytest.mark.parametrize(
    ("head_dim", "kind", "flash", "refused"),
    [
        (16, "q8_0", True, True),  # the demo model: llama.cpp refuses it at start
        (32, "q8_0", True, False),
        (128, "q4_0", True, False),
        (128, "q4_0", False, True),  # a quantized V cache needs flash attention
        (16, "f16", False, False),
    ],
)
def test_quantized_kv_needs_head_dim_divisible_by_32(head_dim, kind, flash, refused):
    settings = LlamaCppSettings(cache_type_k=kind, cache_type_v=kind, flash_attn=flash)
    assert bool(cache_type_errors(llama(2, head_dim=head_dim), settings)) is refused


def test_output_layer_goes_on_the_last_gpu_and_the_embedding_stays_on_the_cpu():
    owners = layer_devices(80, 81, [41, 40])
    assert owners[:41] == (0,) * 41
    assert owners[41:] == (1,) * 40  # blocks 41-79 and the output layer (index 80)
    cpu, gpu0, gpu1 = device_memory(
        llama(), LlamaCppSettings(context_tokens=16384), gpu_layers=81, splits=[41, 40]
    )
    assert cpu.weights_bytes == int(0.55 * GIB) and cpu.layers == ()
    assert gpu0.weights_bytes == 41 * int(0.48 * GIB)
    assert gpu1.weights_bytes == 39 * int(0.48 * GIB) + int(0.80 * GIB)
    # f16: 80 layers × 2 × 1024 × 2 B = 320 KiB per token, split 41/39 (reference §4.4)
    assert gpu0.kv_bytes == 16384 * 41 * 4096
    assert gpu1.kv_bytes == 16384 * 39 * 4096


@pytest.mark.parametrize(
    ("layers", "ngl", "splits", "expected"),
    [
        (3, 4, [1, 1], (0, 0, 1, 1)),
        (3, 2, [1, 1], (None, None, 0, 1)),  # the first L+1-ngl layers stay on the CPU
        (3, 0, [1, 1], (None,) * 4),
        (2, 3, [1, 1, 1], (0, 1, 2)),
        (4, 5, [3, 2], (0, 0, 0, 1, 1)),
        (4, 5, [0.6, 0.4], (0, 0, 0, 1, 1)),
    ],
)
def test_layer_devices_follow_load_tensors(layers, ngl, splits, expected):
    assert layer_devices(layers, ngl, splits) == expected


def test_balanced_counts_give_the_bigger_gpu_more_layers():
    counts = balanced_counts([10] * 33, [24, 16])
    assert sum(counts) == 33 and counts[0] > counts[1]
    assert balanced_counts([10] * 10, [8, 8]) == (5, 5)


def test_what_if_24_and_16_gib_is_a_two_gpu_layer_split_with_unequal_ratios():
    inventory = one_machine(parse_gpus("1x24GiB@pcie,1x16GiB@pcie"))
    spec = llama(32, layer_bytes=int(0.7 * GIB))  # 22.4 GiB of blocks: too big for one GPU
    request = LlamaCppRequest(settings=LlamaCppSettings(context_tokens=8192))
    best = plan_llamacpp(spec, inventory, request)[0]
    assert best.fits and len(best.gpus) == 2 and best.split_mode == "layer"
    first, second = best.tensor_split
    assert first > second and first + second == 33


def test_a_model_that_fits_one_gpu_is_also_offered_on_one_gpu():
    inventory = one_machine(parse_gpus("1x24GiB@pcie,1x16GiB@pcie"))
    plans = plan_llamacpp(
        llama(8), inventory, LlamaCppRequest(settings=LlamaCppSettings(context_tokens=4096))
    )
    singles = [p for p in plans if len(p.gpus) == 1]
    assert singles and all(p.fits and p.split_mode == "none" for p in singles)


def test_f16_kv_too_big_where_q8_0_fits():
    """The 2×24 GiB trade-off of the reference: 70B Q4_K_M at 16k f16 is over, q8_0 is under."""
    inventory = one_machine(parse_gpus("2x24GiB@pcie"))
    spec = llama(80, layer_bytes=int(0.50 * GIB))
    f16 = LlamaCppSettings(context_tokens=16384)
    q8 = replace(f16, cache_type_k="q8_0", cache_type_v="q8_0")
    assert not plan_llamacpp(spec, inventory, LlamaCppRequest(settings=f16))[0].fits
    assert plan_llamacpp(spec, inventory, LlamaCppRequest(settings=q8))[0].fits


def test_partial_offload_only_when_allowed_and_its_cost_is_stated():
    inventory = one_machine(parse_gpus("1x16GiB"))
    spec = llama(32, layer_bytes=int(0.6 * GIB))
    settings = LlamaCppSettings(context_tokens=4096)
    refused = plan_llamacpp(spec, inventory, LlamaCppRequest(settings=settings))[0]
    assert not refused.fits and refused.gpu_layers == 33
    allowed = plan_llamacpp(
        spec, inventory, LlamaCppRequest(settings=settings, allow_partial_offload=True)
    )[0]
    assert allowed.fits and allowed.gpu_layers < 33
    assert allowed.cpu.weights_bytes > spec.input_bytes
    assert any("stay on the CPU" in w for w in allowed.warnings)


def test_a_pinned_tensor_split_is_kept():
    inventory = one_machine(parse_gpus("2x24GiB@pcie"))
    request = LlamaCppRequest(
        settings=LlamaCppSettings(context_tokens=4096), tensor_split=(3.0, 1.0)
    )
    plan = plan_llamacpp(llama(8), inventory, request)[0]
    assert plan.tensor_split == (3.0, 1.0)
    assert [len(d.layers) for d in plan.devices] == [7, 2]  # 9 layers at 3:1, upper_bound
    with pytest.raises(PlanningError):
        plan_llamacpp(llama(8), inventory, replace(request, tensor_split=(1.0,)))


def test_spec_from_header_sums_tensor_bytes_per_layer_and_duplicates_a_tied_output():
    metadata = {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.context_length": 512,
        "general.file_type": 7,
    }
    tensors = [
        GgufTensor("token_embd.weight", "Q8_0", 384 * 64, 26112),
        GgufTensor("blk.0.attn_q.weight", "Q8_0", 4096, 4352),
        GgufTensor("blk.0.attn_norm.weight", "F32", 64, 256),
        GgufTensor("blk.1.attn_q.weight", "Q8_0", 4096, 4352),
        GgufTensor("output_norm.weight", "F32", 64, 256),
    ]
    spec = gguf_spec(metadata, tensors, name="demo")
    assert spec.layer_bytes == (4608, 4352)
    assert spec.key_length == 16 and spec.head_count_kv == (2, 2)
    assert spec.tied_output and spec.output_bytes == 256 + 26112
    assert spec.file_tensor_bytes == 26112 + 4608 + 4352 + 256
    assert spec.file_type == "Q8_0" and spec.vocab_size == 384


def test_the_plan_states_every_placement_and_size():
    inventory = one_machine(parse_gpus("1x24GiB@pcie,1x16GiB@pcie"))
    settings = LlamaCppSettings(
        context_tokens=8000, slots=4, cache_type_k="q8_0", cache_type_v="q8_0", ubatch=256
    )
    plans = plan_llamacpp(llama(8), inventory, LlamaCppRequest(settings=settings))
    plan = next(p for p in plans if len(p.gpus) == 2)  # one GPU holds it: the split ranks lower
    assert (plan.context_cells, plan.gpu_layers, plan.split_mode) == (8192, 9, "layer")
    assert len(plan.tensor_split) == 2 and sum(plan.tensor_split) == 9
    assert plan.settings == settings


def test_what_the_planner_does_not_model_is_said():
    inventory = one_machine(parse_gpus("1x80GiB"))
    settings = LlamaCppSettings(context_tokens=4096)
    swa = replace(llama(8), sliding_window=4096)
    recurrent = replace(llama(8), head_count_kv=(8, 0, 8, 0, 8, 0, 8, 0))
    [plan] = plan_llamacpp(swa, inventory, LlamaCppRequest(settings=settings))
    assert any("upper bound" in w for w in plan.warnings)
    [plan] = plan_llamacpp(recurrent, inventory, LlamaCppRequest(settings=settings))
    assert any("recurrent" in w for w in plan.warnings)
    assert not plan_llamacpp(llama(8), inventory, LlamaCppRequest(settings=settings))[0].warnings


def test_a_model_one_gpu_holds_runs_on_one_gpu_and_a_split_says_what_it_buys():
    """Issue 38: the fewest GPUs that hold the context and slots asked; one GPU is -sm none."""
    inventory = one_machine(parse_gpus("4x80GiB"))
    settings = LlamaCppSettings(context_tokens=4096, slots=4)
    plans = plan_llamacpp(llama(8), inventory, LlamaCppRequest(settings=settings))
    assert len(plans[0].gpus) == 1 and plans[0].split_mode == "none"
    assert all(d.layers for p in plans for d in p.devices)  # no GPU leased for nothing
    assert all("buys nothing" in p.note for p in plans if len(p.gpus) > 1)


def test_a_split_over_the_fewest_gpus_that_hold_the_model():
    inventory = one_machine(parse_gpus("4x24GiB@pcie"))
    spec = llama(80, layer_bytes=int(0.48 * GIB))  # 38 GiB of blocks: two 24 GiB GPUs
    best = plan_llamacpp(spec, inventory, LlamaCppRequest(settings=LlamaCppSettings(8192)))[0]
    assert best.fits and len(best.gpus) == 2 and "for room" in best.note


def test_a_pinned_zero_share_leaves_that_gpu_out():
    inventory = one_machine(parse_gpus("4x80GiB"))
    request = LlamaCppRequest(settings=LlamaCppSettings(4096), tensor_split=(0.0, 1.0, 1.0, 1.0))
    plan = plan_llamacpp(llama(8), inventory, request)[0]
    assert [g.index for g in plan.gpus] == [1, 2, 3] and plan.tensor_split == (1.0, 1.0, 1.0)
