"""Values and the protocol shared by every GPU backend.

Every metric may be ``None`` when the device or driver does not support it. A lost GPU or a
driver error is reported in the sample (``lost`` / ``error``), never raised to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, get_args

MIB = 1 << 20  # NVML reports bytes; the pages and Prometheus speak MiB

TopologyLevel = Literal["NV", "PIX", "PXB", "PHB", "NODE", "SYS"]
TOPOLOGY_LEVELS: tuple[TopologyLevel, ...] = get_args(TopologyLevel)

# nvmlClocksEventReason* bits, named the way nvidia-smi -q names them (snake_case).
THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLE_REASONS: frozenset[str] = frozenset(THROTTLE_REASON_BITS.values())


class GpuBackendError(Exception):
    """A backend cannot be built (bad name, bad spec, no driver); the message is one line."""


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    pci_bus_id: str
    numa_node: int | None
    kind: str = "gpu"  # "cpu": the host's CPU and RAM as a device (monitoring.gpus.cpu)


@dataclass(frozen=True, slots=True)
class TopologyLink:
    """How GPUs ``a`` < ``b`` reach each other, in ``nvidia-smi topo -m`` terms."""

    a: int
    b: int
    level: TopologyLevel
    nvlink_count: int
    p2p_read_ok: bool | None

    @property
    def label(self) -> str:
        return f"NV{self.nvlink_count}" if self.level == "NV" else self.level


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None
    name: str


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    gpu_util_pct: float | None
    mem_util_pct: float | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_mw: int | None
    power_limit_mw: int | None
    sm_clock_mhz: int | None
    fan_pct: float | None
    throttle_reasons: tuple[str, ...]
    ecc_uncorrected: int | None
    processes: tuple[GpuProcess, ...]
    lost: bool
    error: str | None


@dataclass(frozen=True, slots=True)
class HostSample:
    ts_ms: int
    gpus: tuple[GpuSample, ...]


def failed_sample(index: int, uuid: str, *, lost: bool, error: str) -> GpuSample:
    """The sample of a GPU that could not be read: every metric unknown."""
    return GpuSample(
        index=index,
        uuid=uuid,
        gpu_util_pct=None,
        mem_util_pct=None,
        memory_used_bytes=None,
        memory_free_bytes=None,
        memory_total_bytes=None,
        temperature_c=None,
        power_mw=None,
        power_limit_mw=None,
        sm_clock_mhz=None,
        fan_pct=None,
        throttle_reasons=(),
        ecc_uncorrected=None,
        processes=(),
        lost=lost,
        error=error,
    )


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASON_BITS.items() if mask & bit)


class GpuBackend(Protocol):
    simulated: bool

    def devices(self) -> tuple[DeviceInfo, ...]: ...

    def topology(self) -> tuple[TopologyLink, ...]:
        """One link per unordered pair ``a < b``."""
        ...

    def sample(self) -> HostSample:
        """Never raises for a device or driver failure: it is reported per GPU."""
        ...

    def close(self) -> None: ...
