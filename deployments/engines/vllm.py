"""`vllm serve` (vLLM 0.33 on CUDA hosts, its 0.32 CPU build elsewhere): an external command,
never imported."""

from __future__ import annotations

from deployments.engines import sleep
from deployments.engines.base import (
    EngineCommand,
    ExternalCommand,
    LaunchSpec,
    ReadinessProbe,
    UnsupportedSpec,
    base_url,
    check_common,
    common_env,
    reject_flags,
)

VLLM_BIN_ENV = "SHARDBOARD_VLLM_BIN"
_SET_BY_PANEL = "the panel sets it from the plan"
_FORBIDDEN_EXTRA = {
    "--api-key": "the key goes through VLLM_API_KEY so that it is not visible in ps",
    "--host": _SET_BY_PANEL,
    "--port": _SET_BY_PANEL,
    "--served-model-name": _SET_BY_PANEL,
    "--tensor-parallel-size": _SET_BY_PANEL,
    "-tp": _SET_BY_PANEL,
    "--pipeline-parallel-size": _SET_BY_PANEL,
    "-pp": _SET_BY_PANEL,
    "--distributed-executor-backend": "set spans_hosts instead",
    "--device-ids": "the leased GPUs are chosen with CUDA_VISIBLE_DEVICES",
    "--model": "the model is the positional argument",
    "--uds": "the panel reaches engines over TCP",
    "--swap-space": "removed in vLLM 0.33 (see --kv-offloading-size)",
    "--enable-lora": _SET_BY_PANEL,
    "--max-loras": _SET_BY_PANEL,
    "--max-lora-rank": _SET_BY_PANEL,
    "--max-cpu-loras": _SET_BY_PANEL,
    "--lora-modules": "adapters are loaded at run time from the deployment's page",
}
LORA_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"  # routes /v1/load_lora_adapter (0.32, 0.33)


class VllmAdapter(ExternalCommand):
    name = "vllm"
    supports_api_key = True
    bin_env = VLLM_BIN_ENV

    def default_executable(self) -> str:
        return "vllm"

    def build(self, spec: LaunchSpec) -> EngineCommand:
        _check(spec)
        served = spec.served_model_name or spec.model
        return EngineCommand(
            engine=self.name,
            argv=self.argv(spec),
            env=_env(spec),
            base_url=base_url(spec.host, spec.port),
            probe=ReadinessProbe(
                models_path="/v1/models", api_key=spec.api_key, expected_model=served
            ),
            request_model=served,
            supports_api_key=True,
            warnings=_warnings(spec),
            embeds=spec.runner == "pooling",
        )

    def argv(self, spec: LaunchSpec, *, listen: bool = True) -> tuple[str, ...]:
        argv = [self.executable, "serve", spec.model]
        if listen:
            argv += ["--served-model-name", spec.served_model_name or spec.model]
            argv += ["--host", spec.host, "--port", str(spec.port)]
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
        argv += ["--pipeline-parallel-size", str(spec.pipeline_parallel_size)]
        argv += _optional_flags(spec)
        if spec.enforce_eager:
            argv.append("--enforce-eager")
        if spec.enable_lora:
            argv.append("--enable-lora")
        if spec.sleep_mode:
            argv.append(sleep.SLEEP_FLAG)
        if spec.spans_hosts:
            argv += ["--distributed-executor-backend", "ray"]
        return (*argv, *spec.extra_args)


def _optional_flags(spec: LaunchSpec) -> list[str]:
    pairs = [
        ("--revision", spec.revision),
        ("--gpu-memory-utilization", spec.gpu_memory_utilization),
        ("--max-model-len", spec.max_model_len),
        ("--max-num-seqs", spec.max_num_seqs),
        ("--max-num-batched-tokens", spec.max_num_batched_tokens),
        ("--dtype", spec.dtype),
        ("--quantization", spec.quantization),
        ("--kv-cache-dtype", spec.kv_cache_dtype),
        ("--decode-context-parallel-size", spec.decode_context_parallel_size),
        ("--block-size", spec.block_size),
        ("--kv-cache-memory-bytes", spec.kv_cache_memory_bytes),
        ("--runner", spec.runner),  # vllm/config/model.py:163-170 (0.33)
        ("--convert", spec.convert),
        ("--max-loras", spec.max_loras if spec.enable_lora else None),
        ("--max-lora-rank", spec.max_lora_rank if spec.enable_lora else None),
        ("--max-cpu-loras", spec.max_cpu_loras if spec.enable_lora else None),
    ]
    return [part for flag, value in pairs if value is not None for part in (flag, _text(value))]


def _text(value: object) -> str:
    """A number as the planner wrote it (``0.9``, ``1``), exact where `:g` would round."""
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def _env(spec: LaunchSpec) -> dict[str, str]:
    env = common_env(spec)
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["DO_NOT_TRACK"] = "1"
    env["VLLM_DISABLE_LOG_LOGO"] = "1"  # plain "vLLM server version …" first line
    env["VLLM_LOGGING_COLOR"] = "0"
    if spec.sleep_mode:
        env.update(sleep.DEV_MODE_ENV)  # /sleep, /wake_up, /is_sleeping are dev-mode routes
    if spec.api_key:
        env["VLLM_API_KEY"] = spec.api_key  # read by vLLM when --api-key is absent
    if spec.enable_lora:
        env[LORA_UPDATING_ENV] = "True"
    if spec.spans_hosts:
        env.update(ray_env(spec))
    if spec.device == "cpu":
        env.update(cpu_env(spec))
    return env


def cpu_env(spec: LaunchSpec) -> dict[str, str]:
    """vLLM's CPU platform (vllm/platforms/cpu.py, 0.32). One core range per TP rank: without
    one, two ranks on one NUMA node refuse to start ("Not enough allowed NUMA nodes to bind
    threads"). VLLM_CPU_KVCACHE_SPACE, a legacy whole number of GiB that would override
    --kv-cache-memory-bytes, is not inherited from the worker (supervisor/processes.py): set
    empty, every worker dies reading it (envs.py: int(""))."""
    env: dict[str, str] = {}
    if spec.cpu_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpu_threads_bind
    return env


def ray_env(spec: LaunchSpec) -> dict[str, str]:
    """The driver's side of vLLM 0.33 on Ray. `ray.init(address=None)` reads RAY_ADDRESS
    (v1/executor/ray_utils.py:321), so the engine joins the deployment's own cluster, not
    whatever `ray start` ran last on this host; VLLM_HOST_IP is this node's address (each
    Ray node carries its own: ray_utils.py:18 keeps it from being copied to workers)."""
    env = {"RAY_ADDRESS": spec.ray_address or "", "RAY_USAGE_STATS_ENABLED": "0"}
    if spec.node_address:
        env["VLLM_HOST_IP"] = spec.node_address
    return env


def _check(spec: LaunchSpec) -> None:
    check_common(spec)
    if spec.tensor_parallel_size < 1 or spec.pipeline_parallel_size < 1:
        raise UnsupportedSpec("tensor and pipeline parallel sizes must be at least 1")
    if spec.device == "cpu":
        _check_cpu(spec)
    gpus_needed = spec.tensor_parallel_size * spec.pipeline_parallel_size
    if spec.device == "cuda" and not spec.spans_hosts and len(spec.gpu_indices) != gpus_needed:
        raise UnsupportedSpec(
            f"TP {spec.tensor_parallel_size} x PP {spec.pipeline_parallel_size} needs "
            f"{gpus_needed} GPUs on this host; {len(spec.gpu_indices)} are leased"
        )
    if spec.spans_hosts and not spec.ray_address:
        raise UnsupportedSpec("a model over several hosts needs its Ray head's address")
    if spec.gpu_memory_utilization is not None and not 0 < spec.gpu_memory_utilization <= 1:
        raise UnsupportedSpec("gpu_memory_utilization must be in (0, 1]")
    reject_flags(spec.extra_args, _FORBIDDEN_EXTRA)


def _check_cpu(spec: LaunchSpec) -> None:
    """What vLLM's CPU platform refuses at start, refused here first with its own words."""
    if spec.sleep_mode or sleep.SLEEP_FLAG in spec.extra_args:  # the flag as an extra too
        raise UnsupportedSpec(
            'vLLM on the CPU has no sleep mode (it refuses --enable-sleep-mode: "Sleep mode is '
            'not supported on current platform"); an idle CPU deployment scales to zero instead'
        )
    if spec.spans_hosts:
        raise UnsupportedSpec(
            'vLLM on the CPU cannot run on Ray ("current platform cpu does not support ray"): '
            "a model over several hosts needs GPU hosts"
        )
    ranks = spec.tensor_parallel_size * spec.pipeline_parallel_size
    if ranks > 1 and not spec.cpu_threads_bind:
        raise UnsupportedSpec(
            f"{ranks} vLLM ranks on the CPU need a core range each (VLLM_CPU_OMP_THREADS_BIND)"
        )


def _warnings(spec: LaunchSpec) -> tuple[str, ...]:
    warnings = []
    if not spec.api_key:
        warnings.append("no API key: /v1 on this engine is open to anyone who can reach the port")
    if spec.spans_hosts:
        warnings.append(f"multi-host: Ray at {spec.ray_address} places the workers on every host")
    return tuple(warnings)
