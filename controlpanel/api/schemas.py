"""The automation API's request and response bodies (pydantic, through ninja's Schema): the
OpenAPI schema is generated from these."""

from datetime import date, datetime
from typing import Any, Literal

from ninja import Field, Schema

from deployments.lifecycle import limits
from deployments.lifecycle.scaling import MAX_REPLICAS as SCALE_MAX
from deployments.planning.request import MAX_REPLICAS


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
    host: str
    status: str = Field(description="the state of all its replicas (running, degraded, …)")
    replicas_running: int
    replicas: list[ReplicaOut]
    created_by: str | None
    created_at: datetime
    command: list[str] = Field(description="the planned engine argv")


class DeploymentCreateIn(Schema):
    """As the launch form: blank plan fields take vLLM's defaults."""

    name: str = Field(max_length=limits.NAME_MAX_CHARS, description=limits.NAME_RULE)
    model_ref: str = Field(max_length=300, description="a Hub id or local:<root>/<path>")
    host: str = Field(max_length=100)
    engine: Literal["vllm", "transformers"] = "vllm"
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


class ScaleIn(Schema):
    replicas: int = Field(ge=1, le=SCALE_MAX, description="live replicas wanted")


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
    target: str = Field("", max_length=100, description="a host name; blank: what-if GPUs")
    gpus: str = Field("", max_length=60, description="what-if GPUs, such as 4x80GiB@nvlink")
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1, le=100_000)
    replicas: str = Field("", max_length=6, description="a number, or max")
    tensor_parallel_size: int | None = Field(None, ge=1, le=64)
    pipeline_parallel_size: int | None = Field(None, ge=1, le=64)


class PlanOut(Schema):
    ok: bool = Field(description="whether the chosen plan fits")
    error: str | None
    target: dict[str, Any]
    model_ref: str
    plan: dict[str, Any] | None = Field(description="memory per GPU, KV cache, the command")
    alternatives: list[dict[str, Any]]


class AuditQuery(Schema):
    actor: str = Field("", max_length=150)
    action: str = Field("", max_length=64)
    target: str = Field("", max_length=64, description="a target type, such as deployment")
    since: date | None = None


class AuditOut(Schema):
    id: int
    created_at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    detail: dict[str, Any]
    client_ip: str | None

    @staticmethod
    def resolve_actor(event: Any) -> str:
        return str(event.actor_name)


class UsageRow(Schema):
    key: str
    gpu_hours: float


class UsageOut(Schema):
    since: datetime
    until: datetime
    gpu_hours: float
    by_user: list[UsageRow]
    by_deployment: list[UsageRow]
