"""The figures an engine start printed, read by the same parser the host's launch recorder
uses (deployments.engines.startup_figures), from recorded and reference-written logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.engines.startup_figures import (
    GIB,
    StartFigures,
    llamacpp_figures,
    read_line,
    read_lines,
)

LOGS = Path(__file__).parent / "startup_logs"


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def test_vllm_0_33_start_up_lines_give_every_figure() -> None:
    f = read_lines(_lines("vllm_0_33_tp2.log"))
    assert f == StartFigures(
        engine_version="0.33.0",
        weights_bytes=round(7.52 * GIB),
        kv_bytes=round(53.61 * GIB),
        kv_tokens=878_320,
        cuda_graph_bytes=round(0.62 * GIB),
    )
    assert f.any


def test_vllm_cpu_start_recorded_here_gives_its_kv_space_and_tokens() -> None:
    f = read_lines(_lines("vllm_0_32_cpu.log"))  # --kv-cache-memory-bytes 134217728
    assert f == StartFigures(engine_version="0.32.0", kv_bytes=round(0.12 * GIB), kv_tokens=262_144)


def test_a_start_refused_for_kv_memory_says_why() -> None:
    f = read_lines(_lines("vllm_0_33_kv_refused.log"))
    assert f.weights_bytes == round(64.39 * GIB) and f.kv_bytes == round(3.02 * GIB)
    assert f.kv_tokens is None and f.cuda_graph_bytes is None
    assert "To serve at least one request" in f.failure


def test_transformers_serve_gives_the_tensors_it_loaded() -> None:
    f = read_lines(_lines("transformers_5_23_cpu.log"))
    assert f.weight_tensors == 20
    assert f.weights_bytes is None and f.kv_tokens is None and f.engine_version == ""


def test_llama_server_buffers_go_through_llamacpp_memory() -> None:
    lines = _lines("llamacpp_b11434_cpu.log")
    f = llamacpp_figures("\n".join(lines), read_lines(lines))
    assert f.engine_version == "b11434"
    assert f.weights_bytes == round(0.41 * 1024 * 1024)
    assert f.kv_bytes == round(0.12 * 1024 * 1024)
    gpu = "load_tensors: CUDA0 model buffer size = 4403.49 MiB\nllama_kv_cache: CUDA0 KV buffer size = 512.00 MiB"
    assert llamacpp_figures(gpu, StartFigures()).kv_bytes == 512 * 1024 * 1024


@pytest.mark.parametrize(
    "second",
    [
        "(Worker_TP1 pid=2) INFO 12-04 13:02:34 [gpu_model_runner.py:5089] Model loading took 9.99 GiB memory and 5.4 seconds",
        "(EngineCore pid=3) INFO 12-04 13:02:57 [kv_cache_utils.py:1136] GPU KV cache size: 1 tokens",
    ],
)
def test_the_first_figure_wins(second: str) -> None:
    f = read_lines(_lines("vllm_0_33_tp2.log"))
    assert read_line(f, second) is f
