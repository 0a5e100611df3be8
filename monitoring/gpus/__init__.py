"""GPU backends: ``get_backend("auto" | "nvml" | "simulated", ...)``.

``auto`` uses NVML when a driver answers and otherwise falls back to the simulated backend,
logging why. Backends are imported lazily so that a machine without nvidia-ml-py's library
still imports this package.

Read by the host worker's sampler (and by the tests' contract suite); no Django, nothing of
the project outside this package.
"""

from __future__ import annotations

import logging
from pathlib import Path

from monitoring.gpus.base import (
    DeviceInfo,
    GpuBackend,
    GpuBackendError,
    GpuProcess,
    GpuSample,
    HostSample,
    TopologyLink,
)

__all__ = [
    "BACKEND_NAMES",
    "DeviceInfo",
    "GpuBackend",
    "GpuBackendError",
    "GpuProcess",
    "GpuSample",
    "HostSample",
    "TopologyLink",
    "get_backend",
]

log = logging.getLogger(__name__)

BACKEND_NAMES = ("auto", "nvml", "simulated")


def get_backend(
    name: str = "auto",
    *,
    simulated_spec: str,
    state_dir: Path,
    seed: int = 0,
) -> GpuBackend:
    if name not in BACKEND_NAMES:
        raise GpuBackendError(f"unknown GPU backend {name!r} (one of {', '.join(BACKEND_NAMES)})")
    if name == "simulated":
        return _simulated(simulated_spec, state_dir, seed)
    if name == "nvml":
        return _nvml()
    try:
        backend = _nvml()
    except GpuBackendError as exc:
        log.warning("GPU backend auto: %s; using simulated GPUs %r", exc, simulated_spec)
        return _simulated(simulated_spec, state_dir, seed)
    if not backend.devices():
        log.warning("GPU backend auto: NVML sees no GPU; using simulated GPUs %r", simulated_spec)
        return _simulated(simulated_spec, state_dir, seed)
    log.info("GPU backend auto: NVML with %d GPU(s)", len(backend.devices()))
    return backend


def _nvml() -> GpuBackend:
    from monitoring.gpus.nvml import NvmlBackend

    return NvmlBackend()


def _simulated(spec: str, state_dir: Path, seed: int) -> GpuBackend:
    from monitoring.gpus.simulated import SimulatedBackend

    return SimulatedBackend(spec, state_dir=state_dir, seed=seed)
