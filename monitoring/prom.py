"""Prometheus export of the latest sample of every host, with dcgm-exporter's names.

Names and units follow dcgm-exporter (``DCGM_FI_DEV_FB_USED`` in MiB, ``…_POWER_USAGE`` in W)
so that dashboards built for it work, and a later swap to DCGM is trivial. Labels:
``Hostname``, ``gpu``, ``UUID``, ``modelName``, ``simulated``. A metric a GPU does not
report is left out for that GPU rather than exported as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitoring.gpus.base import MIB, DeviceInfo, GpuSample, HostSample

LABELS = ("Hostname", "gpu", "UUID", "modelName", "simulated")


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    host: str
    simulated: bool
    devices: Sequence[DeviceInfo]
    sample: HostSample


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _watts(value: int | None) -> float | None:
    return None if value is None else value / 1000


# (name, help, value of a GpuSample)
GAUGES: tuple[tuple[str, str, Callable[[GpuSample], float | int | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.gpu_util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda g: _mib(g.memory_used_bytes),
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: _mib(g.memory_free_bytes),
    ),
    (
        "DCGM_FI_DEV_FB_TOTAL",
        "Framebuffer memory total (in MiB).",
        lambda g: _mib(g.memory_total_bytes),
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: _watts(g.power_mw)),
    (
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "Enforced power limit (in W).",
        lambda g: _watts(g.power_limit_mw),
    ),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", lambda g: g.fan_pct),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Uncorrected ECC errors, volatile.",
        lambda g: g.ecc_uncorrected,
    ),
    (
        "shardboard_gpu_up",
        "1 when the GPU was read, 0 when lost or in error.",
        lambda g: int(not (g.lost or g.error)),
    ),
    (
        "shardboard_gpu_processes",
        "Processes holding memory on the GPU.",
        lambda g: len(g.processes),
    ),
)


def _labels(snapshot: HostSnapshot, gpu: GpuSample) -> list[str]:
    names = {d.index: d.name for d in snapshot.devices}
    simulated = "true" if snapshot.simulated else "false"
    return [snapshot.host, str(gpu.index), gpu.uuid, names.get(gpu.index, ""), simulated]


def gpu_metric_families(snapshots: Iterable[HostSnapshot]) -> list[Metric]:
    """Every gauge for every GPU of every host (pure: no registry, no I/O)."""
    snapshots = list(snapshots)
    families: list[Metric] = []
    for name, doc, value_of in GAUGES:
        family = GaugeMetricFamily(name, doc, labels=LABELS)
        for snapshot in snapshots:
            for gpu in snapshot.sample.gpus:
                value = value_of(gpu)
                if value is not None:
                    family.add_metric(_labels(snapshot, gpu), float(value))
        families.append(family)
    families.append(_timestamps(snapshots))
    return families


def _timestamps(snapshots: Sequence[HostSnapshot]) -> Metric:
    family = GaugeMetricFamily(
        "shardboard_host_sample_timestamp_seconds",
        "Time of the host's latest GPU sample (staleness check).",
        labels=("Hostname", "simulated"),
    )
    for s in snapshots:
        family.add_metric([s.host, "true" if s.simulated else "false"], s.sample.ts_ms / 1000)
    return family


class GpuCollector(Collector):
    """Register once: ``REGISTRY.register(GpuCollector(load_snapshots))``."""

    def __init__(self, snapshots: Callable[[], Iterable[HostSnapshot]]) -> None:
        self._snapshots = snapshots

    def describe(self) -> Iterator[Metric]:
        return iter(())  # do not read Redis when registering

    def collect(self) -> Iterator[Metric]:
        yield from gpu_metric_families(self._snapshots())
