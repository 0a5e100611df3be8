"""vLLM's sleep mode as Shardboard uses it: which level, what stays on the GPU, the requests.

vLLM 0.33 (sources read from the release): `--enable-sleep-mode` (engine/arg_utils.py:1047)
puts weights and KV cache in the cumem pool; the routes are dev-mode ones, registered only with
VLLM_SERVER_DEV_MODE=1 (entrypoints/launchers/api_server/routers.py:46) and outside the API
key's guard, which covers /v1, /v2, /inference and /cohere only
(entrypoints/serve/middleware/authenticate.py:11):

- ``POST /sleep?level=1|2&mode=abort|wait|keep`` → ``{"status": "sleeping", "level": n}``
  (entrypoints/serve/dev/sleep/api_router.py:26-34). Level 1 copies the weights to host RAM
  and drops the KV cache; level 2 drops both, keeping only the model's buffers on the CPU
  (v1/worker/gpu_worker.py:301-320), so its weights must be loaded again after the wake.
- ``POST /wake_up[?tags=weights&tags=kv_cache]`` → ``{"status": "awake"|"sleeping", "tags"}``
  ("sleeping" while some tag is still asleep; api_router.py:44-55).
- ``GET /is_sleeping`` → ``{"is_sleeping": bool}`` (api_router.py:58-61).
- ``POST /collective_rpc {"method": "reload_weights"}`` (entrypoints/serve/dev/rpc/
  api_router.py:23-56 → v1/worker/gpu_worker.py:636) loads the weights from the model's files
  again: the second step of a level-2 wake.
- the gauge ``vllm:engine_sleep_state{sleep_state="awake"|"weights_offloaded"|"discard_all"}``
  (v1/metrics/loggers.py:593-613, set at 1335-1352): awake 0/1, level 1 or 2.

Pure: no I/O (the host worker's deployments.host.engine_sleep sends the requests).
"""

from __future__ import annotations

from dataclasses import dataclass

# Host RAM a level-1 sleep must leave for everything else (the OS, the worker, other engines'
# CPU buffers): the weights are copied into pinned memory, and running the host out of RAM
# kills processes, not just the sleep.
RAM_MARGIN_BYTES = 4 * 1024**3
# What an engine keeps on a GPU while it sleeps when the plan has no figures (rows from before
# the planner stored them): a CUDA context with cuBLAS/NCCL workspaces is about 0.5-1 GiB.
CONTEXT_FLOOR_BYTES = 1024**3

SLEEP_PATH = "/sleep"
WAKE_PATH = "/wake_up"
IS_SLEEPING_PATH = "/is_sleeping"
RPC_PATH = "/collective_rpc"
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
SLEEP_FLAG = "--enable-sleep-mode"


@dataclass(frozen=True, slots=True)
class SleepChoice:
    level: int  # 1 or 2
    why: str


def choose_level(*, weights_bytes: int, ram_available_bytes: int) -> SleepChoice:
    """Level 1 when the host's available RAM holds this replica's weights with the margin
    left (the wake is then a copy back, seconds); level 2 otherwise (the wake reloads the
    weights from disk, still without a new process, CUDA graphs or profiling)."""
    need = weights_bytes + RAM_MARGIN_BYTES
    gib = 1024**3
    if ram_available_bytes >= need:
        return SleepChoice(
            1,
            f"level 1: host RAM has {ram_available_bytes / gib:.1f} GiB available for "
            f"{weights_bytes / gib:.1f} GiB of weights",
        )
    return SleepChoice(
        2,
        f"level 2: host RAM has {ram_available_bytes / gib:.1f} GiB available, under the "
        f"{need / gib:.1f} GiB the weights need with a {RAM_MARGIN_BYTES / gib:.0f} GiB margin; "
        "the wake reloads them from disk",
    )


def kept_bytes(*, non_torch_bytes: int, cuda_graph_bytes: int, total_bytes: int) -> int:
    """What one GPU keeps leased while its engine sleeps, from the plan's figures there: the
    CUDA context and the memory vLLM does not allocate through its sleep pool (non-torch:
    NCCL, cuBLAS workspaces; the CUDA graphs' pool). Weights, activations and the KV cache are
    given back. A plan without the figures (all 0) keeps CONTEXT_FLOOR_BYTES."""
    kept = non_torch_bytes + cuda_graph_bytes
    return kept if kept > 0 else min(CONTEXT_FLOOR_BYTES, total_bytes or CONTEXT_FLOOR_BYTES)
