"""Real vLLM failures (its 0.32 CPU build) diagnosed from the engine's own lines, each started for
real through the adapter and the supervisor: refused at start (sleep mode, a max-model-len over
the model's, a KV space above the free RAM), and a model whose head size the CPU attention does
not take (it starts, then its first request ends the engine). The diagnosis reads what the host
worker reads: the log's last TAIL_LINES lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from deployments.host import supervisor as sv
from deployments.host.diagnosis import diagnose_exit
from deployments.live.enginelog import TAIL_LINES
from tests.support.vllm_engine import (
    ENGINE_TEST_TIMEOUT_S,
    cpu_spec,
    run_until_exit,
    running,
    write_llama,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.engine, pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S)]  # a start each


def _why(exit_info: sv.ExitInfo, log_path: Path) -> Any:
    return diagnose_exit(sv.tail(log_path, TAIL_LINES), exit_info.exit_code, exit_info.signal)


@pytest.mark.parametrize(
    ("overrides", "more_argv", "code", "engine_line"),
    [
        # The adapter refuses sleep mode on the CPU before a start; the flag put on the command
        # line past it reaches vLLM, which refuses it in its own words.
        (
            {},
            ("--enable-sleep-mode",),
            "sleep_mode_unsupported",
            "Sleep mode is not supported on current platform",
        ),
        (
            {"max_model_len": 1024},
            (),
            "max_model_len_above_model",
            "User-specified max_model_len (1024) is greater than the derived max_model_len "
            "(max_position_embeddings=512.0",
        ),
        (
            {"kv_cache_memory_bytes": 2 * psutil.virtual_memory().total},
            (),
            "cpu_kv_space_above_free_ram",
            "on kv cache allocation is less than requested memory for kv",
        ),
    ],
    ids=["sleep-mode", "max-model-len", "kv-above-free-ram"],
)
def test_a_start_vllm_refuses_is_diagnosed_with_its_own_line(
    overrides: dict[str, Any],
    more_argv: tuple[str, ...],
    code: str,
    engine_line: str,
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "vllm.log"
    gone, _ = run_until_exit(cpu_spec(tiny_model, **overrides), log_path, more_argv)
    assert gone.exit_code != 0
    why = _why(gone, log_path)
    assert why.code == code, why
    assert engine_line in why.matched_line


def test_a_head_size_the_cpu_attention_lacks_fails_its_first_request_and_is_diagnosed(
    tiny_model: Path, tmp_path: Path
) -> None:
    model = write_llama(tmp_path / "head16", tiny_model, hidden_size=64, intermediate_size=128,
                        num_attention_heads=4, num_key_value_heads=1, head_dim=16)  # fmt: skip
    log_path = tmp_path / "vllm.log"
    with running(cpu_spec(model), log_path) as engine:
        body = {"model": "tiny", "prompt": "1 + 1 =", "max_tokens": 2}
        answer = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=120)
        assert answer.status_code == 500
        gone = wait_for(lambda: sv.poll_exit(engine.handle), 60)
    why = _why(gone, log_path)
    assert why.code == "cpu_attention_head_size", why
    assert "Unsupported CPU attention configuration: head_dim=16" in why.matched_line
