"""Replicas of a layout: N or as many as fit, spread over hosts or packed, and why one that was
asked for could not be placed."""

from dataclasses import replace

import pytest

from deployments.planning import (
    Gpu,
    Host,
    Inventory,
    ModelSpec,
    PlanningError,
    PlanRequest,
    parse_gpus,
    plan,
)
from tests.support.planning import LLAMA_8B

GIB = 2**30
SPEC_8B = ModelSpec.from_config(LLAMA_8B)


def hosts_of(p):
    """The host of each replica (of its first rank)."""
    return [r[0].host for r in p.gpus]


# (--gpus, request) -> (TP, replicas placed, replicas asked, host of each replica)
PLACED = [
    # as many as fit (the default): every GPU, spread over the hosts in turn
    ("2x4x80GiB", {}, (1, 8, 0, ["h-1", "h-2"] * 4)),
    ("2x4x80GiB", {"placement": "packed"}, (1, 8, 0, ["h-1"] * 4 + ["h-2"] * 4)),
    # N replicas: spread takes one host after the other, packed fills a host first
    ("2x4x80GiB", {"replicas": 3}, (1, 3, 3, ["h-1", "h-2", "h-1"])),
    ("2x4x80GiB", {"replicas": 3, "placement": "packed"}, (1, 3, 3, ["h-1"] * 3)),
    ("3x4x80GiB", {"replicas": 3, "tensor_parallel_size": 2}, (2, 3, 3, ["h-1", "h-2", "h-3"])),
    (
        "3x4x80GiB",
        {"replicas": 3, "tensor_parallel_size": 2, "placement": "packed"},
        (2, 3, 3, ["h-1", "h-1", "h-2"]),
    ),
    # NVLink pairs before PCIe ones, whatever the placement
    (
        "1x2x80GiB@pcie,1x2x80GiB@nvlink",
        {"replicas": 1, "tensor_parallel_size": 2},
        (2, 1, 1, ["h-2"]),
    ),
]


@pytest.mark.parametrize(("gpus", "asked", "expected"), PLACED)
def test_replicas_are_placed(gpus, asked, expected):
    first = plan(SPEC_8B, parse_gpus(gpus, host="h"), PlanRequest(**asked)).plans[0]
    tp, count, replicas_asked, hosts = expected
    assert first.fits and first.tensor_parallel_size == tp
    assert (first.replicas, first.replicas_asked, hosts_of(first)) == (count, replicas_asked, hosts)
    gpus_used = [(g.host, g.index) for r in first.gpus for g in r]
    assert len(gpus_used) == len(set(gpus_used)) == count * tp


def busy(inv: Inventory, count: int) -> Inventory:
    """The first ``count`` GPUs of the first host held by another deployment."""
    first = inv.hosts[0]
    gpus = tuple(replace(g, busy=g.index < count) for g in first.gpus)
    return Inventory((replace(first, gpus=gpus), *inv.hosts[1:]))


# (inventory, request) -> the reason of the first plan, which places fewer than asked
UNPLACEABLE = [
    (
        parse_gpus("2x4x80GiB", host="h"),
        {"replicas": 9},
        "replica 9 of 9: needs 1 GPU; no usable GPU left",
    ),
    (
        busy(parse_gpus("2x2x80GiB", host="h"), 2),
        {"replicas": 3},
        "replica 3 of 3: needs 1 GPU; no usable GPU left (2 more are in use or short of free "
        "memory)",
    ),
    (
        parse_gpus("3x3x80GiB", host="h"),
        {"replicas": 4, "tensor_parallel_size": 2},
        "replica 4 of 4: no host has 2 usable GPUs left for a tensor-parallel group (the most "
        "left on one host is 1)",
    ),
    (
        parse_gpus("3x3x80GiB", host="h"),
        {"replicas": 2, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
        "replica 2 of 2: the 5 GPUs left form only 1 tensor-parallel group(s) of 2 GPUs on one "
        "host; a replica needs 2, one per pipeline stage",
    ),
    (
        parse_gpus("1x2x80GiB,1x2x16GiB", host="h"),
        {"replicas": 3},
        "replica 3 of 3: the GPUs left (1 × GPU 16GiB on h-2, …) cannot hold it: No available "
        "memory for the cache blocks.",
    ),
]


LONG_8B = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})


def test_replicas_on_smaller_gpus_must_serve_like_the_first():
    # Every replica runs the first one's command: on 24 GiB GPUs TP 1 holds 1.1 requests of
    # 32k tokens, not the 4 asked, so it is no replica of this plan.
    inv = parse_gpus("1x2x80GiB,1x2x24GiB", host="h")
    req = PlanRequest(max_model_len=32768, concurrency=4)
    most = plan(LONG_8B, inv, req).plans[0]
    assert (most.tensor_parallel_size, most.replicas, hosts_of(most)) == (1, 2, ["h-1", "h-1"])
    three = plan(LONG_8B, inv, replace(req, replicas=3)).plans[0]
    assert three.reasons[0] == (
        "replica 3 of 3: the GPUs left (1 × GPU 24GiB on h-2, …) cannot hold it: they hold "
        "1.1 full-length requests at once, not 4"
    )


def test_replicas_on_other_gpus_are_judged_with_the_first_ones_max_num_seqs():
    # Alone, a 19 GiB GPU would get vLLM's 256 sequences and hold one 8k request; as the
    # second replica it runs the first one's --max-num-seqs 1024, and its sampler warm-up
    # leaves no KV cache.
    inv = parse_gpus("1x1x80GiB,1x1x19GiB", host="h")
    alone = plan(LONG_8B, parse_gpus("1x19GiB"), PlanRequest(max_model_len=8192)).plans[0]
    assert alone.fits and alone.engine_settings.max_num_seqs == 256
    two = plan(LONG_8B, inv, PlanRequest(max_model_len=8192, replicas=2)).plans[0]
    assert two.engine_settings.max_num_seqs == 1024
    assert two.reasons[0].startswith(
        "replica 2 of 2: the GPUs left (1 × GPU 19GiB on h-2, …) cannot hold it: No available "
        "memory for the cache blocks."
    )


def test_a_tp_size_short_of_replicas_stops_adding_stages():
    # 16 hosts of 8: TP 8 places 16 replicas of one stage, and two stages could place at most
    # 8 more: asked for 200, no TP 8 layout with more stages is tried.
    result = plan(SPEC_8B, parse_gpus("16x8x80GiB", host="h"), PlanRequest(replicas=200))
    tp8 = [p for p in result.plans if p.tensor_parallel_size == 8]
    assert [p.pipeline_parallel_size for p in tp8] == [1]
    assert tp8[0].reasons[0].startswith("replica 17 of 200: ")


@pytest.mark.parametrize(("inv", "asked", "reason"), UNPLACEABLE)
def test_a_replica_that_cannot_be_placed_says_why(inv, asked, reason):
    result = plan(SPEC_8B, inv, PlanRequest(**asked))
    first = result.plans[0]
    assert not first.fits
    assert first.reasons[0].startswith(reason)
    assert 0 < first.replicas < asked["replicas"] == first.replicas_asked
    assert len(first.gpus) == first.replicas
    if "tensor_parallel_size" in asked:  # the pinned layout leads; it says it falls short
        assert result.reason.startswith(f"{first.label}, the layout you asked for, places")
    else:
        assert result.best is None
        assert result.reason.startswith(f"No layout places {asked['replicas']} replicas")


def test_the_layout_that_places_all_replicas_wins_over_a_smaller_one():
    # TP 1 serves the request alone; four replicas of it need only four GPUs, but on two
    # hosts of two GPUs four replicas of TP 2 do not fit: TP 1 is the answer.
    result = plan(SPEC_8B, parse_gpus("2x2x80GiB", host="h"), PlanRequest(replicas=4))
    first = result.plans[0]
    assert (first.tensor_parallel_size, first.replicas, first.fits) == (1, 4, True)
    tp2 = next(p for p in result.plans if p.tensor_parallel_size == 2 and p.replicas)
    assert not tp2.fits and tp2.reasons[0].startswith("replica 3 of 4")


def test_of_the_layouts_that_fall_short_the_one_placing_more_comes_first():
    result = plan(SPEC_8B, parse_gpus("1x3x80GiB", host="h"), PlanRequest(replicas=4))
    placed = [p.replicas for p in result.plans if not p.fits]
    assert placed == sorted(placed, reverse=True) and placed[0] == 3


def test_a_first_replica_that_cannot_be_placed_says_replica_1():
    gpus = tuple(Gpu(i, "H100", 80 * GIB, 80 * GIB, busy=i == 0) for i in range(2))
    inv = Inventory((Host("h", gpus, {(0, 1): "NV18"}),))
    result = plan(SPEC_8B, inv, PlanRequest(replicas=2, tensor_parallel_size=2))
    first = result.plans[0]
    assert (first.tensor_parallel_size, first.replicas, first.fits) == (2, 0, False)
    assert first.reasons[0] == (
        "replica 1 of 2: tensor parallel size 2 needs 2 usable GPUs on one host; the most is 1"
    )


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"replicas": 0}, "replicas must be a positive whole number"),
        ({"replicas": 5000}, "replicas must be at most 4,096"),
        ({"placement": "diagonal"}, "placement must be one of spread, packed"),
    ],
)
def test_bad_replica_requests_are_refused(asked, message):
    with pytest.raises(PlanningError, match=message):
        plan(SPEC_8B, parse_gpus("2x80GiB"), PlanRequest(**asked))
