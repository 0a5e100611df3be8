"""The engine's LaunchSpec on this host: the plan's settings (`Deployment.snapshot`) with this
host's facts (its port, key, leased GPUs, the device the engine runs on, weights it fetched).

On simulated GPUs the engine runs on the CPU in their place; a plan made for the CPU device
carries its own KV space and core binding; llama-server and transformers serve take only what
applies to them. Whether the engine may sleep is the platform's answer (engines.platforms):
never a flag it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from deployments.catalog.sources import LOCAL_PREFIX
from deployments.engines import LaunchSpec, get_adapter, platforms
from deployments.engines.llamacpp_memory import visible_order
from deployments.handoff import sealed
from deployments.host.downloads import fetching
from deployments.host.owner import engine_owner
from deployments.host.ray import cluster
from deployments.models import Deployment, Engine


def launch_spec(d: Deployment, port: int, snapshot: Path | None = None) -> LaunchSpec:
    """The engine's settings: the plan's (`Deployment.snapshot`) plus this host's facts; with
    `snapshot` (weights this worker fetched), the engine loads that folder offline instead of
    reaching the Hub itself."""
    plan = d.snapshot
    leases = d.leases.filter(active=True, gpu__host=d.host).select_related("gpu")
    # CUDA0 is the first GPU CUDA_VISIBLE_DEVICES names: llama-server's -ts shares follow it.
    indices = visible_order(plan.gpu_indices, [lease.gpu.index for lease in leases])
    spans = d.spans_hosts
    # The CPU in place of simulated GPUs (not for a plan made for the CPU itself, nor over
    # several hosts: vLLM on Ray, a test engine standing in).
    simulated = d.host.simulated and not spans and plan.engine_args.device != "cpu"
    on_cpu = d.engine_device == platforms.CPU
    model, revision, hub_env = _weights_ref(d, snapshot, spans)
    facts: dict[str, Any] = {
        "deployment_id": str(d.pk),
        "model": model,
        "port": port,
        "host": settings.SHARDBOARD_ENGINE_HOST,
        "revision": revision,
        "served_model_name": d.name,
        "api_key": d.engine_api_key() if get_adapter(d.engine).supports_api_key else None,
        "gpu_indices": () if on_cpu else indices,
        "spans_hosts": spans,
        "ray_address": cluster.head_address(d) if spans else None,
        "node_address": settings.SHARDBOARD_RAY_NODE_ADDRESS if spans else None,
        "device": "cpu" if on_cpu else "cuda",
        "hf_offline": snapshot is not None or is_local(d),
        "hf_token": None if is_local(d) or snapshot else hub_token(d),  # offline: not needed
        "owner": engine_owner(),
        "extra_env": hub_env,
        # never a flag the platform refuses: an engine that cannot sleep scales to zero
        "sleep_mode": d.sleep_after_s is not None and platforms.sleeps(d.engine, d.engine_device),
    }
    if simulated:
        facts |= {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}
    if simulated and d.engine == Engine.VLLM:
        facts |= _vllm_for_simulated_gpus()
    if d.engine == Engine.LLAMACPP:
        facts |= _llamacpp(simulated)
    elif d.engine != Engine.VLLM:
        facts |= _beside_vllm(plan.request)
    return plan.launch_spec(**facts)


def _vllm_for_simulated_gpus() -> dict[str, Any]:
    """Simulated GPUs run no engine: the real vLLM runs on this host's CPU in their place (its
    CPU build), with a small KV cache of its own rather than the GPU plan's share, in eager
    mode (no torch.compile: a start takes seconds, not a minute), in the dtype vLLM picks for
    this CPU. The plan's layout and leases stay the simulated GPUs'."""
    return {
        "gpu_memory_utilization": None,
        "kv_cache_memory_bytes": settings.SHARDBOARD_SIMULATED_KV_CACHE_BYTES,
        "dtype": None,
        "block_size": None,
        "enforce_eager": True,
        "decode_context_parallel_size": None,
        "kv_cache_dtype": None,
    }


def _llamacpp(simulated: bool) -> dict[str, Any]:
    """llama-server takes the plan's -c, -np and its own placement; vLLM's knobs mean
    nothing to it. On a simulated host it runs on the CPU, so no GPU placement applies."""
    facts: dict[str, Any] = {
        "gpu_memory_utilization": None,
        "max_num_batched_tokens": None,
        "dtype": None,
        "quantization": None,
        "kv_cache_dtype": None,
        "decode_context_parallel_size": None,
        "block_size": None,
        "enforce_eager": False,
    }
    if simulated:
        facts |= {"n_gpu_layers": None, "split_mode": None, "tensor_split": (), "main_gpu": None}
    return facts


def _beside_vllm(request: Mapping[str, Any]) -> dict[str, Any]:
    """An engine other than vLLM gets only the settings the user asked for: the planner's
    figures are vLLM's (transformers serve names what it ignores in its warnings)."""
    return {
        "gpu_memory_utilization": request.get("gpu_memory_utilization"),
        "max_model_len": None,
        "max_num_seqs": request.get("max_num_seqs"),
        "max_num_batched_tokens": None,
        "quantization": None,
        "decode_context_parallel_size": None,
        "block_size": None,
        "enforce_eager": False,
    }


def _weights_ref(
    d: Deployment, snapshot: Path | None, spans_hosts: bool
) -> tuple[str, str | None, tuple[tuple[str, str], ...]]:
    """The model argument, its revision, and the Hub environment of the engine.

    Over several hosts the snapshot path is the lead's alone: vLLM hands the model argument
    as given to its workers on every node (ModelConfig in the VllmConfig each RayWorkerProc
    gets), so there it is the repo id pinned to the fetched commit, found offline in each
    node's own cache (each node's HF_HUB_CACHE: raynodes.commands.node_env)."""
    if snapshot is None:
        return d.model_id, d.revision or None, ()
    if spans_hosts:
        return d.model_id, snapshot.name, (("HF_HUB_CACHE", str(fetching.cache_dir())),)
    if files := fetching.weights_of(d)[1]:
        return str(snapshot / files[0]), None, ()  # llama-server: the GGUF's (first) file
    return str(snapshot), None, ()


def is_local(d: Deployment) -> bool:
    return d.snapshot.model_ref.startswith(LOCAL_PREFIX) or d.model_id.startswith("/")


def hub_token(d: Deployment) -> str | None:
    """The launcher's own token, else this host's HF_TOKEN setting (gated or private repos)."""
    return sealed.unseal(d.hub_token_sealed, deployment_id=d.pk) or settings.HF_TOKEN or None
