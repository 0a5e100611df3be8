"""Starts of the real CPU vLLM (0.32) on shape-true tiny models of every family, recorded by
bench/kv_groundtruth.py (fixtures/cpu_cases): the planner's KV tokens and concurrency equal
what vLLM logged, and it refuses what vLLM refused. vLLM sizes the KV cache in code every
platform shares, so these check the rules a GPU plan uses too. No vLLM needed here."""

from __future__ import annotations

import pytest

from deployments.catalog.case_format import read_cases
from tests.support.planning import FIXTURE_CONFIGS

CASES = FIXTURE_CONFIGS / "cpu_cases"


def params() -> list:
    return [pytest.param(row, id=row["obs_id"]) for row in read_cases(CASES)]


def test_the_cases_cover_the_families() -> None:
    rows = read_cases(CASES)
    started = [r for r in rows if r["expect_status"] == "ok"]
    families = {r["note"].split(":")[0] for r in started}
    assert len(rows) >= 20 and len(families) >= 5, families


@pytest.mark.parametrize("row", params())
def test_cpu_case(row: dict[str, str]) -> None:
    from bench.planner_accuracy import predict

    best = predict(row, CASES / "models")
    fits = bool(best and best["fits"])
    assert fits == (row["expect_status"] == "ok"), best and best["reasons"]
    if not fits:
        return
    assert best["kv_cache_tokens"] == int(row["kv_tokens"])
    assert best["max_concurrency"] == pytest.approx(float(row["concurrency"]), abs=0.005)


def grouped() -> list:
    return [
        pytest.param(row, id=row["obs_id"])
        for row in read_cases(CASES)
        if row["expect_status"] == "ok" and row["block_sizes"]
    ]


@pytest.mark.parametrize("row", grouped())
def test_cpu_case_groups_and_padding(row: dict[str, str]) -> None:
    """The KV-cache groups vLLM logged ("kv cache group sizes"), each group's block size, and
    the Mamba page padding ("Padding mamba page size by X%") of the planner's layout."""
    from bench.planner_accuracy import CASE_CPU_ISA
    from deployments.catalog.plan_cli import load_model
    from deployments.planning import Cpu, PlanRequest
    from deployments.planning.memory.settings import settings_kv
    from deployments.planning.search.cpu import resolve_cpu

    spec = load_model(str(CASES / "models" / row["model"]))
    cpu = Cpu("case CPU", cores=2, total_bytes=24 << 30, free_bytes=24 << 30, isa=CASE_CPU_ISA)
    request = PlanRequest(device="cpu", max_model_len=int(row["max_model_len"]),
                          vllm_version=row["vllm_version"])  # fmt: skip
    s = resolve_cpu(spec, request, cpu, 1)
    kv = settings_kv(spec, s, tp=1, pp=1, stage=0)
    logged = sorted(int(b) for b in row["block_sizes"].split(","))
    assert sorted(g.block_size for g in kv.group_specs) == logged
    if row["mamba_padding_percent"]:
        plan = spec.layer_plan
        assert plan is not None and plan.state is not None
        rules = s.kv_rules
        state = plan.state.bytes_per_sequence(
            1,
            rules.state_dtype_bytes,
            default_ssm_bytes=rules.default_ssm_bytes,
            forced_ssm_bytes=rules.forced_ssm_bytes,
        )
        padding = 100 * (kv.page_bytes - state) / state
        assert padding == pytest.approx(float(row["mamba_padding_percent"]), abs=0.005)
