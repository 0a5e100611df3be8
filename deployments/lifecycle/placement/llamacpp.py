"""llama.cpp's placement: a GGUF on llama-server, planned by the llama.cpp planner on one host
(lifecycle.gguf_launch), each replica leasing its GPUs' bytes from the plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deployments.handoff.snapshot import GpuSlot
from deployments.lifecycle import gguf_launch
from deployments.lifecycle.placement.request import LaunchRequest, Placed
from deployments.lifecycle.placement.vllm import cpu_device_refusal
from deployments.models import Deployment, Engine
from monitoring.models import Host


class LlamaCppPlacement:
    engine = str(Engine.LLAMACPP)

    def refusal(self, request: LaunchRequest) -> str | None:
        return cpu_device_refusal(request, "llama.cpp") or gguf_launch.layout_problem(
            replicas=request.replicas, hosts=request.hosts
        )

    def place(
        self,
        host: Host,
        request: LaunchRequest,
        *,
        hub_token: str | None,
        overrides: Mapping[str, Any],
    ) -> Placed:
        token = gguf_launch.hub_token_for(request.model_ref, hub_token)
        gguf = gguf_launch.plan_gguf(
            host=host,
            model_ref=request.model_ref,
            plan_request=request.plan_request,
            gpu_indices=request.gpu_indices,
            options=request.llamacpp,
            replicas=request.replicas or 1,
            hub_token=token,
        )
        snapshot = gguf_launch.snapshot(gguf, overrides)
        return Placed(self.engine, gguf.source, host, snapshot, token)

    def more(self, first: Deployment, host: Host, adding: int) -> list[list[GpuSlot]]:
        groups = gguf_launch.more_replicas(first, host, adding)
        return [[GpuSlot("", i) for i in group] for group in groups]

    def relaunch_fields(self, first: Deployment) -> dict[str, Any]:
        """Its cache types, -fa and split mode; the split itself is planned again."""
        return {"llamacpp": gguf_launch.settings_of(first, split=False)}
