"""Engine adapters: turn a LaunchSpec into argv, env and a readiness probe, per engine.

Pure (no Django, no I/O), so both sides import it: the host worker builds what it spawns, the
web renders a plan's copy-paste command (`planned_argv`) with the same adapter's `argv`, and
the gateway reads an adapter's capabilities. A second engine is one more adapter here.
"""

from __future__ import annotations

from collections.abc import Callable

from deployments.engines.base import (
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
from deployments.engines.llamacpp import LlamaServerAdapter
from deployments.engines.transformers_serve import TransformersAdapter
from deployments.engines.vllm import VllmAdapter, cpu_env

__all__ = [
    "MARKER_ENV",
    "OWNER_ENV",
    "EngineAdapter",
    "EngineCommand",
    "LaunchSpec",
    "LlamaServerAdapter",
    "ReadinessProbe",
    "TransformersAdapter",
    "UnsupportedSpec",
    "VllmAdapter",
    "engine_names",
    "get_adapter",
    "mask_argv",
    "mask_env",
    "planned_argv",
    "planned_env",
    "register_adapter",
]

_FACTORIES: dict[str, Callable[..., EngineAdapter]] = {
    "vllm": VllmAdapter,
    "transformers": TransformersAdapter,
    "llamacpp": LlamaServerAdapter,
}


def engine_names() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def get_adapter(name: str, executable: str | None = None) -> EngineAdapter:
    """`executable`: where this host has the engine (deployments.host.enginebins); None: the
    adapter's own default."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(engine_names())
        raise UnsupportedSpec(f"unknown engine {name!r}; known: {known}") from None
    return factory(executable) if executable else factory()


# The copy-paste command names the engine's plain executable, not this machine's path to it.
_PLAIN: dict[str, Callable[[], EngineAdapter]] = {
    "vllm": lambda: VllmAdapter("vllm"),
    "transformers": lambda: TransformersAdapter("transformers"),
    "llamacpp": lambda: LlamaServerAdapter("llama-server"),
}


def planned_argv(name: str, spec: LaunchSpec) -> tuple[str, ...]:
    """The command a user would run for this spec: what the host spawns, less the served
    name, address and port only the host knows (`EngineAdapter.argv`)."""
    adapter = _PLAIN[name]() if name in _PLAIN else get_adapter(name)
    return adapter.argv(spec, listen=False)


def register_adapter(name: str, factory: Callable[[], EngineAdapter]) -> None:
    _FACTORIES[name] = factory


def planned_env(name: str, spec: LaunchSpec) -> dict[str, str]:
    """The environment a user sets for `planned_argv`'s command: what the plan relies on beyond
    the engine's defaults (vLLM on the CPU: one core range per rank), not the host's own."""
    if name == "vllm" and spec.device == "cpu":
        return cpu_env(spec)
    return {}
