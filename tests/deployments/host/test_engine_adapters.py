from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deployments.engines import (
    MARKER_ENV,
    LaunchSpec,
    TransformersAdapter,
    UnsupportedSpec,
    VllmAdapter,
    engine_names,
    get_adapter,
    mask_argv,
    mask_env,
)
from deployments.host.supervisor.processes import inherited_env

KEY = "sk-deployment-secret-1234"
ALL = "0.0.0.0"  # noqa: S104 - a spec value under test, nothing binds here


def vllm_spec(**overrides: object) -> LaunchSpec:
    fields: dict[str, object] = {
        "deployment_id": "42",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "revision": "0e9e39f",
        "served_model_name": "llama-8b",
        "host": ALL,
        "port": 8123,
        "api_key": KEY,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "gpu_indices": (2, 3),
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
        "max_num_seqs": 64,
        "dtype": "bfloat16",
        "kv_cache_dtype": "fp8",
    }
    fields.update(overrides)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def test_vllm_argv_golden() -> None:
    cmd = VllmAdapter(executable="/opt/vllm/bin/vllm").build(vllm_spec())
    assert cmd.argv == (
        "/opt/vllm/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct",
        "--served-model-name", "llama-8b",
        "--host", ALL, "--port", "8123",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--revision", "0e9e39f",
        "--gpu-memory-utilization", "0.9",
        "--max-model-len", "8192",
        "--max-num-seqs", "64",
        "--dtype", "bfloat16",
        "--kv-cache-dtype", "fp8",
    )  # fmt: skip
    assert cmd.base_url == "http://127.0.0.1:8123"
    assert cmd.request_model == "llama-8b"
    assert cmd.supports_api_key


def test_vllm_key_goes_through_env_not_argv() -> None:
    cmd = VllmAdapter().build(vllm_spec())
    assert not any(KEY in arg for arg in cmd.argv)
    assert "--api-key" not in cmd.argv
    assert cmd.env["VLLM_API_KEY"] == KEY
    assert cmd.masked_env["VLLM_API_KEY"] == "***"
    assert KEY not in repr(cmd) and KEY not in repr(vllm_spec()) and KEY not in repr(cmd.probe)


def test_vllm_env() -> None:
    env = VllmAdapter().build(vllm_spec()).env
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env[MARKER_ENV] == "42"


def test_vllm_probe_checks_models_with_key() -> None:
    probe = VllmAdapter().build(vllm_spec()).probe
    assert (probe.health_path, probe.models_path) == ("/health", "/v1/models")
    assert probe.api_key == KEY
    assert probe.expected_model == "llama-8b"


def test_vllm_spans_hosts_uses_ray() -> None:
    cmd = VllmAdapter().build(
        vllm_spec(
            spans_hosts=True,
            tensor_parallel_size=2,
            pipeline_parallel_size=2,
            ray_address="10.0.0.1:20000",
        )
    )
    i = cmd.argv.index("--distributed-executor-backend")
    assert cmd.argv[i + 1] == "ray"
    assert any("Ray" in w for w in cmd.warnings)


def test_vllm_single_host_has_no_ray_and_no_swap_space() -> None:
    cmd = VllmAdapter().build(vllm_spec())
    assert "--distributed-executor-backend" not in cmd.argv
    assert "--swap-space" not in cmd.argv


def test_vllm_bin_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDBOARD_VLLM_BIN", "/srv/vllm-venv/bin/vllm")
    assert get_adapter("vllm").build(vllm_spec()).argv[0] == "/srv/vllm-venv/bin/vllm"


def test_vllm_defaults_leave_optional_flags_out() -> None:
    spec = LaunchSpec(deployment_id="7", model="/models/m", port=9000, gpu_indices=(0,))
    cmd = VllmAdapter(executable="vllm").build(spec)
    assert cmd.argv == (
        "vllm", "serve", "/models/m", "--served-model-name", "/models/m",
        "--host", "127.0.0.1", "--port", "9000",
        "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
    )  # fmt: skip
    assert "VLLM_API_KEY" not in cmd.env
    assert any("no API key" in w for w in cmd.warnings)


def test_vllm_on_the_cpu_binds_each_rank_and_sizes_its_kv_cache_in_bytes() -> None:
    spec = vllm_spec(
        device="cpu", gpu_indices=(), cpu_threads_bind="0|1", kv_cache_memory_bytes=3 << 29
    )
    cmd = VllmAdapter(executable="vllm").build(spec)
    assert cmd.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    # not inherited from the worker (it would override the flag); empty, vLLM dies reading it
    assert "VLLM_CPU_KVCACHE_SPACE" not in cmd.env
    assert "VLLM_CPU_KVCACHE_SPACE" not in inherited_env({"VLLM_CPU_KVCACHE_SPACE": "4"})
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == ""
    assert "--kv-cache-memory-bytes" in cmd.argv
    assert cmd.argv[cmd.argv.index("--kv-cache-memory-bytes") + 1] == str(3 << 29)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"extra_args": ("--swap-space", "4")}, "removed"),
        ({"extra_args": (f"--api-key={KEY}",)}, "VLLM_API_KEY"),
        ({"extra_args": ("--port", "1")}, "panel"),
        ({"gpu_indices": (0,)}, "needs 2 GPUs"),
        ({"gpu_indices": ()}, "leased GPU"),
        ({"device": "cpu"}, "core range each"),
        ({"device": "cpu", "cpu_threads_bind": "0|1", "sleep_mode": True}, "no sleep mode"),
        ({"device": "cpu", "extra_args": ("--enable-sleep-mode",)}, "no sleep mode"),
        ({"device": "cpu", "cpu_threads_bind": "0|1", "spans_hosts": True}, "Ray"),
        ({"gpu_memory_utilization": 1.5}, "(0, 1]"),
        ({"port": 0}, "port"),
        ({"deployment_id": ""}, "deployment_id"),
        ({"extra_env": (("CUDA_VISIBLE_DEVICES", "0"),)}, "may not set"),
    ],
)
def test_vllm_refuses(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(UnsupportedSpec, match=message.replace("(", r"\(").replace(")", r"\)")):
        VllmAdapter().build(vllm_spec(**overrides))


def test_transformers_argv_golden() -> None:
    spec = LaunchSpec(deployment_id="9", model="/models/tiny", port=18001, device="cpu")
    cmd = TransformersAdapter(executable="/venv/bin/transformers").build(spec)
    assert cmd.argv == (
        "/venv/bin/transformers", "serve", "/models/tiny", "--device", "cpu",
        "--host", "127.0.0.1", "--port", "18001",
    )  # fmt: skip
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == ""
    assert cmd.env["HF_HUB_OFFLINE"] == "1"
    assert cmd.env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1"
    assert cmd.probe.models_path is None  # its /v1/models scans the HF cache
    assert cmd.request_model is None
    assert not cmd.supports_api_key
    assert cmd.warnings == ()


def test_transformers_binds_loopback_and_says_why() -> None:
    spec = LaunchSpec(
        deployment_id="9", model="/m", port=18001, host=ALL, api_key=KEY, device="cpu"
    )
    cmd = get_adapter("transformers").build(spec)
    assert cmd.argv[cmd.argv.index("--host") + 1] == "127.0.0.1"
    assert cmd.base_url == "http://127.0.0.1:18001"
    assert KEY not in " ".join(cmd.argv) and KEY not in cmd.env.values()
    assert any("no API key" in w for w in cmd.warnings)


def test_transformers_on_one_gpu() -> None:
    spec = LaunchSpec(deployment_id="9", model="/m", port=1234, gpu_indices=(3,), revision="v2")
    cmd = TransformersAdapter(executable="t").build(spec)
    assert cmd.argv[:5] == ("t", "serve", "/m@v2", "--device", "cuda")
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.parametrize(
    "overrides",
    [
        {"tensor_parallel_size": 2},
        {"spans_hosts": True},
        {"model": "/models/a@b"},
        {"quantization": "awq"},
        {"extra_args": ("--host", ALL)},
    ],
)
def test_transformers_refuses(overrides: dict[str, object]) -> None:
    fields: dict[str, object] = {"deployment_id": "1", "model": "/m", "port": 1, "device": "cpu"}
    with pytest.raises(UnsupportedSpec):
        TransformersAdapter().build(LaunchSpec(**{**fields, **overrides}))  # type: ignore[arg-type]


def test_transformers_default_executable_is_next_to_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SHARDBOARD_TRANSFORMERS_BIN", raising=False)
    assert TransformersAdapter().executable == str(Path(sys.executable).parent / "transformers")


@pytest.mark.parametrize(
    ("argv", "masked"),
    [
        (["vllm", "--api-key", "k1", "k2", "-q", "fp8"],
         ("vllm", "--api-key", "***", "***", "-q", "fp8")),
        (["vllm", "--api-key=k1"], ("vllm", "--api-key=***")),
        (["vllm", "--hf-token", "hf_x"], ("vllm", "--hf-token", "***")),
        (["vllm", "--port", "1"], ("vllm", "--port", "1")),
    ],
)  # fmt: skip
def test_mask_argv(argv: list[str], masked: tuple[str, ...]) -> None:
    assert mask_argv(argv) == masked


def test_mask_env() -> None:
    env = {"HF_TOKEN": "hf_x", "VLLM_API_KEY": "k", "CUDA_VISIBLE_DEVICES": "0", "EMPTY_KEY": ""}
    assert mask_env(env) == {
        "HF_TOKEN": "***",
        "VLLM_API_KEY": "***",
        "CUDA_VISIBLE_DEVICES": "0",
        "EMPTY_KEY": "",
    }


def test_registry() -> None:
    assert engine_names() == ("llamacpp", "transformers", "vllm")
    assert get_adapter("vllm").name == "vllm"
    with pytest.raises(UnsupportedSpec, match="unknown engine"):
        get_adapter("tgi")
