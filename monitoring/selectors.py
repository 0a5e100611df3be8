"""Read paths of the monitoring app: backfills, inventory, topology matrices, metric snapshots.

Also the pure builders of what the host worker adds to a live sample: which deployment owns
each GPU process (``own``), memory per deployment (``dm``) and the rest (``mo``), and the
nvidia-smi-like table rows.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import redis
from django.conf import settings
from django.utils import timezone

from controlpanel import redisconn
from monitoring.gpus.base import DeviceInfo, HostSample
from monitoring.history import (
    RAW_WINDOWS,
    WINDOWS_MS,
    History,
    decode_sample,
    owners_key,
    raw_key,
)
from monitoring.models import Gpu, Host
from monitoring.payloads import backfill_message, display_value, table_rows
from monitoring.prom import HostSnapshot

log = logging.getLogger(__name__)

OWNERS_TTL_S = 2 * 3600  # longer than the raw history the map explains
BACKFILL_MAX_POINTS = 720
LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"),
    (
        "NODE",
        "Connection traversing PCIe and the interconnect between PCIe host bridges within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without the PCIe host bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
PCIE_LEVELS = frozenset({"PIX", "PXB", "PHB", "NODE"})


@cache
def redis_client() -> redis.Redis:
    return redisconn.client(connect_timeout_s=1, timeout_s=5)


def history() -> History:
    return History(redis_client(), interval_s=settings.SAMPLE_INTERVAL_S)


def latest_sample(host: str) -> HostSample | None:
    """The host's newest sample: the one read of live GPU figures outside this app."""
    return history().latest(host)


def samples_between(host: str, start_ms: int, end_ms: int) -> list[HostSample]:
    """The host's raw samples in [start_ms, end_ms] (the last hour is kept): a benchmark's."""
    entries = redis_client().xrange(raw_key(host), min=start_ms, max=end_ms)
    return [
        decode_sample(entry[b"d"] if b"d" in entry else entry["d"])
        for _, entry in list(entries or [])
        if entry is not None
    ]


# --- attribution (pure, plus the one syscall the worker makes) ---------------------------


def process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def process_owners(
    sample: HostSample,
    pgid_owners: Mapping[int, str],
    getpgid: Callable[[int], int | None] = process_group,
) -> dict[str, str]:
    """``{"<pid>": deployment}`` for the sample's processes that belong to a deployment."""
    if not pgid_owners:
        return {}
    pids = {p.pid for g in sample.gpus for p in g.processes}
    owned = {pid: pgid_owners.get(getpgid(pid) or -1) for pid in pids}
    return {str(pid): name for pid, name in owned.items() if name}


def memory_split(
    processes: Iterable[Sequence[Any]], used_mib: float | None, own: Mapping[str, str]
) -> tuple[dict[str, float], float | None]:
    """MiB per deployment, and the rest of the used memory ("other": not ours, or the driver)."""
    split: dict[str, float] = {}
    for pid, mib, _name in processes:
        owner = own.get(str(pid))
        if owner and mib is not None:
            split[owner] = split.get(owner, 0) + mib
    other = None if used_mib is None else max(0.0, used_mib - sum(split.values()))
    return split, other


def rows_payload(
    devices: Sequence[DeviceInfo], sample: HostSample | None, *, simulated: bool
) -> list[dict[str, Any]]:
    return [dataclasses.asdict(r) for r in table_rows(devices, sample, simulated=simulated)]


def publish_message(
    message: dict[str, Any],
    sample: HostSample,
    devices: Sequence[DeviceInfo],
    own: Mapping[str, str],
    *,
    simulated: bool,
) -> dict[str, Any]:
    """A ``payloads.live_message`` plus attribution and table rows (what the browser draws)."""
    for gpu in message["g"]:
        gpu["dm"], gpu["mo"] = memory_split(gpu.get("pr", ()), gpu.get("m"), own)
    return {**message, "own": dict(own), "rows": rows_payload(devices, sample, simulated=simulated)}


def stored_owners(host: str) -> dict[str, str]:
    raw = redis_client().hgetall(owners_key(host))
    return {_text(k): _text(v) for k, v in dict(raw).items()}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# --- inventory and backfill ---------------------------------------------------------------


def device_info(gpu: Gpu) -> DeviceInfo:
    return DeviceInfo(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        memory_total_bytes=gpu.memory_total_bytes,
        pci_bus_id=gpu.pci_bus_id,
        numa_node=gpu.numa_node,
        kind=gpu.kind,
    )


def hosts_with_gpus(host: str | None = None, *, cpu: bool = True) -> list[Host]:
    """Hosts in service with their device rows prefetched: the CPU's too unless ``cpu`` is
    False (where only GPUs are meant)."""
    hosts = Host.objects.in_service()
    hosts = hosts.with_devices() if cpu else hosts.with_gpus()
    return list(hosts.filter(name=host) if host else hosts)


def present_devices(host: Host) -> list[DeviceInfo]:
    return [device_info(g) for g in host.gpus.all() if g.present]


def host_inventory(host: Host) -> dict[str, Any]:
    devices = present_devices(host)
    return {
        "online": host.is_online(),
        "backend": host.backend,
        "note": host.backend_note,
        "devices": [
            {
                "i": d.index,
                "name": d.name,
                "uuid": d.uuid,
                "mt": display_value("m", d.memory_total_bytes),
                "k": d.kind,
            }
            for d in devices
        ],
    }


def host_backfill(host: Host, window: str, *, now_ms: int) -> dict[str, Any]:
    """The window of `host`'s history; for a host that is offline, the window that ends with its
    last sample (not an empty one ending now), with when it went quiet."""
    store = history()
    latest = store.latest(host.name)
    offline = not host.is_online()
    end_ms = latest.ts_ms if offline and latest is not None else now_ms
    series = store.read_window(host.name, window, now_ms=end_ms, max_points=BACKFILL_MAX_POINTS)
    own = stored_owners(host.name)
    _add_memory_split(host.name, window, series, own)
    devices = present_devices(host)
    message = backfill_message(host.name, window, series, simulated=host.simulated)
    return {
        **message,
        **host_inventory(host),
        "own": own,
        "rows": rows_payload(devices, latest, simulated=host.simulated),
        "last_heartbeat_ms": _ms(host.last_heartbeat),
        "last_sample_ms": latest.ts_ms if latest is not None else None,
        "window_end_ms": end_ms,
    }


def _ms(moment: Any) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def backfill(window: str, host: str | None = None) -> dict[str, Any]:
    """The first message of a dashboard connection: every host's window of history."""
    if window not in WINDOWS_MS:
        raise ValueError(f"unknown window {window!r}")
    now_ms = time.time_ns() // 1_000_000
    return {
        "type": "backfill",
        "w": window,
        "hosts": [host_backfill(h, window, now_ms=now_ms) for h in hosts_with_gpus(host)],
    }


def _add_memory_split(host: str, window: str, series: dict[str, Any], own: dict[str, str]) -> None:
    """``dm``/``mo`` series next to ``m``: from the raw samples' processes for the raw windows,
    as the 1-minute series stored them otherwise."""
    for values in series["g"].values():
        values.setdefault("dm", {})
        values.setdefault("mo", list(values["m"]))
    if not own or window not in RAW_WINDOWS or not series["t"]:
        return
    wanted = {t: n for n, t in enumerate(series["t"])}
    entries = redis_client().xrange(raw_key(host), min=series["t"][0], max=series["t"][-1])
    for _, entry in list(entries or []):
        if entry is None:  # redis-py types an entry trimmed away meanwhile as nil
            continue
        sample = decode_sample(entry[b"d"] if b"d" in entry else entry["d"])
        n = wanted.get(sample.ts_ms)
        if n is not None:
            _split_point(series, sample, n, own)


def _split_point(series: dict[str, Any], sample: HostSample, n: int, own: dict[str, str]) -> None:
    for gpu in sample.gpus:
        values = series["g"].get(str(gpu.index))
        if values is None:
            continue
        procs = [(p.pid, display_value("m", p.used_memory_bytes), p.name) for p in gpu.processes]
        split, other = memory_split(procs, values["m"][n], own)
        values["mo"][n] = other
        for name, mib in split.items():
            values["dm"].setdefault(name, [None] * len(series["t"]))[n] = mib


# --- Prometheus and topology ----------------------------------------------------------------


def metric_snapshots() -> list[HostSnapshot]:
    """The latest sample of every registered host that has one: its GPUs (the gauges are
    GPU metrics; the CPU row is left out)."""
    store = history()
    snapshots = []
    for host in hosts_with_gpus(cpu=False):
        latest = store.latest(host.name)
        if latest is not None:
            devices = present_devices(host)
            indices = {d.index for d in devices}
            gpus = tuple(g for g in latest.gpus if g.index in indices)
            sample = dataclasses.replace(latest, gpus=gpus)
            snapshots.append(HostSnapshot(host.name, host.simulated, devices, sample))
    return snapshots


@dataclasses.dataclass(frozen=True, slots=True)
class TopologyView:
    host: Host
    online: bool
    headers: list[str]
    rows: list[dict[str, Any]]
    p2p_rows: list[dict[str, Any]]
    warnings: list[str]


def link_map(host: Host) -> dict[tuple[int, int], dict[str, Any]]:
    links = {}
    for link in host.topology or []:
        a, b = int(link["a"]), int(link["b"])
        links[(a, b)] = links[(b, a)] = link
    return links


def _label(link: dict[str, Any] | None) -> str:
    if link is None:
        return "?"
    level = str(link.get("level", "SYS"))
    return f"NV{int(link.get('nvlink_count') or 1)}" if level == "NV" else level


def _p2p(link: dict[str, Any] | None) -> str:
    value = None if link is None else link.get("p2p_read_ok")
    return "N/A" if value is None else ("OK" if value else "NS")


def topology_warnings(
    indices: Sequence[int], links: Mapping[tuple[int, int], dict[str, Any]]
) -> list[str]:
    pairs = [(a, b) for a in indices for b in indices if a < b]
    by_kind: dict[str, list[str]] = {"pcie": [], "sys": [], "p2p": []}
    for a, b in pairs:
        link = links.get((a, b))
        label = _label(link)
        if label in PCIE_LEVELS:
            by_kind["pcie"].append(f"GPU{a}–GPU{b} ({label})")
        elif label == "SYS":
            by_kind["sys"].append(f"GPU{a}–GPU{b}")
        if link is not None and link.get("p2p_read_ok") is False:
            by_kind["p2p"].append(f"GPU{a}–GPU{b}")
    texts = {
        "pcie": "Tensor parallelism over these pairs would run over PCIe, not NVLink: ",
        "sys": "Tensor parallelism over these pairs would cross CPU sockets (SYS): ",
        "p2p": "No peer-to-peer access between: ",
    }
    return [texts[kind] + ", ".join(found) for kind, found in by_kind.items() if found]


def _css_key(text: str) -> str:
    return "NV" if text.startswith("NV") else text.replace("/", "")


def topology_view(host: Host) -> TopologyView:
    """``host`` with its GPU rows prefetched (``Host.objects.with_gpus()``)."""
    gpus = [g for g in host.gpus.all() if g.present]
    indices = [g.index for g in gpus]
    links = link_map(host)

    def cells(render: Callable[[dict[str, Any] | None], str], css: str) -> list[dict[str, Any]]:
        texts = [[("X" if a == b else render(links.get((a, b)))) for b in indices] for a in indices]
        return [
            {"gpu": g, "cells": [{"text": t, "css": css + _css_key(t)} for t in row]}
            for g, row in zip(gpus, texts, strict=True)
        ]

    return TopologyView(
        host=host,
        online=host.is_online(timezone.now()),
        headers=[f"GPU{i}" for i in indices],
        rows=cells(_label, "lvl-"),
        p2p_rows=cells(_p2p, "p2p-"),
        warnings=topology_warnings(indices, links),
    )


def topology_views() -> list[TopologyView]:
    return [topology_view(h) for h in hosts_with_gpus(cpu=False)]
