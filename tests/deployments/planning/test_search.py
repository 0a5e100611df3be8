"""Plan search: GPU choice, ranking, forced layouts, warnings and the command."""

import pytest

from deployments.planning import (
    Gpu,
    Host,
    Inventory,
    InventorySpecError,
    ModelSpec,
    PlanRequest,
    parse_gpus,
    plan,
)
from deployments.planning.search.engine_settings import EngineSettings
from tests.support.planning import LLAMA_8B, LLAMA_70B

GIB = 2**30


@pytest.mark.parametrize(
    ("spec", "count", "size", "link"),
    [
        ("4x80GiB", 4, 80 * GIB, "NV18"),
        ("2x79.19GiB@nvlink", 2, round(79.19 * GIB), "NV18"),
        ("8x80GiB@pcie", 8, 80 * GIB, "PXB"),
        ("1x24GB", 1, 24 * 10**9, None),
    ],
)
def test_parse_gpus(spec, count, size, link):
    inv = parse_gpus(spec)
    gpus = inv.hosts[0].gpus
    assert (len(gpus), gpus[0].total_bytes) == (count, size)
    if link:
        assert inv.hosts[0].link(0, 1) == link


@pytest.mark.parametrize("bad", ["", "x80GiB", "4x", "0x80GiB", "4x80GiB@wifi", "4x80furlongs"])
def test_parse_gpus_rejects(bad):
    with pytest.raises(InventorySpecError):
        parse_gpus(bad)


def two_islands(busy: frozenset[int] = frozenset()) -> Inventory:
    gpus = tuple(Gpu(i, "H100", 80 * GIB, 80 * GIB, busy=i in busy) for i in range(8))
    links = {
        (a, b): "NV12" if a // 4 == b // 4 else "SYS" for a in range(8) for b in range(a + 1, 8)
    }
    return Inventory((Host("box", gpus, links),))


def test_small_model_runs_on_one_gpu_with_replicas():
    result = plan(ModelSpec.from_config(LLAMA_8B), parse_gpus("4x80GiB"), PlanRequest())
    best = result.plans[0]
    assert (best.tensor_parallel_size, best.pipeline_parallel_size, best.replicas) == (1, 1, 4)
    assert best.fits


def test_tp_group_stays_inside_an_nvlink_island():
    result = plan(ModelSpec.from_config(LLAMA_70B), two_islands(frozenset({0})), PlanRequest())
    tp4 = next(
        p for p in result.plans if p.tensor_parallel_size == 4 and p.pipeline_parallel_size == 1
    )
    assert tp4.fits
    assert [g.index for g in tp4.gpus[0]] == [4, 5, 6, 7]
    assert not any("PCIe" in w or "sockets" in w for w in tp4.warnings)


def test_busy_gpus_are_never_used():
    result = plan(ModelSpec.from_config(LLAMA_8B), two_islands(frozenset({0, 1, 2})), PlanRequest())
    used = {g.index for p in result.plans for r in p.gpus for g in r}
    assert used.isdisjoint({0, 1, 2})


def test_forced_layout_comes_first_even_when_it_does_not_fit():
    req = PlanRequest(tensor_parallel_size=1)
    first = plan(ModelSpec.from_config(LLAMA_70B), parse_gpus("4x80GiB"), req).plans[0]
    assert (first.tensor_parallel_size, first.pipeline_parallel_size, first.fits) == (1, 1, False)
    assert first.reasons


def test_rejected_layouts_carry_reasons():
    result = plan(ModelSpec.from_config(LLAMA_8B), parse_gpus("6x80GiB"), PlanRequest())
    tp3 = next(p for p in result.plans if p.tensor_parallel_size == 3)
    assert not tp3.fits and "divisible by tensor parallel size (3)" in tp3.reasons[0]


def test_pcie_tp_warns():
    result = plan(ModelSpec.from_config(LLAMA_70B), parse_gpus("4x80GiB@pcie"), PlanRequest())
    best = result.best
    assert best is not None and best.tensor_parallel_size == 1  # PP beats TP over PCIe
    tp2 = next(
        p for p in result.plans if (p.tensor_parallel_size, p.pipeline_parallel_size) == (2, 1)
    )
    assert tp2.fits and any("PCIe" in w for w in tp2.warnings)


def test_pp_across_hosts_uses_ray():
    host = lambda name: Host(name, (Gpu(0, "A10", 24 * GIB, 24 * GIB),), {})  # noqa: E731
    inv = Inventory((host("a"), host("b")))
    req = PlanRequest(model="m", pipeline_parallel_size=2, max_model_len=2048)
    first = plan(ModelSpec.from_config(LLAMA_8B), inv, req).plans[0]
    assert first.pipeline_parallel_size == 2 and first.multi_host
    assert any("Ray" in w for w in first.warnings)


def test_engine_settings_resolved_and_asked():
    req = PlanRequest(model="org/m", kv_cache_dtype="fp8", max_model_len=4096, dtype="bfloat16")
    best = plan(ModelSpec.from_config(LLAMA_8B), parse_gpus("1x80GiB"), req).plans[0]
    assert best.engine_settings == EngineSettings(
        gpu_memory_utilization=0.92, max_num_seqs=1024, dtype="bfloat16", kv_cache_dtype="fp8"
    )
