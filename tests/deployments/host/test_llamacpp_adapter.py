"""The llama-server adapter: golden argv, env, probe, and the specs it refuses before a start."""

from __future__ import annotations

import pytest

from deployments.engines import (
    LaunchSpec,
    LlamaServerAdapter,
    UnsupportedSpec,
    get_adapter,
    planned_argv,
)
from deployments.engines.llamacpp import API_KEY_ENV, LLAMA_SERVER_BIN_ENV

KEY = "sk-deployment-secret-1234"
BIN = "/opt/llama/bin/llama-server"
GGUF = "/models/Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def spec(**overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "deployment_id": "42",
        "model": GGUF,
        "served_model_name": "llama-8b",
        "host": "10.0.0.5",
        "port": 8123,
        "api_key": KEY,
        "gpu_indices": (2, 3),
        "max_model_len": 16384,
        "max_num_seqs": 8,
        "n_gpu_layers": 33,
        "tensor_split": (0.6, 0.4),
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
        "ubatch": 256,
    }
    fields.update(overrides)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


# fmt: off
def test_argv_golden_two_gpus_layer_split() -> None:
    cmd = LlamaServerAdapter(executable=BIN).build(spec())
    assert cmd.argv == (
        BIN, "-m", GGUF,
        "-a", "llama-8b", "--host", "10.0.0.5", "--port", "8123",
        "-c", "16384", "-kvu", "-np", "8",
        "-ngl", "33", "-sm", "layer", "-ts", "0.6,0.4",
        "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ub", "256",
        "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
    )


def test_argv_golden_one_gpu_full_offload() -> None:
    s = spec(gpu_indices=(5,), tensor_split=(), n_gpu_layers=None, cache_type_k=None,
             cache_type_v=None, n_parallel=2, max_num_seqs=None, ubatch=None)
    assert LlamaServerAdapter(executable=BIN).argv(s) == (
        BIN, "-m", GGUF,
        "-a", "llama-8b", "--host", "10.0.0.5", "--port", "8123",
        "-c", "16384", "-kvu", "-np", "2",
        "-ngl", "all", "-sm", "none", "-mg", "0",
        "-fa", "auto",
        "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
    )


def test_argv_golden_cpu() -> None:
    s = spec(device="cpu", gpu_indices=(), tensor_split=(), cache_type_k=None,
             cache_type_v=None, ubatch=None, extra_args=("-t", "1"))
    assert LlamaServerAdapter(executable=BIN).argv(s) == (
        BIN, "-m", GGUF,
        "-a", "llama-8b", "--host", "10.0.0.5", "--port", "8123",
        "-c", "16384", "-kvu", "-np", "8",
        "-ngl", "0", "-sm", "none",
        "-fa", "auto",
        "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
        "-t", "1",
    )


def test_copy_paste_line_leaves_out_what_only_the_host_knows() -> None:
    assert planned_argv("llamacpp", spec()) == (
        "llama-server", "-m", GGUF,
        "-c", "16384", "-kvu", "-np", "8",
        "-ngl", "33", "-sm", "layer", "-ts", "0.6,0.4",
        "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ub", "256",
        "--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4",
    )
# fmt: on


def test_equal_split_when_the_plan_gives_none() -> None:
    argv = LlamaServerAdapter(executable=BIN).argv(spec(gpu_indices=(0, 1, 2), tensor_split=()))
    assert argv[argv.index("-ts") + 1] == "1,1,1"


def test_key_goes_through_the_environment_not_argv() -> None:
    cmd = LlamaServerAdapter(executable=BIN).build(spec())
    assert KEY not in " ".join(cmd.argv)
    assert cmd.env[API_KEY_ENV] == KEY
    assert cmd.masked_env[API_KEY_ENV] == "***"
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert cmd.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert cmd.base_url == "http://10.0.0.5:8123"
    assert cmd.probe.health_path == "/health"
    assert cmd.probe.models_path == "/v1/models"
    assert cmd.probe.expected_model == "llama-8b"
    assert cmd.request_model == "llama-8b"


def test_executable_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LLAMA_SERVER_BIN_ENV, "/var/llama/llama-server")
    assert get_adapter("llamacpp").argv(spec())[0] == "/var/llama/llama-server"
    monkeypatch.delenv(LLAMA_SERVER_BIN_ENV)
    assert get_adapter("llamacpp").argv(spec())[0] == "llama-server"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model": "meta-llama/Llama-3.1-8B"}, "local .gguf"),
        ({"tensor_parallel_size": 2}, "TP and PP must be 1"),
        ({"tensor_split": (1.0,)}, "1 shares for 2 leased GPUs"),
        ({"tensor_split": (0.0, 0.0)}, "not all 0"),
        ({"tensor_split": (-1.0, 2.0)}, "0 or more"),
        ({"split_mode": "none"}, "split mode none uses one GPU; 2 are leased"),
        ({"split_mode": "columns"}, "split mode 'columns'"),
        ({"main_gpu": 2}, "main_gpu 2 is not one of the 2 leased GPUs"),
        ({"cache_type_v": "q4_0", "flash_attn": "off"}, "quantized V cache needs flash"),
        ({"cache_type_k": "fp8"}, "K cache type 'fp8'"),
        (
            {
                "split_mode": "tensor",
                "cache_type_k": None,
                "cache_type_v": None,
                "flash_attn": "off",
            },
            "tensor needs flash",
        ),
        ({"split_mode": "tensor"}, "f16, bf16 or f32 KV cache"),
        ({"flash_attn": "maybe"}, "flash_attn 'maybe'"),
        ({"n_gpu_layers": -1}, "n_gpu_layers must be 0 or more"),
        ({"extra_args": ("--api-key", "x")}, "LLAMA_API_KEY"),
        ({"extra_args": ("-ts", "1,0")}, "the panel sets it"),
        ({"extra_args": ("--fit=on",)}, "--fit off"),
        ({"extra_args": ("-lv", "1")}, "-lv 4 memory lines"),
    ],
)
def test_refused_specs(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(UnsupportedSpec, match=message.replace("(", r"\(")):
        LlamaServerAdapter(executable=BIN).build(spec(**overrides))


def test_warnings_name_what_it_ignores_and_experimental_modes() -> None:
    cmd = LlamaServerAdapter(executable=BIN).build(
        spec(api_key=None, gpu_memory_utilization=0.9, split_mode="row", max_model_len=None)
    )
    text = " | ".join(cmd.warnings)
    assert "no API key" in text
    assert "row is deprecated" in text
    assert "training context" in text
    assert "ignored by llama-server: gpu_memory_utilization" in text
