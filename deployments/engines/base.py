"""What every engine adapter takes (a LaunchSpec) and gives back (an EngineCommand)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

MARKER_ENV = "SHARDBOARD_DEPLOYMENT_ID"
OWNER_ENV = "SHARDBOARD_ENGINE_OWNER"  # <host>@<installation>: whose worker may adopt or stop it
MASK = "***"
LOOPBACK_HOST = "127.0.0.1"
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 - recognised, not bound
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--token"})

Device = Literal["cpu", "cuda"]


class UnsupportedSpec(ValueError):
    """The engine cannot run this spec; the message says why, before anything starts."""


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    deployment_id: str
    model: str  # local path or Hub id
    port: int
    host: str = LOOPBACK_HOST
    revision: str | None = None
    served_model_name: str | None = None
    api_key: str | None = field(default=None, repr=False)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_indices: tuple[int, ...] = ()
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_num_batched_tokens: int | None = None
    decode_context_parallel_size: int | None = None
    block_size: int | None = None
    # vLLM's KV cache in bytes (--kv-cache-memory-bytes): on the CPU the budget the plan chose
    # from the host's RAM; None leaves vLLM its gpu_memory_utilization share.
    kv_cache_memory_bytes: int | None = None
    # vLLM on the CPU: the cores of each TP rank, "0-3|4-7" (VLLM_CPU_OMP_THREADS_BIND)
    cpu_threads_bind: str | None = None
    enforce_eager: bool = False
    # vLLM's LoRA slots, loaded at run time (/v1/load_lora_adapter); other engines refuse it
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    sleep_mode: bool = False  # vLLM: may sleep when idle (engines.sleep); others ignore it
    runner: str | None = None  # "pooling": an embedding/classification model (vLLM --runner)
    convert: str | None = None  # vLLM --convert embed|classify
    spans_hosts: bool = False  # one model over several hosts: vLLM's Ray executor
    ray_address: str | None = None  # ``ip:port`` of the deployment's Ray head (spans_hosts)
    node_address: str | None = None  # this host's IP in that cluster (spans_hosts)
    device: Device = "cuda"
    hf_offline: bool = True  # True for local folders; a Hub model downloads its weights
    hf_token: str | None = field(default=None, repr=False)  # given as HF_TOKEN, masked when stored
    # llama-server's placement (deployments.engines.llamacpp); None leaves the adapter's rule.
    n_gpu_layers: int | None = None  # None: every layer ("all")
    split_mode: str | None = None  # none | layer | row | tensor
    tensor_split: tuple[float, ...] = ()  # one share per leased GPU, in lease order
    main_gpu: int | None = None  # an index into the leased GPUs (split mode none or row)
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None  # on | off | auto
    n_parallel: int | None = None  # server slots; None: max_num_seqs
    ubatch: int | None = None  # -ub: the physical batch, which sizes the compute buffer
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    owner: str = ""  # the OWNER_ENV value; "" only where no worker will look for it again


@dataclass(frozen=True, slots=True)
class ReadinessProbe:
    """Poll `health_path` until 200; then, if set, `models_path` with the Bearer key."""

    health_path: str = "/health"
    models_path: str | None = None
    api_key: str | None = field(default=None, repr=False)
    expected_model: str | None = None


@dataclass(frozen=True, slots=True)
class EngineCommand:
    engine: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)  # set on top of the worker's environment
    base_url: str
    probe: ReadinessProbe
    request_model: str | None  # the "model" field for API requests; None: omit it
    supports_api_key: bool
    warnings: tuple[str, ...] = ()
    embeds: bool = False  # a pooling model: the smoke test asks /v1/embeddings, not completions

    @property
    def masked_argv(self) -> tuple[str, ...]:
        return mask_argv(self.argv)

    @property
    def masked_env(self) -> dict[str, str]:
        return mask_env(self.env)


class ExternalCommand:
    """An engine run as an external command, never imported: the path an adapter was given,
    else the one its environment variable names (a GPU host's own install), else the default."""

    bin_env: ClassVar[str]

    def __init__(self, executable: str | None = None) -> None:
        self._executable = executable

    def default_executable(self) -> str:
        raise NotImplementedError

    @property
    def executable(self) -> str:
        return self._executable or os.environ.get(self.bin_env) or self.default_executable()


class EngineAdapter(Protocol):
    name: str
    supports_api_key: bool

    def build(self, spec: LaunchSpec) -> EngineCommand: ...

    def argv(self, spec: LaunchSpec, *, listen: bool = True) -> tuple[str, ...]:
        """The engine's command line: the one renderer of it. `build` spawns it with
        `listen`; the pages' copy-paste line leaves out what only the host knows (served
        name, address, port), so the engine's defaults apply there."""
        ...


def mask_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if _SECRET_ENV.search(k) and v else v) for k, v in env.items()}


def mask_argv(argv: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    masked: list[str] = []
    hide_next = False
    for arg in argv:
        flag, sep, _ = arg.partition("=")
        if hide_next and not arg.startswith("-"):
            masked.append(MASK)
            continue
        hide_next = arg in _SECRET_FLAGS
        masked.append(f"{flag}={MASK}" if sep and flag in _SECRET_FLAGS else arg)
    return tuple(masked)


def connect_host(host: str) -> str:
    """Where a client on the same machine reaches a server bound to `host`."""
    return LOOPBACK_HOST if host in _WILDCARD_HOSTS else host


def base_url(host: str, port: int) -> str:
    h = connect_host(host)
    return f"http://[{h}]:{port}" if ":" in h else f"http://{h}:{port}"


def common_env(spec: LaunchSpec) -> dict[str, str]:
    env = {
        MARKER_ENV: spec.deployment_id,
        **({OWNER_ENV: spec.owner} if spec.owner else {}),
        "PYTHONUNBUFFERED": "1",  # the log file is the only view of a starting engine
        "NO_COLOR": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    if spec.hf_offline:
        env["HF_HUB_OFFLINE"] = "1"
    if spec.hf_token:
        env["HF_TOKEN"] = spec.hf_token  # the environment, not argv: `ps` shows argv to all
    if spec.device == "cuda":
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA indices = NVML indices
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in spec.gpu_indices)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(dict(spec.extra_env))
    return env


def check_common(spec: LaunchSpec) -> None:
    if not spec.deployment_id:
        raise UnsupportedSpec("deployment_id is empty: the engine could not be found again")
    if not 0 < spec.port < 65536:
        raise UnsupportedSpec(f"port {spec.port} is out of range")
    if spec.device == "cuda" and not spec.gpu_indices:
        raise UnsupportedSpec("device cuda needs leased GPU indices; none were given")
    if any("\0" in a for a in spec.extra_args):
        raise UnsupportedSpec("extra_args contain a NUL byte")
    managed = {k for k, _ in spec.extra_env} & {MARKER_ENV, OWNER_ENV, "CUDA_VISIBLE_DEVICES"}
    if managed:
        raise UnsupportedSpec(f"extra_env may not set {sorted(managed)}: the panel sets them")


def refuse_lora(spec: LaunchSpec, engine: str) -> None:
    """Run-time LoRA adapters are vLLM's (its /v1/load_lora_adapter); other engines have none."""
    if spec.enable_lora:
        raise UnsupportedSpec(f"{engine} serves no LoRA adapters: launch with vLLM to load them")


def reject_flags(extra_args: tuple[str, ...], forbidden: dict[str, str]) -> None:
    for arg in extra_args:
        flag = arg.partition("=")[0]
        if flag in forbidden:
            raise UnsupportedSpec(f"extra argument {flag} is not allowed: {forbidden[flag]}")
