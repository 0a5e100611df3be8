"""GPU split planner: how a model fits on GPUs, computed the way vLLM will allocate it.

Pure: no Django, no I/O, no clock, nothing else of the project (ruff's banned-api rule and
import-linter hold it); frozen, slotted dataclasses and pure functions. The callers read
config.json, safetensors headers and the GPU inventory (deployments.catalog) and hand the
values in. The entry points, each documented where it is defined:

- ``ModelSpec.from_config`` (with a ``SafetensorsSummary``): a config.json dict → ``ModelSpec``.
- ``Inventory`` of ``Host``s and their ``Gpu``s, or ``parse_gpus("4x80GiB@nvlink")``; a
  ``Host.cpu`` (``Cpu``: cores, NUMA nodes, RAM, ISA flags) is its CPU as a device.
- ``plan(spec, inventory, PlanRequest(...))`` → ``PlanResult``: ``Plan``s, best first, each with
  its ``GpuMemory`` per GPU, KV-cache tokens, concurrency and the engine settings it relies on.
  ``PlanRequest.replicas`` asks for N replicas (None: as many as fit), placed ``spread`` over
  hosts or ``packed``; a plan that fits only within the planner's error band is ``tight``, with
  its ``tight_reasons`` (search/margin.py). ``PlanRequest.device="cpu"`` plans vLLM's CPU build
  on the hosts' CPUs (search/cpu.py; the platform's own rules in memory/cpu_platform.py):
  ``Plan.device == "cpu"``, TP over cores, one device slot whose memory covers every rank, the
  KV space in bytes (``PlanRequest.kv_cache_bytes``, or chosen from free RAM); a what-if CPU
  is ``parse_cpu("8x64GiB")``.
- ``estimate_layout``: one TP × PP layout on identical GPUs, without an inventory.
- ``result_to_json`` (the ``plan --json`` contract), ``plan_to_json``, ``plan_details``.
- ``share_lines``: what a plan reserves of each GPU and leaves free for other deployments;
  with a load stated (``PlanRequest.concurrency``, ``sizes_share``) the utilization is sized.
- ``learn_correction``: a per-(GPU model, vLLM version) ``Correction`` from the residuals of
  recorded starts; handed back in ``PlanRequest.corrections`` (memory/correction.py).
- ``PoolingSpec`` (``ModelSpec.pooling``): an embedding or classification model, served by
  vLLM's pooling runner; an encoder keeps no KV cache (model/pooling.py).
- ``format_notes``: how a model's weights are stored unlike a dense 16-bit transformer.
- ``with_hf_quant_config``: config.json with a ModelOpt checkpoint's hf_quant_config.json.
- llama.cpp (GGUF): ``gguf_spec`` (header key/values + ``GgufTensor``s → ``GgufSpec``),
  ``plan_llamacpp(spec, inventory, LlamaCppRequest(...))`` → ``LlamaCppPlan``s with the CPU's and
  each GPU's ``DeviceMemory`` and the explicit placement flags; ``one_machine`` reads a what-if
  spec's terms as one machine's GPUs.
- LoRA: ``PlanRequest(enable_lora=True, max_loras=..., max_lora_rank=...)`` adds the adapter
  slots vLLM allocates (``GpuMemory.lora_bytes``, memory/lora.py); ``adapter_spec`` reads an
  adapter's config and header into an ``AdapterSpec``, ``adapter_problems`` says why it does
  not fit a model (model/adapter.py).
- ``PlanningError`` (a ValueError) for input that cannot be planned; ``ModelSpecError`` and
  ``InventorySpecError`` are its kinds.

``__all__`` is the public surface; the modules behind it are not. They sit in four
sub-packages, each importing only those below it (an import-linter ``layers`` contract):
``search`` (the request, the TP × PP search, plans) over ``memory`` (what vLLM makes of one
layout) and ``fleet`` (inventory, placement), over ``model`` (what config.json says); the
root's ``errors`` and ``units`` lie under all four.
"""

from .errors import InventorySpecError, ModelSpecError, PlanningError
from .fleet.inventory import Cpu, Gpu, Host, Inventory, parse_cpu, parse_gpus
from .memory.correction import Correction
from .memory.correction import learn as learn_correction
from .memory.kvcache import kv_bytes_per_token
from .memory.kvnotes import layer_notes
from .memory.layout import GpuMemory, LayoutMemory, evaluate_layout
from .memory.llamacpp import DeviceMemory, LlamaCppSettings
from .memory.lora import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS, LORA_RANKS, LoraConfig
from .memory.settings import Settings
from .memory.versions import DEFAULT_VLLM_VERSION
from .model.adapter import (
    AdapterError,
    AdapterSpec,
    AdapterTensor,
    adapter_problems,
    adapter_spec,
)
from .model.formatnotes import format_notes
from .model.gguf import GgufSpec, GgufTensor, gguf_spec
from .model.pooling import ST_POOLING_TYPES, PoolingSpec
from .model.quant import with_hf_quant_config
from .model.spec import MlaSpec, ModelSpec, MoeSpec, SafetensorsSummary
from .search.llamacpp import LlamaCppPlan, LlamaCppRequest, one_machine, plan_llamacpp
from .search.plans import GpuRef, Plan, PlanResult
from .search.request import DEVICES, GOALS, PLACEMENTS, PlanRequest, resolve
from .search.result import plan_details, plan_to_json, result_to_json
from .search.search import plan
from .search.sharing import share_lines, sizes_share


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
    "DEFAULT_MAX_LORAS",
    "DEFAULT_MAX_LORA_RANK",
    "DEFAULT_VLLM_VERSION",
    "DEVICES",
    "GOALS",
    "LORA_RANKS",
    "PLACEMENTS",
    "ST_POOLING_TYPES",
    "AdapterError",
    "AdapterSpec",
    "AdapterTensor",
    "Correction",
    "Cpu",
    "DeviceMemory",
    "GgufSpec",
    "GgufTensor",
    "Gpu",
    "GpuMemory",
    "GpuRef",
    "Host",
    "Inventory",
    "InventorySpecError",
    "LayoutMemory",
    "LlamaCppPlan",
    "LlamaCppRequest",
    "LlamaCppSettings",
    "LoraConfig",
    "MlaSpec",
    "ModelSpec",
    "ModelSpecError",
    "MoeSpec",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "PlanningError",
    "PoolingSpec",
    "SafetensorsSummary",
    "Settings",
    "adapter_problems",
    "adapter_spec",
    "estimate_layout",
    "format_notes",
    "gguf_spec",
    "kv_bytes_per_token",
    "layer_notes",
    "learn_correction",
    "one_machine",
    "parse_cpu",
    "parse_gpus",
    "plan",
    "plan_details",
    "plan_llamacpp",
    "plan_to_json",
    "result_to_json",
    "share_lines",
    "sizes_share",
    "with_hf_quant_config",
]
