"""What a plan on a host's CPU (vLLM's CPU build) shows beyond a GPU plan: its one memory bar
over every rank, each rank's KV space and cores, and its command with the environment."""

from __future__ import annotations

import shlex
from typing import Any

from deployments import planning
from deployments.catalog.commands import planned_env
from deployments.planning.units import GIB

CPU_NO_IMAGE = (
    "# vLLM's CPU build is not the vllm/vllm-openai image: run the vllm serve line above on "
    "the host (scripts/vllm.sh installs it)."
)
# A CPU plan's one bar is the RAM of every rank: no CUDA graphs; the engine's processes (API
# server, EngineCore, each worker's runtime) in place of the GPU's non-torch memory.
CPU_PARTS = (
    ("weights_bytes", "Weights"),
    ("activation_bytes", "Activations"),
    ("non_torch_bytes", "Engine processes"),
    ("kv_cache_bytes", "KV cache"),
)


def cpu_details(p: planning.Plan) -> dict[str, Any] | None:
    """What a CPU plan sets beyond a GPU plan's figures: each rank's KV space and cores."""
    if p.device != "cpu":
        return None
    e = p.engine_settings
    kv = e.kv_cache_memory_bytes or 0
    ranks = p.tensor_parallel_size
    return {
        "kv_cache_memory_bytes": kv,
        "kv_cache_text": f"{kv / GIB:.2f} GiB on each of {ranks} rank{'s' if ranks != 1 else ''}",
        "threads_bind": e.cpu_threads_bind or "",
    }


def command_line(p: planning.Plan, argv: list[str]) -> str:
    """The command with the environment it needs (a CPU plan's core range per rank)."""
    env = planned_env(p)
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])
