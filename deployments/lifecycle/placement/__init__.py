"""One launch path whatever the engine: "place this model on these devices with this engine,
and give its snapshot", one implementation per engine, chosen once (`for_engine`).

- `refusal(request)`: what the engine refuses before anything is read (llama.cpp's one host);
- `place(host, request, hub_token=, overrides=)` → `Placed`: the model's source, the host
  that runs the engine, the snapshot (settings, every replica's devices and bytes) and the
  Hub token the host fetches with;
- `more(first, host, adding)`: the devices of more replicas of a running deployment's
  command (scaling, the autoscaler);
- `relaunch_fields(first)`: the engine's own LaunchRequest fields a relaunch keeps.

The launch (services.deployment_create), scaling and relaunch call nothing else of an engine;
the leases come from the snapshot alike for all (`Placed.leases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from deployments.catalog.gguf_sources import is_gguf_ref
from deployments.handoff.snapshot import GpuSlot
from deployments.lifecycle.errors import DeploymentError
from deployments.lifecycle.placement.llamacpp import LlamaCppPlacement
from deployments.lifecycle.placement.request import LaunchRequest, Leases, Placed, leases
from deployments.lifecycle.placement.vllm import TransformersPlacement, VllmPlacement
from deployments.models import Deployment, Engine
from monitoring.models import Host


class Placement(Protocol):
    engine: str

    def refusal(self, request: LaunchRequest) -> str | None: ...

    def place(
        self,
        host: Host,
        request: LaunchRequest,
        *,
        hub_token: str | None,
        overrides: Mapping[str, Any],
    ) -> Placed: ...

    def more(self, first: Deployment, host: Host, adding: int) -> list[list[GpuSlot]]: ...

    def relaunch_fields(self, first: Deployment) -> dict[str, Any]: ...


_PLACEMENTS: dict[str, Placement] = {
    Engine.VLLM: VllmPlacement(),
    Engine.TRANSFORMERS: TransformersPlacement(),
    Engine.LLAMACPP: LlamaCppPlacement(),
}
LAUNCHABLE_ENGINES = tuple(Engine(e) for e in _PLACEMENTS)


def for_engine(engine: str, model_ref: str | None = None) -> Placement:
    """The engine's placement; with `model_ref`, refused where the engine cannot load the
    model at all (llama-server loads GGUF files only, and no other engine here does)."""
    placement = _PLACEMENTS.get(engine)
    if placement is None:
        raise DeploymentError(f"Unknown engine {engine!r}; choose vllm, transformers or llamacpp.")
    if model_ref is not None and (problem := _pairing(engine, model_ref)):
        raise DeploymentError(problem)
    return placement


def _pairing(engine: str, model_ref: str) -> str | None:
    gguf = is_gguf_ref(model_ref)
    if engine == Engine.LLAMACPP and not gguf:
        return (
            f"{model_ref!r} is not a GGUF model; llama.cpp loads GGUF files only. Give a "
            "local:<root>/<path>.gguf file or a Hub GGUF repo with its quantization "
            "(org/Model-GGUF:Q4_K_M), or launch this model on vllm or transformers."
        )
    if engine != Engine.LLAMACPP and gguf:
        return (
            f"{model_ref!r} is a GGUF model; {engine} does not load GGUF files here. "
            "Launch it on llamacpp."
        )
    return None


__all__ = [
    "LAUNCHABLE_ENGINES",
    "LaunchRequest",
    "Leases",
    "Placed",
    "Placement",
    "for_engine",
    "leases",
]
