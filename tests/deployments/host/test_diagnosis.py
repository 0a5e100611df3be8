from __future__ import annotations

import pytest

from deployments.host.diagnosis import diagnose, diagnose_exit, diagnose_spawn_error

# Exact texts from ../shared/reference/vllm-memory.md §3 and apis.md §1.4, §2.
CASES = [
    (
        "ValueError: Total number of attention heads (32) must be divisible by tensor parallel "
        "size (3).",
        "heads_not_divisible",
        (),
    ),
    (
        "(EngineCore_DP0 pid=811) AssertionError: 151936 is not divisible by 5\n"
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        "vocab_not_divisible",
        (),
    ),
    (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "no_kv_cache_memory",
        (),
    ),
    (
        "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens "
        "that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.",
        "max_model_len_too_long_for_kv",
        (("--max-model-len", "23648"),),
    ),
    (
        "ValueError: To serve at least one request with the models's max seq len (262144), "
        "(62.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(48.66 GiB). Based on the available memory, the estimated maximum model length is "
        "205728. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine.",
        "max_model_len_too_long_for_kv",
        (("--max-model-len", "205728"),),
    ),
    (
        "ValueError: To serve at least one request with the model's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(9.10 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
        "max_model_len_too_long_for_kv",
        (),
    ),
    (
        "ValueError: Free memory on device cuda:1 (60.87/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.95, 75.23 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.",
        "gpu_memory_busy_at_start",
        (("--gpu-memory-utilization", "0.75"),),
    ),
    (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.",
        "cuda_oom_sampler",
        (),
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.02 GiB is free.",
        "cuda_oom",
        (),
    ),
    (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, User-specified max_model_len (8192) is greater than the derived "
        "max_model_len (max_position_embeddings=2048.0 or model_max_length=None in model's "
        "config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
        "max_model_len_above_model",
        (("--max-model-len", "2048"),),
    ),
    (
        "ValueError: World size (8) is larger than the number of available GPUs (4) in this "
        "node. If this is intentional and you are using: - ray, set "
        "'--distributed-executor-backend ray'.",
        "world_size_too_large",
        (),
    ),
    (
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for "
        "url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.",
        "gated_repo",
        (),
    ),
    (
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found "
        "for url: https://huggingface.co/api/models/nobody/nothing",
        "repo_not_found",
        (),
    ),
    (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the "
        "disk cache and outgoing traffic has been disabled.",
        "local_entry_not_found",
        (),
    ),
    ("OSError: [Errno 98] Address already in use", "address_in_use", ()),
    (
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
        "address already in use",
        "address_in_use",
        (),
    ),
    (
        "ValueError: Failed to import Ray: No module named 'ray'. Please install Ray with "
        "`pip install ray`.",
        "ray_missing",
        (),
    ),
    (
        "ImportError: Missing dependencies for serving. Install with pip install "
        "transformers[serving]",
        "transformers_serving_missing",
        (),
    ),
    ("ModuleNotFoundError: No module named 'vllm'", "vllm_missing", ()),
    (
        "shardboard: could not start '/opt/vllm/bin/vllm': [Errno 2] No such file or directory: "
        "'/opt/vllm/bin/vllm'",
        "vllm_missing",
        (),
    ),
]


@pytest.mark.parametrize(("log", "code", "args"), CASES, ids=[c[1] for c in CASES])
def test_diagnose_table(log: str, code: str, args: tuple[tuple[str, str], ...]) -> None:
    noisy = "INFO 12-02 10:00:00 [model.py:2170] Using max model len 8192\n" + log + "\n"
    diagnosis = diagnose(noisy)
    assert diagnosis is not None
    assert diagnosis.code == code
    assert diagnosis.suggested_args == args
    assert diagnosis.reason and diagnosis.fix and diagnosis.title
    assert diagnosis.matched_line in log


def test_engine_core_failure_points_at_the_root_cause() -> None:
    log = "\n".join(
        [
            "(EngineCore_DP0 pid=77) Traceback (most recent call last):",
            "(EngineCore_DP0 pid=77) KeyError: 'model.layers.0.mlp.gate_proj.weight'",
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore_DP0': 1}",
        ]
    )
    diagnosis = diagnose(log)
    assert diagnosis is not None
    assert diagnosis.code == "engine_core_failed"
    assert "KeyError: 'model.layers.0.mlp.gate_proj.weight'" in diagnosis.reason


def test_specific_cause_wins_over_the_wrapper() -> None:
    log = (
        "ValueError: No available memory for the cache blocks.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    diagnosis = diagnose(log)
    assert diagnosis is not None and diagnosis.code == "no_kv_cache_memory"


def test_ansi_colours_do_not_hide_a_match() -> None:
    diagnosis = diagnose("\x1b[1;31mERROR\x1b[0m OSError: [Errno 98] Address already in use")
    assert diagnosis is not None and diagnosis.code == "address_in_use"
    assert "\x1b" not in diagnosis.matched_line


def test_healthy_log_has_no_diagnosis() -> None:
    log = (
        "INFO:     Started server process [1]\nINFO:     Application startup complete.\n"
        'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    )
    assert diagnose(log) is None
    assert diagnose("") is None


@pytest.mark.parametrize(
    ("error", "executable", "code"),
    [
        (FileNotFoundError(2, "No such file"), "vllm", "vllm_missing"),
        (FileNotFoundError(2, "No such file"), "/x/transformers", "executable_missing"),
        (PermissionError(13, "Permission denied"), "/opt/vllm/bin/vllm", "spawn_failed"),
    ],
)
def test_diagnose_spawn_error(error: OSError, executable: str, code: str) -> None:
    diagnosis = diagnose_spawn_error(error, executable)
    assert diagnosis.code == code
    assert executable in diagnosis.reason


@pytest.mark.parametrize(
    ("log", "exit_code", "signal_number", "code", "in_reason"),
    [
        ("OSError: [Errno 98] Address already in use", 1, None, "address_in_use", "port"),
        ("INFO: Application startup complete.", None, 9, "killed", "OOM killer"),
        ("Traceback:\nKeyError: 'x'\n", 1, None, "engine_exited", "KeyError: 'x'"),
        ("", 3, None, "engine_exited", "code 3"),
        ("", None, None, "engine_exited", "adopted"),
    ],
)
def test_diagnose_exit(
    log: str, exit_code: int | None, signal_number: int | None, code: str, in_reason: str
) -> None:
    diagnosis = diagnose_exit(log, exit_code, signal_number)
    assert diagnosis.code == code
    assert in_reason in diagnosis.reason
