"""GPU split planner: how a model fits on GPUs, computed the way vLLM will allocate it.

Pure Python: no Django, no I/O, no clock. Frozen, slotted dataclasses and pure functions.

Public API::

    ModelSpec.from_config(config: Mapping[str, Any], *, safetensors: SafetensorsSummary | None
                          = None, name: str = "") -> ModelSpec        # raises ModelSpecError
    SafetensorsSummary(parameter_counts: Mapping[str, int], vision_parameters: int = 0,
                       total_bytes: int | None = None)
    Gpu(index, name, total_bytes, free_bytes, busy=False)
    Host(name, gpus: tuple[Gpu, ...], links: dict[tuple[int, int], str])  # "NV12", "PIX", ...
    Inventory(hosts: tuple[Host, ...], host_link: str = "NET")
    parse_gpus(spec: str, *, host="local", name="") -> Inventory   # "4x80GiB", "8x80GiB@pcie"
    PlanRequest(model="", revision="", tensor_parallel_size=None, pipeline_parallel_size=None,
                dtype="auto", quantization=None, kv_cache_dtype="auto", max_model_len=None,
                max_num_seqs=None, max_num_batched_tokens=None, gpu_memory_utilization=None,
                block_size=None, vllm_version="0.33.0", enforce_eager=False)
    plan(spec: ModelSpec, inventory: Inventory, request: PlanRequest) -> PlanResult
        PlanResult.plans: tuple[Plan, ...] (best first), PlanResult.best: Plan | None
        Plan: tensor_parallel_size, pipeline_parallel_size, replicas, fits, reasons, warnings,
              per_gpu: tuple[GpuMemory, ...] (rank order), kv_cache_tokens, max_concurrency,
              command: tuple[str, ...], gpus: tuple[tuple[GpuRef(host, index), ...], ...]
              (one tuple per replica), max_model_len, multi_host
        GpuMemory: weights_bytes, activation_bytes, non_torch_bytes, cuda_graph_bytes,
                   kv_cache_bytes, total_bytes, gpu_total_bytes, budget_bytes, free_bytes
    result_to_json(result) -> dict     # exactly the `plan --json` contract
    plan_details(plan) -> dict         # contract keys + GPU ids, budget/free, max_model_len
    estimate_layout(spec, request, *, tp, pp, gpu_total_bytes, gpu_name="", nvlink=True)
        -> LayoutMemory                # one layout on identical GPUs, no inventory
    PlanningError (ValueError): bad input; ModelSpecError, InventorySpecError are subclasses.
"""

from .errors import InventorySpecError, ModelSpecError, PlanningError
from .inventory import Gpu, Host, Inventory, parse_gpus
from .kvcache import kv_bytes_per_token
from .memory import GpuMemory, LayoutMemory, evaluate_layout
from .plans import GpuRef, Plan, PlanResult
from .request import GOALS, PlanRequest, Settings, resolve
from .result import plan_details, plan_to_json, result_to_json
from .search import plan
from .spec import MlaSpec, ModelSpec, MoeSpec, SafetensorsSummary
from .versions import DEFAULT_VLLM_VERSION


def estimate_layout(
    spec: ModelSpec,
    request: PlanRequest,
    *,
    tp: int,
    pp: int,
    gpu_total_bytes: int,
    gpu_name: str = "",
    nvlink: bool = True,
) -> LayoutMemory:
    """Memory of one TP × PP layout on identical GPUs of ``gpu_total_bytes``."""
    request.validate()
    settings = resolve(spec, request, gpu_total_bytes, gpu_name)
    totals = [gpu_total_bytes] * (tp * pp)
    return evaluate_layout(spec, settings, tp=tp, pp=pp, gpu_totals=totals, nvlink=nvlink)


__all__ = [
    "DEFAULT_VLLM_VERSION",
    "GOALS",
    "Gpu",
    "GpuMemory",
    "GpuRef",
    "Host",
    "Inventory",
    "InventorySpecError",
    "LayoutMemory",
    "MlaSpec",
    "ModelSpec",
    "ModelSpecError",
    "MoeSpec",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "PlanningError",
    "SafetensorsSummary",
    "Settings",
    "estimate_layout",
    "kv_bytes_per_token",
    "parse_gpus",
    "plan",
    "plan_details",
    "plan_to_json",
    "result_to_json",
]
