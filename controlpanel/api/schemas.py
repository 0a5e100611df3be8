"""The automation API's request and response bodies (pydantic, through ninja's Schema): the
OpenAPI schema is generated from these."""

from datetime import date, datetime
from typing import Any, Literal

from ninja import Field, Schema

from deployments.lifecycle import limits
from deployments.lifecycle.lora_form import MAX_LORAS
from deployments.lifecycle.scaling import MAX_REPLICAS as SCALE_MAX
from deployments.planning.search.request import MAX_REPLICAS


class Message(Schema):
    message: str = Field(description="what went wrong and what to change")


# What every operation may answer before it runs: no caller, a caller refused, a bad field.
REFUSALS: dict[int, type[Message]] = {401: Message, 403: Message, 422: Message}


class ReplicaOut(Schema):
    id: int
    index: int
    status: str
    gpus: list[int] = Field(description="GPU indices the replica holds now")


class DeploymentOut(Schema):
    id: int = Field(description="the first replica's id: the deployment's id")
    name: str
    model: str
    revision: str
    engine: str
    device: str = Field(
        description="where its engine runs: gpu, or cpu (a plan on the host's CPU, or any "
        "engine of a host whose GPUs are simulated, in their place)"
    )
    idle: str = Field(
        description="what an idle setting does to it: sleeps, or scales to zero (and why it "
        "cannot sleep there)"
    )
    host: str = Field(description="the host that runs the engine (the first stage's)")
    hosts: list[str] = Field(
        description="every host its first replica spans, the engine's first (one, unless it "
        "spans hosts on Ray)"
    )
    team: str | None = Field(description="the team it belongs to; null: launched by no team")
    status: str = Field(description="the state of all its replicas (running, degraded, …)")
    replicas_running: int
    replicas: list[ReplicaOut]
    created_by: str | None
    created_at: datetime
    command: list[str] = Field(description="the planned engine argv")
    sleep_after_min: float | None = Field(
        None, description="sleeps or scales to zero (see idle) after this long idle; null: never"
    )
    woke_at: datetime | None = Field(None, description="when it last woke or started on demand")


class _PolicyBounds(Schema):
    """A scaling policy's fields but its min (deployments.lifecycle.policy.PolicySettings)."""

    max_replicas: int = Field(ge=1, le=SCALE_MAX)
    ttft_p90_s: float | None = Field(None, gt=0, description="p90 time-to-first-token SLO")
    tpot_p90_s: float | None = Field(None, gt=0, description="p90 time-per-output-token SLO")
    waiting_per_replica: float | None = Field(None, gt=0)
    kv_usage: float | None = Field(None, gt=0, le=1, description="KV-cache usage, 0..1")
    up_after_s: float = Field(15.0, ge=1, le=3600)
    down_after_s: float = Field(60.0, ge=1, le=86400)


class ScalingPolicyIn(_PolicyBounds):
    min_replicas: int = Field(
        ge=0, le=SCALE_MAX, description="0: the autoscaler stops at 1 (below is idle sleep's)"
    )


class LaunchPolicyIn(_PolicyBounds):
    """A scaling policy set with the launch: ScalingPolicyIn's fields, its min optional."""

    min_replicas: int | None = Field(
        None, ge=0, le=SCALE_MAX, description="null: the replicas launched"
    )


class DeploymentCreateIn(Schema):
    """As the launch form: blank plan fields take vLLM's defaults."""

    name: str = Field(max_length=limits.NAME_MAX_CHARS, description=limits.NAME_RULE)
    model_ref: str = Field(
        max_length=300,
        description="a Hub id or local:<root>/<path>; for llamacpp a GGUF: local:<root>/<path>.gguf, or org/repo:QUANT (the host fetches that file alone)",
    )
    host: str = Field(max_length=100)
    engine: Literal["vllm", "transformers", "llamacpp"] = "vllm"
    device: Literal["gpu", "cpu"] = Field(
        "gpu",
        description="the host's GPUs, or its CPU (vLLM's CPU build: weights and KV space in RAM)",
    )
    kv_cache_bytes: int | None = Field(
        None, ge=1, le=1 << 46, description="device cpu: each rank's KV space; null: from free RAM"
    )
    revision: str = Field("", max_length=100)
    tensor_parallel_size: int | None = Field(None, ge=1, le=64)
    pipeline_parallel_size: int | None = Field(None, ge=1, le=64)
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1, le=limits.MAX_NUM_SEQS)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantization: str | None = Field(None, max_length=40)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    gpu_memory_utilization: float | None = Field(None, ge=0.05, le=1.0)
    concurrency: int | None = Field(None, ge=1, le=100_000)
    replicas: int | Literal["max"] = Field(1, description=f"1 to {MAX_REPLICAS}, or max")
    placement: Literal["spread", "packed"] = "spread"
    auto_restart: bool | None = Field(None, description="null: the server's default")
    sleep_after_min: float | None = Field(
        None, gt=0, le=7 * 24 * 60, description="sleep or scale to zero after this long idle"
    )
    hosts: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="further hosts one replica spans (pipeline stages across them, vLLM on Ray)",
    )
    team: str | None = Field(
        None, max_length=63, description="the team it is for; null: your only team"
    )
    scaling_policy: LaunchPolicyIn | None = Field(
        None,
        description="autoscale from the launch (as PUT …/scaling-policy); null: the replica "
        "count stays as launched. Not with replicas max nor further hosts",
    )
    # llama.cpp's own placement (engine llamacpp), as the GGUF plan panel posts it; unset: the
    # planner's choice on the host's free GPUs.
    gpus: list[int] = Field(
        default_factory=list, max_length=64, description="llamacpp: GPU indices"
    )
    cache_type_k: Literal["f16", "q8_0", "q4_0"] | None = Field(None, description="llamacpp: -ctk")
    cache_type_v: Literal["f16", "q8_0", "q4_0"] | None = Field(None, description="llamacpp: -ctv")
    flash_attn: Literal["on", "off"] | None = Field(None, description="llamacpp: -fa")
    split_mode: Literal["layer", "row"] | None = Field(None, description="llamacpp: -sm")
    tensor_split: list[float] = Field(
        default_factory=list, max_length=64, description="llamacpp: -ts ratios, one per GPU"
    )
    allow_partial_offload: bool = Field(
        False, description="llamacpp: layers may stay on the CPU (-ngl below the layer count)"
    )
    # vLLM's LoRA slots: adapters then load at run time (POST …/deployments/{id}/adapters)
    enable_lora: bool = Field(False, description="vllm: --enable-lora (adapters at run time)")
    max_loras: int | None = Field(
        None, ge=1, le=MAX_LORAS, description="vllm: --max-loras, adapters in one batch"
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] | None = Field(
        None, description="vllm: --max-lora-rank; null: 16"
    )
    max_cpu_loras: int | None = Field(
        None, ge=1, le=1024, description="vllm: --max-cpu-loras, adapters kept loaded"
    )


class AdapterIn(Schema):
    name: str = Field(max_length=limits.NAME_MAX_CHARS, description="its model name in /v1/")
    source: str = Field(max_length=300, description="local:<root>/<path> or a Hub id")
    revision: str = Field("", max_length=100, description="a Hub branch, tag or commit")


class AdapterReplicaOut(Schema):
    id: int
    index: int
    status: str = Field(description="loading, loaded, failed, unloading or unloaded")
    error: str


class AdapterOut(Schema):
    name: str
    source: str
    revision: str = Field(description="the Hub commit it was read at; empty for a local one")
    status: str = Field(description="loading, loaded, unloading, unloaded or failed")
    parent: str = Field(description="the deployment it is loaded on")
    base_model: str
    rank: int
    alpha: float
    target_modules: list[str]
    size_bytes: int
    error: str
    replicas: list[AdapterReplicaOut]
    created_at: datetime
    note: str = Field(
        "", description="what vLLM does with more adapters than max_loras or max_cpu_loras"
    )


class ScaleIn(Schema):
    replicas: int = Field(ge=1, le=SCALE_MAX, description="live replicas wanted")


class IdleIn(Schema):
    sleep_after_min: float | None = Field(
        gt=0,
        le=7 * 24 * 60,
        description="sleep (vLLM) or scale to zero after this many minutes without a request; "
        "null: never",
    )


class GpuOut(Schema):
    host: str
    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    reserved_bytes: int = Field(description="held by active deployments' leases")
    present: bool


class HostOut(Schema):
    name: str
    online: bool
    simulated: bool
    backend: str
    last_heartbeat: datetime | None
    gpus: list[GpuOut]


class PlanQuery(Schema):
    ref: str = Field(max_length=300, description="a Hub id or local:<root>/<path>")
    revision: str = Field("", max_length=100)
    target: str = Field(
        "",
        max_length=100,
        description="a host name; fleet: every online host; picked: the hosts in `hosts`; "
        "blank or whatif: what-if GPUs",
    )
    hosts: list[str] = Field(
        default_factory=list, max_length=64, description="with target=picked: the hosts"
    )
    gpus: str = Field("", max_length=60, description="what-if GPUs, such as 4x80GiB@nvlink")
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1, le=100_000)
    replicas: str = Field("", max_length=6, description="a number, or max")
    tensor_parallel_size: int | None = Field(None, ge=1, le=64)
    pipeline_parallel_size: int | None = Field(None, ge=1, le=64)
    learned_correction: Literal["on", "off"] | None = Field(
        None, description="off: without the correction learned from the fleet's recorded starts"
    )
    device: Literal["gpu", "cpu"] | None = Field(
        None,
        description="cpu: vLLM's CPU build on the hosts' CPUs (what-if `gpus` is then CORESxRAM, "
        "such as 8x64GiB)",
    )
    kv_cache_bytes: int | None = Field(
        None, ge=1, description="with device=cpu: each rank's KV space (default: from free RAM)"
    )
    # A GGUF reference (org/repo:QUANT, local:<root>/<file>.gguf) is planned for llama.cpp
    # with these instead; the vLLM fields above are ignored for it.
    context_tokens: int | None = Field(None, ge=1, le=1 << 24, description="GGUF: -c")
    slots: int | None = Field(None, ge=1, le=256, description="GGUF: parallel slots, -np")
    cache_type_k: Literal["f16", "q8_0", "q4_0"] | None = Field(None, description="GGUF: -ctk")
    cache_type_v: Literal["f16", "q8_0", "q4_0"] | None = Field(None, description="GGUF: -ctv")
    flash_attn: Literal["on", "off"] | None = Field(None, description="GGUF: -fa")
    split_mode: Literal["layer", "row"] | None = Field(None, description="GGUF: -sm")
    tensor_split: str = Field(
        "", max_length=100, description="GGUF: pinned -ts ratios, e.g. 3,2; blank: the planner's"
    )
    allow_partial_offload: bool = Field(
        False, description="GGUF: may layers stay on the CPU (-ngl below the layer count)"
    )


class LlamaCppDeviceOut(Schema):
    """One device of a llama.cpp plan: the CPU or a GPU (in -ts order). On a GPU,
    used_bytes + margin_bytes <= free_bytes is the fit rule."""

    device: str = Field(description="CPU, or GPU 0, GPU 1, ... in -ts order")
    gpu_index: int | None
    gpu_name: str | None
    layers: int = Field(description="repeating blocks held")
    holds_output: bool = Field(description="the output layer (always the last GPU's)")
    layer_span: str
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int = Field(description="llama.cpp's compute buffer for one -ub batch")
    output_buffer_bytes: int = Field(description="the CPU's logits buffer: slots x vocab x 4 B")
    overhead_bytes: int = Field(description="a GPU's CUDA context, as the planner counts it")
    used_bytes: int
    token_embd_bytes: int | None = Field(None, description="CPU: token_embd, always there")
    total_bytes: int | None = None
    free_bytes: int | None = Field(None, description="GPU: free before this plan")
    margin_bytes: int | None = None
    left_bytes: int | None = Field(None, description="GPU: free after this plan")


class LlamaCppPlanOut(Schema):
    """The plan of a GGUF model on llama.cpp (engine "llama.cpp"); plan_json in
    deployments.catalog.gguf_plan. The page's display fields (rows, chart, texts) come too."""

    engine: Literal["llama.cpp"]
    host: str
    fits: bool
    gpus: int
    split_mode: str = Field(description="layer, row, or none on one GPU")
    tensor_split: list[float] = Field(description="-ts, one share per GPU")
    tensor_split_pinned: bool
    gpu_layers: int = Field(description="-ngl")
    layers_total: int = Field(description="blocks + the output layer")
    partial_offload_allowed: bool
    partial_offload: dict[str, Any] | None = Field(
        description="when layers stay on the CPU: how many, their bytes, the cost in words"
    )
    context_cells: int
    settings: dict[str, Any]
    cpu: LlamaCppDeviceOut
    devices: list[LlamaCppDeviceOut]
    flags: list[str] = Field(description="every llama-server flag that sizes or places memory")
    reasons: list[str]
    warnings: list[str]


class PlanOut(Schema):
    ok: bool = Field(description="whether the chosen plan fits")
    error: str | None
    target: dict[str, Any]
    model_ref: str
    plan: dict[str, Any] | LlamaCppPlanOut | None = Field(
        description="vLLM: memory per GPU, KV cache, the command; a GGUF model: the llama.cpp "
        "plan (LlamaCppPlanOut, engine llama.cpp)"
    )
    alternatives: list[dict[str, Any]]


class AuditQuery(Schema):
    actor: str = Field("", max_length=150)
    action: str = Field("", max_length=64)
    target: str = Field("", max_length=64, description="a target type, such as deployment")
    since: date | None = None


class AuditOut(Schema):
    """A row with what its hash covers (controlpanel.auditchain.canonical.row_hash), so a
    client can check the chain: each row's prev_hash is the row_hash of the row before it."""

    id: int
    seq: int | None = Field(description="its place in the hash chain")
    created_at: str = Field(description="UTC, to the microsecond, as hashed")
    actor: str
    actor_id: int | None
    actor_name: str
    action: str
    target_type: str
    target_id: str
    detail: dict[str, Any]
    client_ip: str | None
    prev_hash: str
    row_hash: str
    row_mac: str = Field(
        description="row_hash MACed with the server's audit key (checked by audit_verify); "
        "empty on rows written before the chain was keyed"
    )


class AuditPageOut(Schema):
    items: list[AuditOut] = Field(description="oldest first")
    next_after_id: int | None = Field(
        description="pass as after_id for the next page; null: this was the last"
    )


Series = dict[str, dict[str, float]]


class QuotaOut(Schema):
    team: str
    gpus_held: int
    max_gpus: int | None
    gpu_hours_month: float
    gpu_hours_per_month: float | None
    stop_over_monthly: bool
    flagged: list[str] = Field(description="its live deployments past the monthly limit")


class UsageOut(Schema):
    """What the Usage page shows (teams.usage.summary)."""

    since: str
    until: str
    days: list[str]
    gpu_hours: dict[str, Series] = Field(description="team and user: name → day → GPU-hours")
    gateway_tokens: dict[str, Series] = Field(
        description="token and deployment: name → day → tokens"
    )
    quotas: list[QuotaOut]
    gateway_limits: dict[str, int] = Field(description="the global /v1/ limits; 0: none")
    tokens_today_by_user: dict[str, int]
