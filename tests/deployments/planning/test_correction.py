"""The correction learned per (GPU model, vLLM version) from recorded starts: which residuals
give one, its cap, and what it does to a plan (KV, the line, the margin), or not when off."""

from dataclasses import replace

import pytest

from deployments.planning import (
    Correction,
    Gpu,
    Host,
    Inventory,
    ModelSpec,
    PlanningError,
    PlanRequest,
    learn_correction,
    plan,
)
from deployments.planning.memory.correction import CAP_FRACTION, MIN_BYTES
from deployments.planning.memory.versions import profile_for
from deployments.planning.search.margin import FLOOR_BYTES, band
from tests.support.planning import LLAMA_8B

GIB = 2**30
MIB = 2**20
H100 = "NVIDIA H100 80GB HBM3"
TOTAL = round(79.19 * GIB)
SPEC = ModelSpec.from_config({**LLAMA_8B, "max_position_embeddings": 131072})


def _learn(residuals: list[int], **kw: object) -> Correction | None:
    args: dict = {"gpu_model": H100, "vllm_version": "0.19.0", "gpu_total_bytes": TOTAL}
    return learn_correction(**{**args, **kw}, residuals=residuals)


def _inventory(name: str = H100) -> Inventory:
    return Inventory((Host("h1", (Gpu(0, name, TOTAL, TOTAL),)),))


def _best(req: PlanRequest, name: str = H100):
    result = plan(SPEC, _inventory(name), replace(req, tensor_parallel_size=1))
    assert result.plans and result.plans[0].fits
    return result.plans[0]


@pytest.mark.parametrize(
    ("residuals", "why"),
    [
        ([600 * MIB, 650 * MIB], "two starts are not enough"),
        ([600 * MIB, -50 * MIB, 650 * MIB], "a mixed sign is noise"),
        ([10 * MIB, 20 * MIB, 30 * MIB], "under the floor: the planner is right there"),
    ],
)
def test_no_correction_without_a_consistent_error(residuals: list[int], why: str) -> None:
    assert _learn(residuals) is None, why


def test_the_median_of_consistent_starts_and_their_spread() -> None:
    c = _learn([500 * MIB, 900 * MIB, 600 * MIB, 550 * MIB, 3000 * MIB])
    assert c is not None
    assert c.outside_bytes == 600 * MIB and not c.capped  # one odd start does not move it
    assert c.spread_bytes == 2500 * MIB and c.starts == 5
    under = _learn([-300 * MIB, -200 * MIB, -250 * MIB])
    assert under is not None and under.outside_bytes == -250 * MIB
    assert MIN_BYTES < 200 * MIB


def test_the_cap_bounds_it_and_says_so() -> None:
    c = _learn([10 * GIB, 11 * GIB, 12 * GIB])
    assert c is not None and c.capped
    assert c.outside_bytes == round(CAP_FRACTION * TOTAL) and c.learned_bytes == 11 * GIB
    assert "(learned +11.00 GiB, capped)" in c.line()
    low = _learn([-10 * GIB, -11 * GIB, -12 * GIB])
    assert low is not None and low.outside_bytes == -round(CAP_FRACTION * TOTAL)


def test_an_unreadable_version_is_refused() -> None:
    with pytest.raises(PlanningError):
        _learn([GIB, GIB, GIB], vllm_version="nightly")


def test_a_correction_lowers_the_kv_cache_by_its_bytes_and_says_so() -> None:
    c = _learn([700 * MIB, 760 * MIB, 720 * MIB])
    assert c is not None
    base = PlanRequest(vllm_version="0.19.0")
    before = _best(base)
    after = _best(replace(base, corrections=(c,)))
    b, a = before.per_gpu[0], after.per_gpu[0]
    assert a.non_torch_bytes - b.non_torch_bytes == 720 * MIB == a.correction_bytes
    assert b.kv_cache_bytes - a.kv_cache_bytes == 720 * MIB
    assert after.kv_cache_tokens < before.kv_cache_tokens
    line = next(w for w in after.warnings if w.startswith("learned correction applied"))
    assert "0.70 GiB more memory outside PyTorch per GPU" in line
    assert f"for {H100} under vLLM 0.19.0, from 3 recorded starts" in line
    assert not any("learned correction" in w for w in before.warnings)


def test_off_per_plan_or_elsewhere_the_plan_is_unchanged() -> None:
    c = _learn([700 * MIB, 760 * MIB, 720 * MIB])
    assert c is not None
    base = PlanRequest(vllm_version="0.19.0")
    plain = _best(base)
    assert _best(replace(base, corrections=(c,), learned_correction=False)) == plain
    # another GPU model, another version: not theirs to apply
    a100 = "NVIDIA A100-SXM4-80GB"
    assert _best(replace(base, corrections=(c,)), name=a100) == _best(base, name=a100)
    v17 = replace(base, vllm_version="0.17.0")
    assert _best(replace(v17, corrections=(c,))) == _best(v17)


def test_the_margin_comes_from_the_spread() -> None:
    best = _best(PlanRequest(vllm_version="0.19.0"))
    mem = best.per_gpu[0]
    profile = profile_for("0.19.0")
    wide = _learn([600 * MIB, 1600 * MIB, 700 * MIB])
    narrow = _learn([600 * MIB, 610 * MIB, 620 * MIB])
    assert wide is not None and narrow is not None
    assert band(profile, mem, wide).kv_bytes == 1000 * MIB
    assert band(profile, mem, narrow).kv_bytes == FLOOR_BYTES  # never under the floor
    assert band(profile, mem).kv_bytes > FLOOR_BYTES  # the a-priori 0.5 % of the budget
