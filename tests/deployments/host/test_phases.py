"""The phase parser on recorded start-up logs of vLLM 0.33 and transformers 5.23."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.engines.phases import PhaseTracker, Step, read_line
from deployments.host.logship.cleaning import Masker, clean_line

LOGS = Path(__file__).parent / "startup_logs"


def _steps(name: str) -> list[Step]:
    tracker = PhaseTracker()
    # As the host worker ships them: a redrawn progress bar keeps its last state.
    lines = [clean_line(raw, Masker()) for raw in (LOGS / name).read_bytes().split(b"\n")]
    return [step for line in lines if (step := tracker.feed(line)) is not None]


def test_vllm_start_goes_through_every_step_in_order() -> None:
    steps = _steps("vllm_0_33_tp2.log")
    assert [s.phase for s in steps] == [
        "loading",
        *["loading"] * 5,  # the shard bar: 0/4 … 4/4
        "profiling",
        "cuda_graphs",
        *["cuda_graphs"] * 3,
        "warming_up",
    ]
    shards = [(s.done, s.total) for s in steps if s.phase == "loading" and s.total]
    assert shards == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    graphs = [(s.done, s.total) for s in steps if s.phase == "cuda_graphs" and s.total]
    assert graphs == [(0, 67), (35, 67), (67, 67), (35, 35)]


def test_vllm_cpu_start_recorded_here() -> None:
    steps = _steps("vllm_0_32_cpu.log")  # no CUDA graphs on the CPU; eager: no compile either
    assert [(s.phase, s.done, s.total) for s in steps] == [
        ("loading", 0, 0),
        ("loading", 0, 1),
        ("loading", 1, 1),
        ("profiling", 0, 0),
        ("warming_up", 0, 0),
    ]


def test_transformers_serve_start() -> None:
    steps = _steps("transformers_5_23_cpu.log")
    assert [s.phase for s in steps] == ["loading", "loading", "warming_up"]
    assert (steps[1].done, steps[1].total) == (20, 20)  # the redrawn bar's last state


def test_steps_never_go_back() -> None:
    tracker = PhaseTracker()
    assert tracker.feed("Capturing CUDA graphs (decode, FULL):  10%|#| 1/10 [00:00<00:01]")
    late = "(Worker_TP1 pid=9) INFO 12-04 13:02:34 [gpu_model_runner.py:5089] Model loading took 7.5 GiB memory and 5.4 seconds"
    assert tracker.feed(late) is None
    assert tracker.current == "cuda_graphs"


@pytest.mark.parametrize(
    "line",
    [
        "(APIServer pid=1) INFO 12-04 13:03:06 [api_server.py:1015] Supported tasks: ['generate']",
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s",
        "INFO:     Started server process [41021]",
        "(EngineCore pid=4) INFO 12-04 13:02:57 [kv_cache_utils.py:1136] GPU KV cache size: 8 tokens",
    ],
)
def test_lines_of_no_step(line: str) -> None:
    assert read_line(line) is None


def test_llama_server_start() -> None:
    steps = _steps("llamacpp_b11434_cpu.log")
    assert [s.phase for s in steps] == ["loading", "profiling", "warming_up"]
