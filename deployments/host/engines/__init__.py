"""Engine adapters: turn a LaunchSpec into argv, env and a readiness probe, per engine.

Used by the host worker to build what it spawns (the gateway reads an adapter's capabilities
only). No Django, nothing of the project outside this package.
"""

from __future__ import annotations

from collections.abc import Callable

from deployments.host.engines.base import (
    MARKER_ENV,
    OWNER_ENV,
    EngineAdapter,
    EngineCommand,
    LaunchSpec,
    ReadinessProbe,
    UnsupportedSpec,
    mask_argv,
    mask_env,
)
from deployments.host.engines.transformers_serve import TransformersAdapter
from deployments.host.engines.vllm import VllmAdapter

__all__ = [
    "MARKER_ENV",
    "OWNER_ENV",
    "EngineAdapter",
    "EngineCommand",
    "LaunchSpec",
    "ReadinessProbe",
    "TransformersAdapter",
    "UnsupportedSpec",
    "VllmAdapter",
    "engine_names",
    "get_adapter",
    "mask_argv",
    "mask_env",
    "register_adapter",
]

_FACTORIES: dict[str, Callable[[], EngineAdapter]] = {
    "vllm": VllmAdapter,
    "transformers": TransformersAdapter,
}


def engine_names() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def get_adapter(name: str) -> EngineAdapter:
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(engine_names())
        raise UnsupportedSpec(f"unknown engine {name!r}; known: {known}") from None
    return factory()


def register_adapter(name: str, factory: Callable[[], EngineAdapter]) -> None:
    _FACTORIES[name] = factory
