"""Tight fits: layouts that fit by the prediction but within its error band of a limit vLLM
enforces are marked so, with the figures, and rank below a comfortable fit."""

import csv
import re

import pytest

from deployments.planning import (
    Gpu,
    GpuMemory,
    Host,
    Inventory,
    ModelSpec,
    PlanRequest,
    parse_gpus,
    plan,
    resolve,
)
from deployments.planning.search.margin import band
from tests.support.planning import CASES, LLAMA_8B, case_config, fixture_config

GIB = 2**30
MIB = 2**20
SPEC_8B = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})
FP8_70B = "RedHatAI__Llama-3.3-70B-Instruct-FP8-dynamic"

# (request, --gpus) -> a pattern of the first plan's tight reason, or None when comfortable
TIGHT = [
    ({}, "1x80GiB", None),
    ({"max_model_len": 110_000, "concurrency": 4}, "1x80GiB", None),
    (
        {"max_model_len": 114_000, "concurrency": 4},
        "1x80GiB",
        r"needs 55\.6\d GiB of KV cache for 4 requests of 114,000 tokens; predicted 55\.9\d "
        r"± 0\.6\d GiB; a context of 11[23],\d{3} tokens would leave that margin",
    ),
    # before 0.21 the CUDA graphs come on top of the budget: 1.2 GiB beyond it is too little
    (
        {"gpu_memory_utilization": 0.985, "vllm_version": "0.19.0"},
        "1x80GiB",
        r"leaves 0\.6\d GiB of a 80\.00 GiB GPU free after the 78\.80 GiB budget and 0\.\d\d GiB "
        r"of CUDA graphs, which vLLM 0\.19\.0 captures outside gpu_memory_utilization",
    ),
    # from 0.21 vLLM takes its graphs from the budget: the same 1.2 GiB is plenty
    ({"gpu_memory_utilization": 0.985, "vllm_version": "0.33.0"}, "1x80GiB", None),
    (
        {"gpu_memory_utilization": 1.0},
        "1x80GiB",
        r"leaves 0\.00 GiB of a 80\.00 GiB GPU outside gpu_memory_utilization 1; the planner's "
        r"margin is 0\.40 GiB",
    ),
]


@pytest.mark.parametrize(("asked", "gpus", "pattern"), TIGHT)
def test_tight_fits_say_why(asked, gpus, pattern):
    first = plan(SPEC_8B, parse_gpus(gpus), PlanRequest(**asked)).plans[0]
    assert first.fits
    if pattern is None:
        assert not first.tight and first.tight_reasons == ()
    else:
        assert first.tight and len(first.tight_reasons) == 1
        assert re.fullmatch(pattern + ".*", first.tight_reasons[0]), first.tight_reasons[0]


def test_a_clipped_context_is_tight_and_says_what_would_leave_the_margin():
    spec = ModelSpec.from_config(case_config(FP8_70B))
    first = plan(spec, parse_gpus("1x80GiB"), PlanRequest()).plans[0]
    assert first.context_clipped and first.tight
    text = first.tight_reasons[0]
    assert text.startswith("needs 2.25 GiB of KV cache for one 7,376-token request; predicted")
    shorter = int(re.search(r"a context of ([\d,]+) tokens", text)[1].replace(",", ""))
    assert 0 < shorter < 7376 and shorter % 16 == 0


def partly_used(free_above_budget: int) -> Inventory:
    """One 80 GiB GPU that another process holds memory on."""
    budget = round(80 * GIB * 0.92)
    gpu = Gpu(0, "H100", 80 * GIB, budget + free_above_budget)
    return Inventory((Host("h", (gpu,), {}),))


def test_a_gpu_in_use_with_just_the_budget_free_is_tight():
    first = plan(SPEC_8B, partly_used(100 * MIB), PlanRequest(max_model_len=8192)).plans[0]
    assert first.fits and first.tight
    assert first.tight_reasons == (
        "vLLM checks at start that 73.60 GiB (0.92 × 80.00 GiB) are free on GPU h:0; it has "
        "73.70 GiB free, within the planner's margin of 0.37 GiB",
    )
    roomy = plan(SPEC_8B, partly_used(3 * GIB), PlanRequest(max_model_len=8192)).plans[0]
    assert roomy.fits and not roomy.tight


def test_a_tight_fit_ranks_below_a_comfortable_one():
    spec = ModelSpec.from_config(case_config(FP8_70B))
    gpus = parse_gpus("2x80GiB")
    # One request of 3,984 tokens leaves the margin on one GPU: the fewest GPUs win.
    roomy = plan(spec, gpus, PlanRequest(max_model_len=3984, concurrency=1))
    assert roomy.plans[0].gpus_per_replica == 1 and not roomy.plans[0].tight
    # At 7,376 tokens one GPU holds it only within the margin: two GPUs come first.
    edge = plan(spec, gpus, PlanRequest(max_model_len=7376, concurrency=1))
    first, tight = edge.plans[0], next(p for p in edge.plans if p.tight)
    assert (first.tensor_parallel_size, first.tight) == (2, False)
    assert tight.gpus_per_replica == 1 and tight.fits
    assert edge.reason.startswith(
        "TP 2 × PP 1 fits with room to spare; TP 1 × PP 1 fits only within the planner's margin "
        "(needs 2.25 GiB of KV cache for one 7,376-token request"
    )


# (vLLM version, GPU GiB, gmu, CUDA graphs GiB) -> (± KV GiB, margin beyond the budget GiB)
BANDS = [
    ("0.19.0", 80, 0.95, 0.5, (0.38, 0.88)),  # 0.5 % of the budget; graphs outside it
    ("0.19.0", 16, 0.9, 0.5, (0.25, 0.75)),  # never under 256 MiB
    ("0.33.0", 80, 0.92, 0.5, (0.618, 0.368)),  # graphs inside the budget widen the KV band
    ("0.33.0", 24, 0.92, 0.0, (0.25, 0.25)),
]


@pytest.mark.parametrize(("version", "gib", "gmu", "graphs", "expected"), BANDS)
def test_band_by_version(version, gib, gmu, graphs, expected):
    req = PlanRequest(vllm_version=version, gpu_memory_utilization=gmu)
    s = resolve(SPEC_8B, req, gib * GIB, "GPU")
    mem = GpuMemory(0, 0, 0, round(graphs * GIB), 0, 0, gib * GIB, round(gib * GIB * gmu))
    got = band(s.profile, mem)
    assert (got.kv_bytes / GIB, got.outside_bytes / GIB) == pytest.approx(expected, abs=0.005)


def started_cases() -> list[dict]:
    path = CASES / "cases.tsv"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh, delimiter="\t") if r["expect_status"] == "ok"]


@pytest.mark.parametrize("row", started_cases(), ids=lambda r: r["obs_id"])
def test_real_start_ups_are_not_tight(row):
    from bench.planner_accuracy import predict

    first = predict(row, CASES / "models")
    assert first is not None and first["fits"] and first["tight"] is False


def test_a_tight_replica_counts_only_when_the_request_needs_it():
    # On the 20.5 GiB GPU one 8k request fits only within the margin. As many as fit: the first
    # replica (80 GiB) is the plan, the second is room to grow, and the plan is comfortable.
    inv = parse_gpus("1x1x80GiB,1x1x20.5GiB", host="h")
    req = PlanRequest(max_model_len=8192, concurrency=1)
    most = plan(SPEC_8B, inv, req).plans[0]
    assert (most.gpus_per_replica, most.replicas, most.tight) == (1, 2, False)
    # Two replicas asked: both are needed, and the second is tight.
    two = plan(SPEC_8B, inv, PlanRequest(max_model_len=8192, concurrency=1, replicas=2)).plans[0]
    assert (two.replicas, two.tight) == (2, True)
    assert two.tight_reasons[0].startswith(
        "replica 2: needs 1.00 GiB of KV cache for one 8,192-token request; predicted 1.27 ±"
    )


GPT_OSS_20B = ModelSpec.from_config(fixture_config("openai--gpt-oss-20b_config"))


# gpt-oss-20b on one H100 ran out of memory warming the sampler up after sizing the KV cache at
# gpu_memory_utilization 0.95 with vLLM 0.19 (vllm-memory.md §6); at 0.9 it started (TP 2).
@pytest.mark.parametrize(
    ("tp", "gmu", "version", "tight"),
    [
        (1, 0.95, "0.19.0", True),
        (1, 0.9, "0.19.0", False),
        (2, 0.9, "0.19.0", False),
        (2, 0.95, "0.19.0", True),
        (1, 0.95, "0.33.0", True),
        (1, 0.92, "0.33.0", False),
    ],
)
def test_mxfp4_sampler_warmup_after_the_kv_cache_is_a_tight_fit(tp, gmu, version, tight):
    asked = PlanRequest(
        tensor_parallel_size=tp,
        max_model_len=8192,
        gpu_memory_utilization=gmu,
        vllm_version=version,
    )
    first = plan(GPT_OSS_20B, parse_gpus("1x79.19GiB" if tp == 1 else "2x79.19GiB"), asked)
    layout = first.plans[0]
    assert layout.fits and layout.tensor_parallel_size == tp
    reasons = [r for r in layout.tight_reasons if "warms the sampler up" in r]
    assert bool(reasons) is tight, layout.tight_reasons
    if tight:
        assert re.match(
            r"vLLM warms the sampler up on 1,024 dummy requests after allocating the KV cache: "
            r"about 4\.41 GiB \(1,024 × 201,088 logits",
            reasons[0],
        )
