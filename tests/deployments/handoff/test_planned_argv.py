"""Golden `vllm serve` commands of plans, rendered by the vLLM adapter from the plan's snapshot:
a Hub revision is pinned with --revision."""

from __future__ import annotations

import json

import pytest

from deployments import planning
from deployments.catalog import plan_cli
from tests.support.hubstub.repos import FIXTURES

CONFIGS = FIXTURES / "configs"
QWEN = "Qwen/Qwen2.5-7B-Instruct"


def qwen_spec() -> planning.ModelSpec:
    config = json.loads((CONFIGS / "Qwen__Qwen2.5-7B-Instruct.json").read_text())
    return planning.ModelSpec.from_config(config, name=QWEN)


@pytest.mark.parametrize(
    ("revision", "expected"),
    [
        (
            "",
            "vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 1 "
            "--pipeline-parallel-size 1 --gpu-memory-utilization 0.92 --max-model-len 8192 "
            "--max-num-seqs 1024",
        ),
        (
            "a09a35458c702b33eeacc393d103063234e8bc28",
            "vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 1 "
            "--pipeline-parallel-size 1 --revision a09a35458c702b33eeacc393d103063234e8bc28 "
            "--gpu-memory-utilization 0.92 --max-model-len 8192 "
            "--max-num-seqs 1024",
        ),
        (
            "v1.1",
            "vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 1 "
            "--pipeline-parallel-size 1 --revision v1.1 --gpu-memory-utilization 0.92 "
            "--max-model-len 8192 "
            "--max-num-seqs 1024",
        ),
    ],
)
def test_golden_serve_command(revision: str, expected: str) -> None:
    request = planning.PlanRequest(
        model=QWEN, revision=revision, tensor_parallel_size=1, max_model_len=8192
    )
    result = planning.plan(qwen_spec(), planning.parse_gpus("1x80GiB"), request)
    assert result.best is not None
    assert " ".join(plan_cli.planned_argv(result.best, request)) == expected
