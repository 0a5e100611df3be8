"""`PlanSnapshot`: what the web decided at launch and what the host must do, typed and versioned.

The launch service (and scaling, for a replica it adds) writes one per deployment row in
`Deployment.plan`; everything else reads it through `Deployment.snapshot`, so no caller knows
the JSON's keys. The host builds its engine's `LaunchSpec` from it (`launch_spec`), and the
web renders the planned command from the same spec with the same adapter: nothing parses a
rendered command back.

Version 1 is the untyped dict rows carried until version 2 (`planning.plan_details` plus
`model_ref`, `request` and the flags `retired`/`multi_host`, now the columns `retired` and
`spans_hosts`): `from_json` reads it, so rows written before still load. Its engine settings
existed only inside the `vllm serve` argv the planner rendered then (`command`):
`_engine_from_argv` reads them from there, for those old rows alone. A new plan's settings come
typed (`Plan.engine_settings`). Pure: no Django, so adapters and tests use it without a database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from deployments import planning
from deployments.engines import planned_argv, planned_env
from deployments.engines.base import LaunchSpec

VERSION = 2
_FIGURE_KEYS = (
    "weights_bytes",
    "activation_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "kv_cache_bytes",
    "total_bytes",
    "gpu_total_bytes",
    "budget_bytes",
    "free_bytes",
    "correction_bytes",
    "lora_bytes",
)


# The EngineArgs only llama-server reads, passed to the LaunchSpec under the same names.
LLAMACPP_ARGS = (
    "n_gpu_layers",
    "split_mode",
    "tensor_split",
    "main_gpu",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "n_parallel",
    "ubatch",
)


class SnapshotError(ValueError):
    """A stored plan of a version this code does not know (written by a newer release)."""


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU of a replica: its host ("" for the deployment's own) and device index."""

    host: str
    index: int


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """The planner's bytes on one GPU of a replica; the last three are 0 on rows from before
    they were stored."""

    weights_bytes: int = 0
    activation_bytes: int = 0
    non_torch_bytes: int = 0
    cuda_graph_bytes: int = 0
    kv_cache_bytes: int = 0
    total_bytes: int = 0
    gpu_total_bytes: int = 0
    budget_bytes: int = 0
    free_bytes: int = 0
    correction_bytes: int = 0  # of non_torch_bytes: the fleet-learned correction applied
    lora_bytes: int = 0  # the LoRA adapter slots (planning/memory/lora.py)


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """The engine settings the plan relies on; None leaves the engine its own default."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    decode_context_parallel_size: int | None = None
    block_size: int | None = None
    enforce_eager: bool = False
    # vLLM's pooling runner (an embedding/classification model); None on generative rows and
    # on rows written before (version 2 stays readable: absent keys take these defaults)
    runner: str | None = None
    convert: str | None = None
    spans_hosts: bool = False  # vLLM's Ray executor places the stages on several hosts
    # "cpu": vLLM's CPU build on the host's CPU (its one device slot is the CPU row), with each
    # rank's KV space in bytes and one core range per rank; rows written before are "gpu".
    device: str = "gpu"
    kv_cache_memory_bytes: int | None = None
    cpu_threads_bind: str | None = None
    # vLLM's LoRA slots: adapters load and unload at run time (lifecycle.adapters)
    enable_lora: bool = False
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    # llama-server's placement (engines.llamacpp); None: the adapter's rule, () for an even -ts
    n_gpu_layers: int | None = None
    split_mode: str | None = None
    tensor_split: tuple[float, ...] = ()
    main_gpu: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    n_parallel: int | None = None
    ubatch: int | None = None

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True, slots=True)
class PlanSnapshot:
    """A deployment row's plan: the engine's settings, its GPUs and the planner's figures."""

    engine_args: EngineArgs
    model_ref: str = ""  # as launched: a Hub id or ``local:<name>``; "" on very old rows
    # The launch's overrides (PlanRequest fields, replicas asked): a relaunch plans with them.
    request: Mapping[str, Any] = field(default_factory=dict)
    gpus: tuple[tuple[GpuSlot, ...], ...] = ()  # this row's replica first (only, on a row)
    per_gpu: tuple[GpuFigures, ...] = ()
    kv_cache_tokens: int | None = None  # None: not known (a row written without figures)
    max_concurrency: float | None = None
    requested_max_model_len: int = 0
    replicas: int = 0
    replicas_asked: int = 0
    fits: bool = True
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    tight_reasons: tuple[str, ...] = ()
    version: int = VERSION

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The device indices of this row's replica, as planned."""
        return tuple(g.index for g in self.gpus[0]) if self.gpus else ()

    @property
    def embeds(self) -> bool:
        """The deployment serves embeddings (vLLM's pooling runner), not generation."""
        return self.engine_args.runner == "pooling"

    @property
    def context_clipped(self) -> bool:
        """Serves a shorter context than was asked for."""
        return 0 < (self.engine_args.max_model_len or 0) < self.requested_max_model_len

    def with_gpus(self, gpus: Sequence[Sequence[GpuSlot]]) -> PlanSnapshot:
        return replace(self, gpus=tuple(tuple(r) for r in gpus))

    def with_request(self, **changes: Any) -> PlanSnapshot:
        return replace(self, request={**self.request, **changes})

    def launch_spec(self, **facts: Any) -> LaunchSpec:
        """The engine's spec from the plan's settings; `facts` are the host's own (model,
        port, key, GPUs leased...) and any setting the host overrides."""
        e = self.engine_args
        settings: dict[str, Any] = {
            "tensor_parallel_size": e.tensor_parallel_size,
            "pipeline_parallel_size": e.pipeline_parallel_size,
            "gpu_memory_utilization": e.gpu_memory_utilization,
            "max_model_len": e.max_model_len,
            "max_num_seqs": e.max_num_seqs,
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "dtype": e.dtype,
            "quantization": e.quantization,
            "kv_cache_dtype": e.kv_cache_dtype,
            "decode_context_parallel_size": e.decode_context_parallel_size,
            "block_size": e.block_size,
            "enforce_eager": e.enforce_eager,
            "runner": e.runner,
            "convert": e.convert,
            "spans_hosts": e.spans_hosts,
            "kv_cache_memory_bytes": e.kv_cache_memory_bytes,
            "cpu_threads_bind": e.cpu_threads_bind,
            "enable_lora": e.enable_lora,
            "max_loras": e.max_loras,
            "max_lora_rank": e.max_lora_rank,
            "max_cpu_loras": e.max_cpu_loras,
            **{name: getattr(e, name) for name in LLAMACPP_ARGS},
        }
        if e.device == "cpu":  # a GPU plan's device ("cuda", or the CPU standing in for
            settings["device"] = "cpu"  # simulated GPUs) is the host's to give in `facts`
        return LaunchSpec(**{**settings, **facts})

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "engine_args": {
                f.name: _plain(getattr(self.engine_args, f.name)) for f in fields(EngineArgs)
            },
            "model_ref": self.model_ref,
            "request": dict(self.request),
            "gpus": [[{"host": g.host, "index": g.index} for g in r] for r in self.gpus],
            "per_gpu": [{k: getattr(g, k) for k in _FIGURE_KEYS} for g in self.per_gpu],
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "requested_max_model_len": self.requested_max_model_len,
            "replicas": self.replicas,
            "replicas_asked": self.replicas_asked,
            "fits": self.fits,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "tight_reasons": list(self.tight_reasons),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanSnapshot:
        """Any version this code knows; a row without ``version`` is version 1."""
        version = int(data.get("version", 1))
        if version == 1:
            return _from_v1(data)
        if version != VERSION:
            raise SnapshotError(f"plan snapshot version {version} is newer than this code")
        args = dict(data["engine_args"])
        if "tensor_split" in args:  # a JSON list
            args["tensor_split"] = tuple(float(x) for x in args["tensor_split"] or ())
        engine_args = EngineArgs(
            **{f.name: args[f.name] for f in fields(EngineArgs) if f.name in args}
        )
        return cls(engine_args=engine_args, **_common(data))


def from_plan(
    p: planning.Plan, *, model_ref: str = "", request: Mapping[str, Any] | None = None
) -> PlanSnapshot:
    """The snapshot of a plan the planner just made: its engine settings as it resolved them."""
    details = planning.plan_details(p)
    engine = EngineArgs(
        tensor_parallel_size=p.tensor_parallel_size,
        pipeline_parallel_size=p.pipeline_parallel_size,
        max_model_len=p.max_model_len,
        spans_hosts=p.multi_host,
        device=p.device,
        **asdict(p.engine_settings),
    )
    common = _common({**details, "model_ref": model_ref, "request": dict(request or {})})
    return PlanSnapshot(engine_args=engine, **common)


def planned_command(
    plan: PlanSnapshot, engine: str, *, model: str, revision: str = ""
) -> tuple[str, ...]:
    """The command a user runs for this plan: the engine adapter's own renderer, the one the
    host spawns with, less what only the host knows (served name, address, port, key)."""
    spec = plan.launch_spec(
        deployment_id="planned",
        model=model,
        port=8000,
        revision=revision or None,
        gpu_indices=plan.gpu_indices,  # llama-server's -ts has one share per GPU
    )
    return planned_argv(engine, spec)


def planned_environment(plan: PlanSnapshot, engine: str) -> dict[str, str]:
    """What the command needs in its environment beyond the engine's defaults (vLLM on the
    CPU: VLLM_CPU_OMP_THREADS_BIND), from the same adapter."""
    spec = plan.launch_spec(deployment_id="planned", model="MODEL", port=8000)
    return planned_env(engine, spec)


def _common(data: Mapping[str, Any]) -> dict[str, Any]:
    known = set(_FIGURE_KEYS)
    return {
        "model_ref": str(data.get("model_ref", "")),
        "request": dict(data.get("request") or {}),
        "gpus": tuple(
            tuple(GpuSlot(str(g.get("host") or ""), int(g["index"])) for g in r)
            for r in data.get("gpus") or ()
        ),
        "per_gpu": tuple(
            GpuFigures(**{k: int(v) for k, v in g.items() if k in known})
            for g in data.get("per_gpu") or ()
        ),
        "kv_cache_tokens": _maybe(int, data.get("kv_cache_tokens")),
        "max_concurrency": _maybe(float, data.get("max_concurrency")),
        "requested_max_model_len": int(data.get("requested_max_model_len") or 0),
        "replicas": int(data.get("replicas") or 0),
        "replicas_asked": int(data.get("replicas_asked") or 0),
        "fits": bool(data.get("fits", True)),
        "reasons": tuple(data.get("reasons") or ()),
        "warnings": tuple(data.get("warnings") or ()),
        "tight_reasons": tuple(data.get("tight_reasons") or ()),
    }


def _plain(value: Any) -> Any:
    """JSON's own types: a tuple is stored as the list it reads back as."""
    return list(value) if isinstance(value, tuple) else value


def _maybe(kind: type, value: Any) -> Any:
    return None if value is None else kind(value)


def _from_v1(data: Mapping[str, Any]) -> PlanSnapshot:
    engine = _engine_from_argv(data.get("command") or ())
    engine = replace(
        engine,
        tensor_parallel_size=int(data.get("tensor_parallel_size") or 1),
        pipeline_parallel_size=int(data.get("pipeline_parallel_size") or 1),
        max_model_len=data.get("max_model_len", engine.max_model_len),
        spans_hosts=bool(data.get("multi_host")) or engine.spans_hosts,
    )
    return PlanSnapshot(engine_args=engine, **_common(data))


# Version 1's settings: the flags of the planner's `vllm serve` line, with their types.
_V1_FLAGS: dict[str, tuple[str, type]] = {
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--max-model-len": ("max_model_len", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--dtype": ("dtype", str),
    "--quantization": ("quantization", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--decode-context-parallel-size": ("decode_context_parallel_size", int),
    "--block-size": ("block_size", int),
}


def _engine_from_argv(argv: Sequence[str]) -> EngineArgs:
    args = [str(a) for a in argv]
    if not args:
        return EngineArgs()
    values: dict[str, Any] = {}
    for flag, value in zip(args, [*args[1:], ""], strict=True):
        if flag in _V1_FLAGS:
            name, kind = _V1_FLAGS[flag]
            values[name] = kind(value)
    values["enforce_eager"] = "--enforce-eager" in args
    ray = "--distributed-executor-backend" in args
    return EngineArgs(**values, spans_hosts=ray)
