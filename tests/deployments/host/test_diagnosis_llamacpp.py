"""llama-server failures diagnosed from its own log lines: recorded starts (llamacpp_logs/) and
the lines of reference llamacpp.md §2.3 and ggml's CUDA allocation messages."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from deployments.host.diagnosis import diagnose, diagnose_exit, diagnose_spawn_error

LOGS = Path(__file__).parent / "llamacpp_logs"

RECORDED = [
    ("b11434_cpu_badtype.log", "llamacpp_unsupported_quant", "'blk.0.attn_output.weight'"),
    ("b11434_cpu_qv.log", "llamacpp_quantized_v_needs_fa", "Set -fa on"),
    ("b11434_cpu_missing.log", "llamacpp_model_missing", "/models/nope.gguf is not on this host"),
    ("b11434_cpu_bind.log", "address_in_use", "Another process listens"),
    ("b11434_cpu_ts.log", "llamacpp_bad_split", "18 shares, but the engine sees only 16 GPUs"),
    ("b11434_cpu_ctk.log", "llamacpp_bad_argument", "-ctk: Unsupported cache type: fp8"),
]


@pytest.mark.parametrize(("name", "code", "said"), RECORDED)
def test_recorded_failures(name: str, code: str, said: str) -> None:
    found = diagnose((LOGS / name).read_text())
    assert found is not None
    assert found.code == code
    assert said in f"{found.reason} {found.fix}"


LINES = [
    (
        # ggml-cuda.cu's message, as a llama-server -lv 4 log line would carry it
        "0.01.204.113 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on "
        "device 1: cudaMalloc failed: out of memory\n"
        "0.01.204.200 E alloc_tensor_range: failed to allocate CUDA1 buffer of size 9663676416\n"
        "0.01.204.300 E llama_model_load: error loading model: unable to allocate CUDA1 buffer\n"
        "0.01.210.000 E srv  llama_server: exiting due to model loading error",
        "llamacpp_gpu_oom",
        "CUDA1 (the engine's device 1, in lease order) could not allocate 9216.00 MiB",
    ),
    (
        "E alloc_tensor_range: failed to allocate CUDA0 buffer of size 2147483648",
        "llamacpp_buffer_oom",
        "CUDA0 buffer of 2048.0 MiB: out of memory on GPU CUDA0",
    ),
    (
        "E llama_model_load: error loading model: unable to allocate CUDA_Host buffer",
        "llamacpp_buffer_oom",
        "out of memory on host RAM",
    ),
    (
        # reference llamacpp.md §2.3, the demo model (head_dim 16) with -ctk q8_0
        "llama_init_from_model: K cache type q8_0 with block size 32 does not divide "
        "n_embd_head_k=16\nsrv  llama_server: exiting due to model loading error",
        "llamacpp_kv_block_size",
        "blocks of 32 values, which do not divide this model's head size (16)",
    ),
    (
        "E llama_model_load: error loading model: error loading model architecture: unknown "
        "model architecture: 'mamba9'",
        "llamacpp_unknown_architecture",
        "'mamba9'",
    ),
    (
        "E srv  llama_server: exiting due to model loading error",
        "llamacpp_load_failed",
        "the error lines (E) above say why",
    ),
]


@pytest.mark.parametrize(("text", "code", "said"), LINES)
def test_failure_lines(text: str, code: str, said: str) -> None:
    found = diagnose(text)
    assert found is not None
    assert found.code == code
    assert said in found.reason


def test_a_clean_start_is_no_failure() -> None:
    start = Path(__file__).parent / "startup_logs" / "llamacpp_b11434_cpu.log"
    assert diagnose(start.read_text()) is None
    assert diagnose_exit(start.read_text(), 1, None).code == "engine_exited"


def test_missing_binary_names_the_install_script() -> None:
    error = FileNotFoundError(errno.ENOENT, "No such file", "/opt/llama-server")
    found = diagnose_spawn_error(error, "/opt/llama-server")
    assert found.code == "llama_server_missing"
    assert "SHARDBOARD_LLAMA_SERVER_BIN" in found.fix
