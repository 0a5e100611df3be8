"""The sample of real vLLM start-ups in shared/planner-cases, within the issue's targets."""

import pytest

from deployments.catalog.case_format import read_cases
from tests.support.planning import CASES


def rows() -> list[dict]:
    return read_cases(CASES) if (CASES / "cases.tsv").exists() else []


@pytest.mark.parametrize("row", rows(), ids=lambda r: r["obs_id"])
def test_case(row):
    from bench.planner_accuracy import predict

    best = predict(row, CASES / "models")
    fits = bool(best and best["fits"])
    assert fits == (row["expect_status"] == "ok")
    if fits:
        gpu = best["per_gpu"][0]
        assert gpu["weights_bytes"] / 2**30 == pytest.approx(float(row["weights_gib"]), rel=0.005)
        assert best["kv_cache_tokens"] == pytest.approx(int(row["kv_tokens"]), rel=0.01)
        assert gpu["kv_cache_bytes"] / 2**30 == pytest.approx(float(row["kv_gib"]), abs=0.25)
