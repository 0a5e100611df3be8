"""The sample of real vLLM start-ups in shared/planner-cases, within the issue's targets."""

import csv

import pytest

from tests.support.planning import CASES


def rows() -> list[dict]:
    path = CASES / "cases.tsv"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


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
