"""The real llama-server (built by scripts/llama.sh) on GGUF models the tests write: it serves
the demo model as transformers does, and its own memory lines are what the planner says.

Skipped only where no llama-server was built (a developer box that skipped it); `make test`
builds it first, so CI runs these.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from deployments.catalog.gguf_read import local_gguf_spec
from deployments.catalog.gguf_write import LlamaShape, convert_demo, write_random_llama
from deployments.planning.memory.llamacpp import (
    LlamaCppSettings,
    cache_type_errors,
    device_memory,
)
from tests.support.llama_server import llama_server, run_until_exit, server_binary

MIB = 1 << 20
BINARY = server_binary()
pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(BINARY is None, reason="no llama-server built here (scripts/llama.sh)"),
]


@pytest.fixture(scope="module")
def demo_gguf(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_demo(tiny_model, tmp_path_factory.mktemp("gguf") / "demo-F32.gguf", quant="F32")


def _flags(settings: LlamaCppSettings) -> list[str]:
    return [
        "-c", str(settings.context_tokens), "-np", str(settings.slots), "--kv-unified",
        "-ctk", settings.cache_type_k, "-ctv", settings.cache_type_v,
        "-fa", "on" if settings.flash_attn else "off", "-ngl", "0", "--fit", "off",
        "--cache-ram", "0", "--metrics",
    ]  # fmt: skip


def test_demo_gguf_tokenizes_and_answers_like_transformers(
    demo_gguf: Path, tiny_model: Path, tmp_path: Path
):
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(tiny_model)("1 + 1 =")["input_ids"]
    assert BINARY is not None
    with llama_server(BINARY, demo_gguf, _flags(LlamaCppSettings(512, 2)), tmp_path) as server:
        tokens = httpx.post(f"{server.url}/tokenize", json={"content": "1 + 1 ="}, timeout=10)
        assert tokens.json()["tokens"] == expected
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            # ignore_eos: the random demo model samples its end-of-text token now and then
            json={
                "messages": [{"role": "user", "content": "1 + 1 ="}],
                "max_tokens": 4,
                "ignore_eos": True,
            },
            timeout=30,
        ).json()
        assert reply["usage"]["completion_tokens"] == 4
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
        assert "llamacpp:tokens_predicted_total 4" in metrics


def test_kv_and_weights_lines_equal_the_planner(demo_gguf: Path, tmp_path: Path):
    settings = LlamaCppSettings(context_tokens=4096, slots=4)
    cpu = device_memory(local_gguf_spec(demo_gguf), settings, gpu_layers=0, splits=[])[0]
    assert BINARY is not None
    with llama_server(BINARY, demo_gguf, _flags(settings), tmp_path) as server:
        logged = server.buffers()
    # 4,096 cells × 2 layers × K and V × 1 KV head × 64 × 2 bytes (f16)
    assert logged[("CPU", "KV")] == round(cpu.kv_bytes / MIB, 2) == 2.00
    weights = sum(mib for (_, kind), mib in logged.items() if kind == "model")
    assert round(weights, 2) == round(cpu.weights_bytes / MIB, 2)


def test_quantized_kv_on_head_dim_16_is_refused_as_the_planner_says(tmp_path: Path):
    head_dim_16 = write_random_llama(tmp_path / "hd16.gguf", LlamaShape(hidden=64, heads=4))
    settings = LlamaCppSettings(512, 1, "q8_0", "q8_0")
    reasons = cache_type_errors(local_gguf_spec(head_dim_16), settings)
    assert BINARY is not None
    status, output = run_until_exit(BINARY, head_dim_16, _flags(settings))
    assert status != 0
    assert "does not divide n_embd_head_k=16" in output
    assert reasons and "head dimension 16" in reasons[0]
