"""Right-sized shares: the utilization sized for a stated load, GPUs partly held by others, and
vLLM's start-up rule (free memory >= utilization × total) with its own error text."""

from __future__ import annotations

import math

import pytest

from deployments.planning import (
    Gpu,
    Host,
    Inventory,
    ModelSpec,
    PlanRequest,
    kv_bytes_per_token,
    parse_gpus,
    plan,
)
from deployments.planning.memory.versions import profile_for
from deployments.planning.search import margin, sharing
from tests.support.planning import LLAMA_8B, LLAMA_70B

GIB = 2**30


def box(*free_gib: float, total_gib: int = 80) -> Inventory:
    """One host whose GPU i has ``free_gib[i]`` GiB free (other deployments hold the rest)."""
    gpus = tuple(Gpu(i, "H100", total_gib * GIB, round(f * GIB)) for i, f in enumerate(free_gib))
    n = len(gpus)
    links = {(a, b): "NV18" for a in range(n) for b in range(a + 1, n)}
    return Inventory((Host("box", gpus, links),))


def gmu(p) -> float:
    value = sharing.utilization(p)
    assert value is not None
    return value


@pytest.mark.parametrize(
    ("config", "gpus", "concurrency", "max_len", "layout", "low", "high"),
    [
        # (model, inventory, stated load, expected TP × PP, utilization range)
        (LLAMA_8B, "1x80GiB", 1, 2048, (1, 1), 0.2, 0.3),
        (LLAMA_8B, "1x80GiB", 8, 4096, (1, 1), 0.25, 0.35),
        (LLAMA_8B, "2x80GiB", 16, 8192, (1, 1), 0.35, 0.5),
        (LLAMA_8B, "1x48GiB", 4, 8192, (1, 1), 0.4, 0.6),
        (LLAMA_8B, "2x80GiB", 64, 8192, (2, 1), 0.5, 0.7),
        (LLAMA_70B, "4x80GiB", 8, 8192, (4, 1), 0.55, 0.75),
    ],
)
def test_utilization_is_sized_for_the_stated_load(
    config, gpus, concurrency, max_len, layout, low, high
):
    req = PlanRequest(concurrency=concurrency, max_model_len=max_len)
    best = plan(ModelSpec.from_config(config), parse_gpus(gpus), req).best
    assert best is not None
    assert (best.tensor_parallel_size, best.pipeline_parallel_size) == layout
    assert low <= gmu(best) <= high
    assert best.max_concurrency >= concurrency  # the load is served, margin included
    # and not much more than asked: the margin and one step of the flag's rounding at most
    spec = ModelSpec.from_config(config)
    per_token = kv_bytes_per_token(spec, tp=best.tensor_parallel_size, element_bytes=2)
    extra_bytes = (best.max_concurrency - concurrency) * max_len * per_token
    error_band = margin.band(profile_for(), best.per_gpu[0]).kv_bytes
    load_margin = sharing.LOAD_MARGIN * concurrency * max_len * per_token
    margin_bytes = max(load_margin, sharing.MIN_MARGIN_BYTES, error_band)
    assert extra_bytes <= margin_bytes + sharing.GMU_STEP * best.per_gpu[0].gpu_total_bytes + 2**24
    for mem in best.per_gpu:  # what each GPU keeps free is what the share leaves
        assert mem.total_bytes == math.ceil(mem.gpu_total_bytes * gmu(best))
        assert mem.free_bytes == mem.gpu_total_bytes - mem.total_bytes


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (PlanRequest(), 0.92),  # no load stated: vLLM's default, as before
        (PlanRequest(max_model_len=4096), 0.92),  # a context alone is no load
        (PlanRequest(concurrency=4, gpu_memory_utilization=0.6), 0.6),  # the user's own wins
        (PlanRequest(concurrency=4, vllm_version="0.19.0"), None),  # sized on older versions too
    ],
)
def test_without_a_stated_load_the_default_stays(req, expected):
    best = plan(ModelSpec.from_config(LLAMA_8B), parse_gpus("1x80GiB"), req).best
    assert best is not None
    if expected is None:
        assert gmu(best) < 0.9
    else:
        assert gmu(best) == expected


@pytest.mark.parametrize(
    ("free", "concurrency", "fits_on", "cap"),
    [
        # GPU 0 partly held by others: a sized share goes there while it fits what is left
        ((40, 80), 8, [("box", 0)], 0.5),
        ((40, 80), 40, [("box", 1)], 0.92),  # too big for GPU 0's 40 GiB: GPU 1 serves it
        ((40, 10), 40, [("box", 0)], 0.5),  # serves nowhere: the most it can have, GPU 0
        ((20, 30), 2, [("box", 0)], 0.25),
    ],
)
def test_partly_reserved_gpus_are_plannable_with_what_is_left(free, concurrency, fits_on, cap):
    inv = box(*free)
    req = PlanRequest(concurrency=concurrency, max_model_len=8192, tensor_parallel_size=1)
    best = plan(ModelSpec.from_config(LLAMA_8B), inv, req).plans[0]
    assert best.fits
    assert [(g.host, g.index) for g in best.gpus[0]] == fits_on
    gpu = inv.hosts[0].gpus[fits_on[0][1]]
    assert gmu(best) <= cap
    # vLLM's start-up rule holds on the GPU chosen: free >= ceil(total × utilization)
    assert sharing.startup_error(gpu, gmu(best)) is None
    assert best.per_gpu[0].total_bytes <= gpu.free_bytes


def test_a_load_that_does_not_fit_gets_the_largest_share_and_says_so():
    inv = box(30)
    req = PlanRequest(concurrency=40, max_model_len=8192)
    result = plan(ModelSpec.from_config(LLAMA_8B), inv, req)
    best = result.plans[0]
    assert best.fits and best.max_concurrency < 40
    assert gmu(best) == 0.37  # floor(30 / 80, two decimals)
    lines = sharing.share_lines(best, inv, req)
    assert lines[0].startswith("40 requests of 8,192 tokens at once do not fit")


def test_without_a_load_a_partly_held_gpu_is_refused_with_vllms_start_up_error():
    result = plan(ModelSpec.from_config(LLAMA_8B), box(40), PlanRequest())
    p = result.plans[0]
    assert not p.fits
    text = " ".join(p.reasons)
    assert (
        "Free memory on device cuda:0 (40.00/80.00 GiB) on startup is less than desired GPU "
        "memory utilization (0.92, 73.60 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes." in text
    )
    assert "State the load" in text


def test_a_lower_utilization_makes_the_partly_held_gpu_plannable_without_a_load():
    result = plan(
        ModelSpec.from_config(LLAMA_8B), box(40), PlanRequest(gpu_memory_utilization=0.45)
    )
    assert result.plans[0].fits


def test_a_sized_layout_that_cannot_fit_says_which_gpu_is_held():
    req = PlanRequest(concurrency=8, max_model_len=8192, tensor_parallel_size=2)
    p = plan(ModelSpec.from_config(LLAMA_8B), box(40, 5), req).plans[0]
    assert not p.fits
    assert p.reasons[0].startswith("GPU 1 has 5 GiB of 80 GiB free (other deployments hold")
    assert "--gpu-memory-utilization 0.06" in p.reasons[0]


def test_a_gpu_with_almost_nothing_free_is_not_used():
    req = PlanRequest(concurrency=1, max_model_len=2048)
    result = plan(ModelSpec.from_config(LLAMA_8B), box(0.5, 80), req)
    assert [g.index for g in result.plans[0].gpus[0]] == [1]


@pytest.mark.parametrize(
    ("free_bytes", "total_bytes", "expected"),
    [
        (40 * GIB, 80 * GIB, 0.5),
        (math.ceil(0.57 * 80 * GIB), 80 * GIB, 0.57),
        (math.ceil(0.57 * 80 * GIB) - 1, 80 * GIB, 0.56),  # one byte short of 0.57
        (80 * GIB, 80 * GIB, 1.0),
        (GIB // 200, 80 * GIB, 0.0),
    ],
)
def test_largest_share_passes_vllms_rounding(free_bytes, total_bytes, expected):
    gpu = Gpu(0, "H100", total_bytes, free_bytes)
    share = sharing.largest_share([gpu])
    assert share == expected
    if share > 0:
        assert sharing.requested_bytes(total_bytes, share) <= free_bytes


def test_share_lines_say_what_stays_free():
    inv = box(60)
    req = PlanRequest(concurrency=4, max_model_len=4096)
    best = plan(ModelSpec.from_config(LLAMA_8B), inv, req).best
    assert best is not None
    lines = sharing.share_lines(best, inv, req)
    assert lines[0].startswith("Sized for 4 requests of 4,096 tokens at once, with a 10% margin")
    reserved = best.per_gpu[0].total_bytes
    left = (60 * GIB - reserved) / GIB
    assert lines[1] == (
        f"Reserves {reserved / GIB:.1f} GiB of GPU 0 (80 GiB), where 20 GiB is already held by "
        f"other deployments; {left:.1f} GiB stays free for other deployments."
    )


def test_many_identical_gpus_are_still_judged_once_per_kind():
    # a fleet of idle GPUs must not multiply the sizing work
    req = PlanRequest(concurrency=8, max_model_len=8192)
    result = plan(ModelSpec.from_config(LLAMA_8B), parse_gpus("16x8x80GiB@nvlink"), req)
    assert result.best is not None and not result.cut_short
    assert result.best.replicas == 128
