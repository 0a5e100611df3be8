"""The planner against llama-server's own start-up lines, recorded on this machine's CPU by
``bench/gguf_accuracy.py --record`` (fixtures/llamacpp_cases.json): no binary needed here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments.catalog.gguf_read import local_gguf_spec
from deployments.catalog.gguf_write import LlamaShape, convert_demo, write_random_llama
from deployments.planning.memory.llamacpp import LlamaCppSettings, device_memory

MIB = 1 << 20
CASES = Path(__file__).parent / "fixtures" / "llamacpp_cases.json"


def test_recorded_cases_still_match_the_planner(tiny_model: Path, tmp_path: Path):
    """bench/gguf_accuracy.py --record wrote llama-server's own figures; the planner must give
    the same weights, KV and output buffer on each; the compute estimate within 10 %."""
    cases = json.loads(CASES.read_text())
    assert len(cases) >= 10
    for case in cases:
        if case["model"] == "demo":
            path = convert_demo(
                tiny_model, tmp_path / f"demo-{case['quant']}.gguf", quant=case["quant"]
            )
        else:
            shape = LlamaShape(**case["model"])
            path = write_random_llama(tmp_path / f"{case['name']}.gguf", shape, quant=case["quant"])
        settings = LlamaCppSettings(**case["settings"])
        cpu = device_memory(local_gguf_spec(path), settings, gpu_layers=0, splits=[])[0]
        logged = case["logged_mib"]
        assert round(cpu.kv_bytes / MIB, 2) == logged["KV"], case["name"]
        if not case["repacked"]:  # see bench/gguf_accuracy.py: CPU_REPACK's double count
            assert round(cpu.weights_bytes / MIB, 2) == logged["model"], case["name"]
        assert abs(cpu.compute_bytes / MIB - logged["compute"]) <= 0.1 * logged["compute"]
        assert round(cpu.output_buffer_bytes / MIB, 2) == logged["output"], case["name"]


def test_planner_accuracy_reports_the_gguf_cases(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/planner_accuracy.py's llama.cpp section: every recorded start-up re-planned, the
    exact kinds counted, the compute buffer's error stated."""
    from bench.planner_accuracy import evaluate_gguf

    assert evaluate_gguf(live=False)
    out = capsys.readouterr().out
    assert "llama.cpp GGUF cases (19;" in out
    assert "KV       19/19 exact" in out and "model    18/19 exact (1 repacked)" in out
    assert "compute  " in out and "weights and KV exact on every case held to them" in out
