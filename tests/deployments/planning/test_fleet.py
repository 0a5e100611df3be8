"""Fleets: inventories of many hosts, their --gpus grammar, the search's time budget, and
model configs too large to be real."""

import itertools

import pytest

from deployments.planning import (
    InventorySpecError,
    ModelSpec,
    ModelSpecError,
    PlanningError,
    PlanRequest,
    parse_gpus,
    plan,
)
from tests.support.planning import LLAMA_8B, LLAMA_70B

GIB = 2**30
SPEC_70B = ModelSpec.from_config(LLAMA_70B)


@pytest.mark.parametrize(
    ("spec", "names", "per_host", "sizes_gib", "link"),
    [
        ("4x80GiB", ["what-if"], [4], [80], "NV18"),
        ("1x4x80GiB@pcie", ["what-if"], [4], [80], "PXB"),
        ("2x8x80GiB", ["what-if-1", "what-if-2"], [8, 8], [80, 80], "NV18"),
        (
            "2x8x80GiB@nvlink, 1x4x48GiB@pcie",
            ["what-if-1", "what-if-2", "what-if-3"],
            [8, 8, 4],
            [80, 80, 48],
            "NV18",
        ),
        ("4x80GiB,2x24GiB@sys", ["what-if-1", "what-if-2"], [4, 2], [80, 24], "NV18"),
        (
            "16x8x80GiB@nvlink,4x4x48GiB@pcie",
            [f"what-if-{i}" for i in range(1, 21)],
            None,
            None,
            None,
        ),
    ],
)
def test_parse_fleet(spec, names, per_host, sizes_gib, link):
    inv = parse_gpus(spec, host="what-if")
    assert [h.name for h in inv.hosts] == names
    if per_host is not None:
        assert [len(h.gpus) for h in inv.hosts] == per_host
        assert [h.gpus[0].total_bytes for h in inv.hosts] == [s * GIB for s in sizes_gib]
        assert inv.hosts[0].link(0, 1) == link
    assert all(not g.busy and g.free_bytes == g.total_bytes for h in inv.hosts for g in h.gpus)


def test_fleet_sizes_and_kinds():
    inv = parse_gpus("16x8x80GiB@nvlink,4x4x48GiB@pcie")
    assert inv.gpu_count == 16 * 8 + 4 * 4
    assert {h.gpus[0].name for h in inv.hosts} == {"GPU 80GiB", "GPU 48GiB"}
    assert inv.hosts[-1].link(0, 3) == "PXB"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("0x80GiB", "at least one GPU"),
        ("0x8x80GiB", "at least one GPU"),
        ("4x0x80GiB", "at least one GPU"),
        ("65x80GiB", "at most 64"),
        ("2x128x80GiB", "at most 64"),
        ("65x64x80GiB", "at most 4,096"),
        ("4000x8x80GiB,1x8x80GiB", "at most 4,096"),
        ("9" * 40 + "x80GiB", "unreadable"),
        ("4x80GiB@wifi", "unknown link 'wifi'"),
        ("2x8x80GiB@infiniband", "unknown link"),
        ("4x80furlongs", "unknown unit"),
        ("4x0GiB", "at most 16 TiB"),
        ("4x17TiB", "at most 16 TiB"),
        ("4x80GiB,", "unreadable"),
        ("4x80GiB;2x8x80GiB", "unreadable"),
        ("2x2x2x80GiB", "unreadable"),
    ],
)
def test_parse_fleet_rejects(bad, says):
    with pytest.raises(InventorySpecError, match=says.replace("'", ".")):
        parse_gpus(bad)


def test_each_rank_says_its_host_and_tp_stays_inside_one():
    inv = parse_gpus("2x8x80GiB@nvlink,2x4x48GiB@pcie", host="what-if")
    best = plan(SPEC_70B, inv, PlanRequest()).best
    assert best is not None and best.pipeline_parallel_size == 1
    used = [g for replica in best.gpus for g in replica]
    assert len(set(used)) == len(used)  # replicas never share a GPU
    for replica in best.gpus:
        assert len({g.host for g in replica}) == 1
    assert {g.host for g in used} <= {h.name for h in inv.hosts}
    assert best.gpus[0][0].host == "what-if-1"  # the NVLink hosts first, in spec order


@pytest.mark.parametrize(
    ("gpus", "tp", "pp", "hosts"),
    [
        ("2x8x80GiB", 8, 2, ["what-if-1", "what-if-2"]),
        ("4x2x80GiB", 2, 4, ["what-if-1", "what-if-2", "what-if-3", "what-if-4"]),
    ],
)
def test_pipeline_stages_across_hosts_name_each_stage_host(gpus, tp, pp, hosts):
    req = PlanRequest(model="m", tensor_parallel_size=tp, pipeline_parallel_size=pp)
    first = plan(SPEC_70B, parse_gpus(gpus, host="what-if"), req).plans[0]
    assert (first.tensor_parallel_size, first.pipeline_parallel_size, first.fits) == (tp, pp, True)
    assert first.multi_host and any("Ray" in w for w in first.warnings)
    stage_hosts = [first.gpus[0][s * tp].host for s in range(pp)]
    assert stage_hosts == hosts


def test_mixed_kinds_prefer_the_gpus_that_serve():
    inv = parse_gpus("1x8x24GiB@pcie,1x8x80GiB@nvlink", host="what-if")
    best = plan(SPEC_70B, inv, PlanRequest()).best
    assert best is not None and best.link_rank == 0
    assert {g.host for g in best.gpus[0]} == {"what-if-2"}


def test_a_large_fleet_tries_few_layouts_and_scales_the_replicas():
    small = plan(SPEC_70B, parse_gpus("2x8x80GiB"), PlanRequest()).best
    large = plan(SPEC_70B, parse_gpus("128x8x80GiB"), PlanRequest())
    assert small is not None and large.best is not None
    assert large.best.label == small.label
    assert large.best.replicas == 64 * small.replicas
    assert len(large.plans) < 40 and not large.cut_short and large.note == ""


class FakeClock:
    """One tick per reading: the deadline in ticks is how many checks the search gets."""

    def __init__(self) -> None:
        self.ticks = itertools.count()

    def __call__(self) -> float:
        return float(next(self.ticks))


@pytest.mark.parametrize(
    ("deadline", "cut", "plans_at_most"),
    [(0.0, True, 0), (1.0, True, 1), (3.0, True, 3), (10_000.0, False, None)],
)
def test_deadline_returns_what_was_found(deadline, cut, plans_at_most):
    inv = parse_gpus("4x8x80GiB")
    full = plan(SPEC_70B, inv, PlanRequest())
    result = plan(SPEC_70B, inv, PlanRequest(), clock=FakeClock(), deadline=deadline)
    assert result.cut_short is cut
    assert result.note.startswith("search cut short") is cut
    if plans_at_most is not None:
        assert len(result.plans) == plans_at_most
    labels = {p.label for p in full.plans}
    assert {p.label for p in result.plans} <= labels
    if not cut:
        assert [p.label for p in result.plans] == [p.label for p in full.plans]


def test_cut_short_plans_are_ranked_and_the_cheapest_layouts_come_first():
    result = plan(SPEC_70B, parse_gpus("8x8x80GiB"), PlanRequest(), clock=FakeClock(), deadline=8)
    assert result.cut_short and len(result.plans) == 8
    assert {p.pipeline_parallel_size for p in result.plans} == {1}  # one stage for every TP first
    assert result.best is not None and result.best.label == "TP 4 × PP 1"
    assert "8 layouts tried" in result.note


def test_a_forced_layout_is_tried_first_under_a_deadline():
    req = PlanRequest(tensor_parallel_size=2, pipeline_parallel_size=2)
    result = plan(SPEC_70B, parse_gpus("2x8x80GiB"), req, clock=FakeClock(), deadline=1)
    assert [p.label for p in result.plans] == ["TP 2 × PP 2"]


@pytest.mark.parametrize(("clock", "deadline"), [(FakeClock(), None), (None, 1.0)])
def test_clock_and_deadline_come_together(clock, deadline):
    with pytest.raises(PlanningError, match="together"):
        plan(SPEC_70B, parse_gpus("1x80GiB"), PlanRequest(), clock=clock, deadline=deadline)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("num_hidden_layers", 10**9, "num_hidden_layers"),
        ("hidden_size", 2**21, "hidden_size"),
        ("num_attention_heads", 2**17, "num_attention_heads"),
        ("num_key_value_heads", 2**17, "num_key_value_heads"),
        ("intermediate_size", 2**25, "intermediate_size"),
        ("vocab_size", 10**9, "vocab_size"),
        ("max_position_embeddings", 10**12, "context"),
        ("max_position_embeddings", float("inf"), "context"),
        ("max_position_embeddings", float("nan"), "context"),
        ("num_local_experts", 10**7, "num_experts"),
    ],
)
def test_absurd_model_dimensions_are_refused(field, value, says):
    config = {**LLAMA_70B, field: value}
    if field in ("num_attention_heads", "num_key_value_heads"):
        config["head_dim"] = 128
    with pytest.raises(ModelSpecError, match=says):
        ModelSpec.from_config(config)


def test_the_largest_real_dimensions_still_plan():
    config = {**LLAMA_8B, "num_hidden_layers": 10_000, "max_position_embeddings": 10_485_760}
    spec = ModelSpec.from_config(config)
    assert spec.num_layers == 10_000
    result = plan(spec, parse_gpus("1x80GiB"), PlanRequest(), clock=FakeClock(), deadline=50)
    assert result.plans and result.best is None
