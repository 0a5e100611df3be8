"""The host's own CPU and RAM as one more device beside its GPUs, sampled for real (psutil).

vLLM's CPU build runs on it, so it is registered and sampled like a GPU: a ``DeviceInfo`` of
kind "cpu" at ``CPU_INDEX`` and, every tick, a ``GpuSample`` whose utilization is the CPU's (all
the cores this worker may use), whose memory is the RAM (used = total - available, as vLLM's
CPU worker counts it) and whose processes are those of the engines' process groups with their
RSS, so that memory is attributed to deployments as on a GPU. ``WithCpu`` adds it to any GPU
backend. No Django, nothing of the project outside this package.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import psutil

from monitoring.gpus.base import (
    DeviceInfo,
    GpuBackend,
    GpuProcess,
    GpuSample,
    HostSample,
    TopologyLink,
    failed_sample,
)

# The CPU row's index on every host: fixed, so its row, leases and sample history keep their key
# across restarts and GPU changes, and above any GPU index (NVML and the simulated specs stop
# at 64 a host), so it never collides with one and lists after the GPUs.
CPU_INDEX = 1000
CPU_KIND = "cpu"
# The /proc/cpuinfo flags vLLM's CPU kernels branch on (platforms/cpu.py, cpu_attn.py):
# recorded with the host, not all ~150 of them.
ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "bf16",
    "sve",
)


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """What the planner needs of a host's CPU; stored as ``Host.info["cpu"]``."""

    name: str
    cores: int  # logical CPUs this process may run on (its affinity)
    core_ids: tuple[int, ...]
    numa_nodes: int
    isa: tuple[str, ...]
    arch: str
    total_bytes: int

    def as_info(self) -> dict[str, object]:
        return {
            "name": self.name,
            "cores": self.cores,
            "core_ids": list(self.core_ids),
            "numa_nodes": self.numa_nodes,
            "isa": list(self.isa),
            "arch": self.arch,
        }


def read_facts(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> CpuFacts:
    """This machine's CPU: model name and flags from cpuinfo, NUMA nodes from sysfs."""
    name, flags = _cpuinfo(proc / "cpuinfo")
    ids = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    ids = ids or tuple(range(os.cpu_count() or 1))
    nodes = sum(1 for p in (sys / "devices/system/node").glob("node[0-9]*")) or 1
    return CpuFacts(
        name=name or platform.processor() or platform.machine(),
        cores=len(ids),
        core_ids=ids,
        numa_nodes=nodes,
        isa=tuple(f for f in ISA_FLAGS if f in flags),
        arch=platform.machine(),
        total_bytes=int(psutil.virtual_memory().total),
    )


def _cpuinfo(path: Path) -> tuple[str, set[str]]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "", set()
    name, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model") and not name:
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return name, flags


class CpuDevice:
    """Samples the CPU and RAM; ``pgids`` gives the engines' process groups (refreshed by the
    worker's heartbeat), whose processes the sample lists with their RSS."""

    def __init__(
        self, host: str, pgids: Callable[[], Collection[int]], facts: CpuFacts | None = None
    ) -> None:
        self.facts = facts or read_facts()
        self.host = host
        self._pgids = pgids
        psutil.cpu_percent(interval=None)  # primes the counter: the next call covers one tick

    def info(self) -> DeviceInfo:
        return DeviceInfo(
            index=CPU_INDEX,
            uuid=f"CPU-{self.host}",
            name=f"CPU · {self.facts.name} · {self.facts.cores} cores",
            memory_total_bytes=self.facts.total_bytes,
            pci_bus_id="",
            numa_node=None,
            kind=CPU_KIND,
        )

    def sample(self) -> GpuSample:
        mem = psutil.virtual_memory()
        used = int(mem.total - mem.available)
        return GpuSample(
            index=CPU_INDEX,
            uuid=f"CPU-{self.host}",
            gpu_util_pct=float(psutil.cpu_percent(interval=None)),
            mem_util_pct=None,
            memory_used_bytes=used,
            memory_free_bytes=int(mem.available),
            memory_total_bytes=int(mem.total),
            temperature_c=None,
            power_mw=None,
            power_limit_mw=None,
            sm_clock_mhz=None,
            fan_pct=None,
            throttle_reasons=(),
            ecc_uncorrected=None,
            processes=engine_processes(set(self._pgids())),
            lost=False,
            error=None,
        )


def engine_processes(pgids: set[int]) -> tuple[GpuProcess, ...]:
    """The processes of these process groups with their resident memory (none when empty)."""
    if not pgids:
        return ()
    out = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if os.getpgid(proc.pid) not in pgids:
                continue
            out.append(GpuProcess(proc.pid, int(proc.memory_info().rss), proc.info["name"] or ""))
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # gone or not ours between the listing and the read
    return tuple(out)


class WithCpu:
    """A GPU backend plus the host's CPU device: the worker registers, samples and publishes
    through it; everything else keeps the GPU backend itself."""

    def __init__(self, backend: GpuBackend, cpu: CpuDevice) -> None:
        self.backend = backend
        self.cpu = cpu
        self.simulated = backend.simulated

    def devices(self) -> tuple[DeviceInfo, ...]:
        return (*self.backend.devices(), self.cpu.info())

    def topology(self) -> tuple[TopologyLink, ...]:
        return self.backend.topology()  # links between GPUs: the CPU has none

    def sample(self) -> HostSample:
        gpus = self.backend.sample()
        try:
            cpu = self.cpu.sample()
        except (psutil.Error, OSError) as exc:
            cpu = failed_sample(CPU_INDEX, f"CPU-{self.cpu.host}", lost=False, error=str(exc))
        return HostSample(gpus.ts_ms or time.time_ns() // 1_000_000, (*gpus.gpus, cpu))

    def close(self) -> None:
        self.backend.close()
