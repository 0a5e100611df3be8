"""`transformers serve` (transformers 5.23): the CPU engine, with no API key of its own."""

from __future__ import annotations

import sys
from pathlib import Path

from deployments.engines.base import (
    LOOPBACK_HOST,
    EngineCommand,
    ExternalCommand,
    LaunchSpec,
    ReadinessProbe,
    UnsupportedSpec,
    base_url,
    check_common,
    common_env,
    refuse_lora,
    reject_flags,
)

TRANSFORMERS_BIN_ENV = "SHARDBOARD_TRANSFORMERS_BIN"
_QUANTIZATIONS = frozenset({"bnb-4bit", "bnb-8bit"})
_FORBIDDEN_EXTRA = {
    "--host": "transformers serve has no API key, so it binds to 127.0.0.1 only",
    "--port": "the panel picks the port",
    "--device": "set the spec's device",
}


def default_executable() -> str:
    return str(Path(sys.executable).parent / "transformers")


class TransformersAdapter(ExternalCommand):
    name = "transformers"
    supports_api_key = False
    bin_env = TRANSFORMERS_BIN_ENV

    def default_executable(self) -> str:
        return default_executable()

    def build(self, spec: LaunchSpec) -> EngineCommand:
        _check(spec)
        return EngineCommand(
            engine=self.name,
            argv=self.argv(spec),
            env=common_env(spec),
            base_url=base_url(LOOPBACK_HOST, spec.port),
            # GET /v1/models scans the HF cache and never lists a local path: /health only.
            probe=ReadinessProbe(),
            request_model=None,  # the server is pinned to its model; omitting it is accepted
            supports_api_key=False,
            warnings=_warnings(spec),
        )

    def argv(self, spec: LaunchSpec, *, listen: bool = True) -> tuple[str, ...]:
        model = f"{spec.model}@{spec.revision}" if spec.revision else spec.model
        argv = [self.executable, "serve", model, "--device", spec.device]
        if listen:
            argv += ["--host", LOOPBACK_HOST, "--port", str(spec.port)]
        if spec.dtype:
            argv += ["--dtype", spec.dtype]
        if spec.quantization:
            argv += ["--quantization", spec.quantization]
        return (*argv, *spec.extra_args)


def _check(spec: LaunchSpec) -> None:
    check_common(spec)
    refuse_lora(spec, "transformers serve")
    if spec.runner == "pooling":
        # transformers 5.23 routes chat, completions, responses, systemone and transcriptions
        # only (cli/serving/server.py:106-146): no /v1/embeddings to serve the model with.
        raise UnsupportedSpec(
            "transformers serve cannot serve an embedding model (it has no /v1/embeddings "
            "route): launch it on vLLM"
        )
    if spec.tensor_parallel_size != 1 or spec.pipeline_parallel_size != 1 or spec.spans_hosts:
        raise UnsupportedSpec("transformers serve runs one process: TP and PP must be 1")
    if spec.device == "cuda" and len(spec.gpu_indices) != 1:
        raise UnsupportedSpec("transformers serve on cuda uses exactly one leased GPU")
    if "@" in spec.model:
        raise UnsupportedSpec("transformers serve splits the model at '@': rename the path")
    if spec.quantization and spec.quantization not in _QUANTIZATIONS:
        raise UnsupportedSpec(f"transformers serve quantization must be one of {_QUANTIZATIONS}")
    reject_flags(spec.extra_args, _FORBIDDEN_EXTRA)


def _warnings(spec: LaunchSpec) -> tuple[str, ...]:
    warnings = []
    if spec.host != LOOPBACK_HOST:
        warnings.append(f"bound to {LOOPBACK_HOST}, not {spec.host}: the engine has no API key")
    if spec.api_key:
        warnings.append("transformers serve has no API key: only the panel's proxy checks it")
    ignored = {
        "gpu_memory_utilization": spec.gpu_memory_utilization,
        "max_model_len": spec.max_model_len,
        "max_num_seqs": spec.max_num_seqs,
        "kv_cache_dtype": spec.kv_cache_dtype,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "decode_context_parallel_size": spec.decode_context_parallel_size,
        "block_size": spec.block_size,
        "served_model_name": spec.served_model_name,
    }
    unused = sorted(k for k, v in ignored.items() if v is not None)
    if unused:
        warnings.append(f"ignored by transformers serve: {', '.join(unused)}")
    return tuple(warnings)
