"""The NVML backend (nvidia-ml-py, ``import pynvml``).

NVML is initialised once per process, lazily, so that a forked worker child initialises its
own copy. Unsupported queries become ``None`` (as nvitop does); a lost GPU or any other
NVML error on one device is reported in that device's sample.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from itertools import combinations
from typing import Any, TypeVar

import psutil
import pynvml  # type: ignore[import-untyped]

from monitoring.gpus.base import (
    DeviceInfo,
    GpuBackendError,
    GpuProcess,
    GpuSample,
    HostSample,
    TopologyLevel,
    TopologyLink,
    decode_throttle_reasons,
    failed_sample,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound)
_OLD_DRIVER = (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch)
_P2P_READ = 0  # pynvml.NVML_P2P_CAPS_INDEX_READ is the tuple (0,) in 13.615.71
_LEVELS: dict[int, TopologyLevel] = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "PIX",
    pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYS",
}

_init_lock = threading.Lock()
_init_pid: int | None = None


def _after_fork_in_child() -> None:
    global _init_lock
    _init_lock = threading.Lock()  # another thread may have held it at fork time


os.register_at_fork(after_in_child=_after_fork_in_child)


def ensure_nvml() -> None:
    """``nvmlInit`` once in this process; raise GpuBackendError with the driver's reason."""
    global _init_pid
    with _init_lock:
        if _init_pid == os.getpid():
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuBackendError(
                f"NVML unavailable: {exc} (is an NVIDIA driver installed?)"
            ) from exc
        _init_pid = os.getpid()


def _query(fn: Callable[..., T], *args: Any) -> T | None:
    try:
        return fn(*args)
    except _UNSUPPORTED:
        return None
    except pynvml.NVMLError_NoPermission:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_key(bus_id: str) -> str:
    """``00000000:18:00.0`` and ``0000:18:00.0`` name the same device."""
    parts = bus_id.lower().split(":")
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return f"{domain:x}:{':'.join(parts[-2:])}"


class NvmlBackend:
    simulated = False

    def __init__(self) -> None:
        ensure_nvml()
        self._pid = os.getpid()
        self._handles = self._open_handles()
        self._devices = tuple(self._device_info(i, h) for i, h in enumerate(self._handles))

    def _open_handles(self) -> list[Any]:
        count = int(pynvml.nvmlDeviceGetCount())
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def _handles_here(self) -> list[Any]:
        if self._pid != os.getpid():  # forked: handles belong to the parent's NVML
            ensure_nvml()
            self._handles, self._pid = self._open_handles(), os.getpid()
        return self._handles

    def _device_info(self, index: int, handle: Any) -> DeviceInfo:
        memory = _memory_info(handle)
        pci = pynvml.nvmlDeviceGetPciInfo_v3(handle)
        numa = _query(pynvml.nvmlDeviceGetNumaNodeId, handle)
        return DeviceInfo(
            index=index,
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_total_bytes=int(memory.total),
            pci_bus_id=_text(pci.busId),
            numa_node=None if numa is None or int(numa) < 0 else int(numa),
        )

    def devices(self) -> tuple[DeviceInfo, ...]:
        return self._devices

    def close(self) -> None:
        """NVML stays initialised for the process (ref-counted, shared by every backend)."""

    # --- topology -----------------------------------------------------------------------

    def topology(self) -> tuple[TopologyLink, ...]:
        handles = self._handles_here()
        remote = [self._nvlink_remotes(h) for h in handles]
        buses = [_bus_key(d.pci_bus_id) for d in self._devices]
        links = []
        for a, b in combinations(range(len(handles)), 2):
            nvlinks = sum(1 for bus in remote[a] if bus == buses[b])
            links.append(self._link(a, b, handles[a], handles[b], nvlinks))
        return tuple(links)

    def _link(self, a: int, b: int, ha: Any, hb: Any, nvlinks: int) -> TopologyLink:
        level: TopologyLevel = "NV"
        if nvlinks == 0:
            ancestor = _query(pynvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
            level = _LEVELS.get(int(ancestor), "SYS") if ancestor is not None else "SYS"
        status = _query(pynvml.nvmlDeviceGetP2PStatus, ha, hb, _P2P_READ)
        p2p = None if status is None else int(status) == pynvml.NVML_P2P_STATUS_OK
        return TopologyLink(a, b, level, nvlinks, p2p)

    def _nvlink_remotes(self, handle: Any) -> list[str]:
        remotes = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remotes.append(
                    _bus_key(_text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
                )
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue
            except pynvml.NVMLError_FunctionNotFound:
                break
        return remotes

    # --- sampling -----------------------------------------------------------------------

    def sample(self) -> HostSample:
        ts_ms = _now_ms()
        try:
            handles = self._handles_here()
        except (GpuBackendError, pynvml.NVMLError) as exc:
            log.warning("NVML unavailable while sampling: %s", exc)
            gpus = tuple(
                failed_sample(d.index, d.uuid, lost=False, error=str(exc)) for d in self._devices
            )
            return HostSample(ts_ms=ts_ms, gpus=gpus)
        return HostSample(
            ts_ms=ts_ms,
            gpus=tuple(self._sample_one(d, h) for d, h in zip(self._devices, handles, strict=True)),
        )

    def _sample_one(self, device: DeviceInfo, handle: Any) -> GpuSample:
        try:
            return self._read(device, handle)
        except pynvml.NVMLError_GpuIsLost as exc:
            log.error("GPU %d (%s) is lost: %s", device.index, device.uuid, exc)
            return failed_sample(device.index, device.uuid, lost=True, error=str(exc))
        except pynvml.NVMLError as exc:
            log.warning("GPU %d (%s): NVML error: %s", device.index, device.uuid, exc)
            return failed_sample(device.index, device.uuid, lost=False, error=str(exc))

    def _read(self, device: DeviceInfo, handle: Any) -> GpuSample:
        memory = _query(_memory_info, handle)
        util = _query(pynvml.nvmlDeviceGetUtilizationRates, handle)
        power = _query(pynvml.nvmlDeviceGetPowerUsage, handle)
        limit = _query(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        clock = _query(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
        fan = _query(pynvml.nvmlDeviceGetFanSpeed, handle)
        reasons = _query(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
        ecc = _query(
            pynvml.nvmlDeviceGetTotalEccErrors,
            handle,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        return GpuSample(
            index=device.index,
            uuid=device.uuid,
            gpu_util_pct=None if util is None else float(util.gpu),
            mem_util_pct=None if util is None else float(util.memory),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_free_bytes=None if memory is None else int(memory.free),
            memory_total_bytes=None if memory is None else int(memory.total),
            temperature_c=_temperature_c(handle),
            power_mw=None if power is None else int(power),
            power_limit_mw=None if limit is None else int(limit),
            sm_clock_mhz=None if clock is None else int(clock),
            fan_pct=None if fan is None else float(fan),
            throttle_reasons=() if reasons is None else decode_throttle_reasons(int(reasons)),
            ecc_uncorrected=None if ecc is None else int(ecc),
            processes=_processes(handle),
            lost=False,
            error=None,
        )


def _memory_info(handle: Any) -> Any:
    """v2 (``used`` without driver-reserved memory); v1 on drivers older than 515."""
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    except _OLD_DRIVER:
        return pynvml.nvmlDeviceGetMemoryInfo(handle)


def _temperature_c(handle: Any) -> float | None:
    try:
        return float(pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU))
    except (*_UNSUPPORTED, *_OLD_DRIVER):
        value = _query(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
        return None if value is None else float(value)


def _processes(handle: Any) -> tuple[GpuProcess, ...]:
    found: dict[int, int | None] = {}
    for fn in (
        pynvml.nvmlDeviceGetComputeRunningProcesses,
        pynvml.nvmlDeviceGetGraphicsRunningProcesses,
    ):
        for proc in _query(fn, handle) or ():
            used = None if proc.usedGpuMemory is None else int(proc.usedGpuMemory)
            pid = int(proc.pid)
            found[pid] = used if found.get(pid) is None else found[pid]
    return tuple(GpuProcess(pid, used, _process_name(pid)) for pid, used in sorted(found.items()))


_PROCESS_QUERIES = (
    (pynvml.nvmlDeviceGetComputeRunningProcesses, pynvml.nvmlDeviceGetComputeRunningProcesses_v2),
    (pynvml.nvmlDeviceGetGraphicsRunningProcesses, pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2),
)


def _running_processes(
    v3: Callable[[Any], Any], v2: Callable[[Any], Any], handle: Any
) -> list[Any]:
    """The _v3 query, or _v2 on drivers older than 510 (as gpustat does)."""
    try:
        return list(v3(handle))
    except _OLD_DRIVER:
        return list(_query(v2, handle) or ())
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission):
        return []


def _process_name(pid: int) -> str:
    """Empty when the pid is not visible here (another PID namespace, or already gone)."""
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return ""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
