"""Simulated GPU specs: ``4xH100-80GB@nvlink``, ``2xRTX4090-24GB@pcie,2xA100-40GB@nvlink``.

Grammar, comma-separated groups: ``[COUNT x] MODEL [-MEMGB] [@nvlink|@pcie]`` (default
``@pcie``). GPUs of an ``@nvlink`` group are all-to-all NVLink (NVSwitch); GPUs of a ``@pcie``
group share a PCIe switch (PIX). Groups are spread over two CPU sockets: groups on one socket
meet at the host bridge (PHB), groups on different sockets cross the socket link (SYS).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from monitoring.gpus.base import MIB, DeviceInfo, GpuBackendError, TopologyLevel, TopologyLink

MAX_GPUS = 64


@dataclass(frozen=True, slots=True)
class GpuModel:
    key: str
    name: str  # as NVML reports it
    memory_total_mib: int
    power_limit_w: int
    idle_power_w: int
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    nvlink_links: int  # 0: no NVLink
    has_fan: bool
    has_ecc: bool
    p2p_over_pcie: bool


_CATALOG: tuple[GpuModel, ...] = (
    GpuModel(
        "H100-80GB", "NVIDIA H100 80GB HBM3", 81559, 700, 70, 1980, 345, 18, False, True, True
    ),
    GpuModel("H200-141GB", "NVIDIA H200", 143771, 700, 75, 1980, 345, 18, False, True, True),
    GpuModel(
        "A100-40GB", "NVIDIA A100-SXM4-40GB", 40960, 400, 55, 1410, 210, 12, False, True, True
    ),
    GpuModel(
        "A100-80GB", "NVIDIA A100-SXM4-80GB", 81920, 400, 60, 1410, 210, 12, False, True, True
    ),
    GpuModel("L40S-48GB", "NVIDIA L40S", 46068, 350, 35, 2520, 210, 0, True, True, True),
    GpuModel("L4-24GB", "NVIDIA L4", 23034, 72, 16, 2040, 210, 0, True, True, True),
    GpuModel("A10-24GB", "NVIDIA A10", 23028, 150, 20, 1695, 210, 0, True, True, True),
    GpuModel("T4-16GB", "Tesla T4", 15360, 70, 10, 1590, 300, 0, True, True, True),
    GpuModel(
        "RTX4090-24GB", "NVIDIA GeForce RTX 4090", 24564, 450, 25, 2520, 210, 0, True, False, False
    ),
    GpuModel(
        "RTX3090-24GB", "NVIDIA GeForce RTX 3090", 24576, 350, 30, 1695, 210, 4, True, False, False
    ),
)
CATALOG: dict[str, GpuModel] = {m.key: m for m in _CATALOG}

_GROUP_RE = re.compile(
    r"^(?:(?P<count>\d+)\s*[xX]\s*)?(?P<model>[A-Za-z0-9]+?)(?:-(?P<mem>\d+)GB)?"
    r"(?:@(?P<link>[A-Za-z]+))?$"
)


@dataclass(frozen=True, slots=True)
class SimGroup:
    model: GpuModel
    count: int
    link: Literal["nvlink", "pcie"]


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    group: int
    model: GpuModel
    link: Literal["nvlink", "pcie"]
    numa_node: int


def parse_spec(spec: str) -> tuple[SimGroup, ...]:
    parts = [p.strip() for p in spec.split(",")]
    if not spec.strip() or any(not p for p in parts):
        raise GpuBackendError(f"empty simulated GPU spec group in {spec!r}")
    groups = tuple(_parse_group(p) for p in parts)
    if sum(g.count for g in groups) > MAX_GPUS:
        raise GpuBackendError(f"simulated GPU spec {spec!r} has more than {MAX_GPUS} GPUs")
    return groups


def _parse_group(text: str) -> SimGroup:
    match = _GROUP_RE.match(text)
    if match is None:
        raise GpuBackendError(
            f"bad simulated GPU group {text!r} (expected e.g. 4xH100-80GB@nvlink)"
        )
    count = int(match["count"] or "1")
    if count < 1:
        raise GpuBackendError(f"simulated GPU group {text!r} has no GPUs")
    model = _find_model(match["model"], match["mem"], text)
    link = (match["link"] or "pcie").lower()
    if link not in ("nvlink", "pcie"):
        raise GpuBackendError(f"unknown interconnect @{match['link']} in {text!r} (nvlink|pcie)")
    if link == "nvlink" and model.nvlink_links == 0:
        raise GpuBackendError(f"{model.key} has no NVLink (in {text!r})")
    return SimGroup(model=model, count=count, link="nvlink" if link == "nvlink" else "pcie")


def _find_model(family: str, mem_gb: str | None, text: str) -> GpuModel:
    family = family.upper()
    candidates = [m for m in _CATALOG if m.key.split("-")[0].upper() == family]
    if mem_gb is not None:
        candidates = [m for m in candidates if m.key.endswith(f"-{int(mem_gb)}GB")]
    if not candidates:
        known = ", ".join(CATALOG)
        raise GpuBackendError(f"unknown simulated GPU model in {text!r} (known: {known})")
    return candidates[0]


def layout(groups: tuple[SimGroup, ...]) -> tuple[SimGpu, ...]:
    sockets = min(2, len(groups))
    gpus: list[SimGpu] = []
    for g, group in enumerate(groups):
        numa = g * sockets // len(groups)
        for _ in range(group.count):
            gpus.append(SimGpu(len(gpus), g, group.model, group.link, numa))
    return tuple(gpus)


def sim_uuid(seed: int, index: int) -> str:
    h = hashlib.sha256(f"shardboard-sim:{seed}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def sim_device(gpu: SimGpu, seed: int) -> DeviceInfo:
    bus = 0x18 + 0x10 * gpu.index
    return DeviceInfo(
        index=gpu.index,
        uuid=sim_uuid(seed, gpu.index),
        name=gpu.model.name,
        memory_total_bytes=gpu.model.memory_total_mib * MIB,
        pci_bus_id=f"00000000:{bus & 0xFF:02X}:00.0",
        numa_node=gpu.numa_node,
    )


def sim_link(a: SimGpu, b: SimGpu) -> TopologyLink:
    level: TopologyLevel
    if a.group == b.group:
        level = "NV" if a.link == "nvlink" else "PIX"
    else:
        level = "PHB" if a.numa_node == b.numa_node else "SYS"
    nvlinks = a.model.nvlink_links if level == "NV" else 0
    p2p_pcie = a.model.p2p_over_pcie and b.model.p2p_over_pcie and level != "SYS"
    return TopologyLink(a.index, b.index, level, nvlinks, level == "NV" or p2p_pcie)
