"""Pure builders of what the browser receives: websocket messages and nvidia-smi-like rows.

Short keys (units fixed by the key; values rounded):

=======  ====================================================================
``type`` ``"sample"`` (one live tick) or ``"backfill"`` (a window of history)
``h``    host name; ``sim``: true when the GPUs are simulated
``t``    sample time, ms since the epoch (a list of them in a backfill)
``g``    per GPU: a list of dicts in a live sample, ``{"<index>": {...}}`` in a backfill
``i``    GPU index
``u``    GPU utilisation, %            ``bw``  memory-controller utilisation, %
``m``    memory used, MiB              ``mt``  memory total, MiB
``T``    temperature, °C               ``c``   SM clock, MHz
``p``    power draw, W (0.1)           ``pl``  enforced power limit, W
``f``    fan, %                        ``e``   uncorrected ECC errors (volatile)
``th``   active throttle reasons (names from ``base.THROTTLE_REASON_BITS``)
``pr``   processes: ``[[pid, MiB or null, name], ...]``
``lost`` 1 when the GPU fell off the bus; ``err``: the error text
``w``    backfill window (``5m``, ``1h``, ``24h``, ``7d``); ``res_s``: seconds per point
``K_min`` / ``K_max``: in 1-minute backfills, the minute's minimum/maximum of metric ``K``
         (``K`` itself is then the minute's mean)
=======  ====================================================================

Unknown metrics are left out of a live sample and are ``null`` inside backfill series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitoring.gpus.base import MIB, DeviceInfo, GpuSample, HostSample

SERIES_KEYS: tuple[str, ...] = ("u", "bw", "m", "T", "p", "c", "f")

# storage field (GpuSample attribute) for each series key, and its display conversion
SERIES_FIELDS: dict[str, str] = {
    "u": "gpu_util_pct",
    "bw": "mem_util_pct",
    "m": "memory_used_bytes",
    "T": "temperature_c",
    "p": "power_mw",
    "c": "sm_clock_mhz",
    "f": "fan_pct",
}


def display_value(key: str, raw: float | None) -> float | int | None:
    """A stored value (bytes, mW, …) in the unit its short key promises, rounded."""
    if raw is None:
        return None
    if key == "m":
        return round(raw / MIB)
    if key in ("p", "pl"):
        return round(raw / 1000, 1)
    return round(raw) if key != "T" else round(raw, 1)


def gpu_values(gpu: GpuSample) -> dict[str, float | int]:
    values = {key: display_value(key, getattr(gpu, attr)) for key, attr in SERIES_FIELDS.items()}
    return {key: value for key, value in values.items() if value is not None}


def _gpu_message(gpu: GpuSample) -> dict[str, Any]:
    message: dict[str, Any] = {"i": gpu.index, **gpu_values(gpu)}
    optional = {
        "mt": display_value("m", gpu.memory_total_bytes),
        "pl": display_value("pl", gpu.power_limit_mw),
        "e": gpu.ecc_uncorrected,
        "err": gpu.error,
    }
    message.update({k: v for k, v in optional.items() if v is not None})
    if gpu.throttle_reasons:
        message["th"] = list(gpu.throttle_reasons)
    if gpu.processes:
        message["pr"] = [
            [p.pid, display_value("m", p.used_memory_bytes), p.name] for p in gpu.processes
        ]
    if gpu.lost:
        message["lost"] = 1
    return message


def live_message(host: str, sample: HostSample, *, simulated: bool) -> dict[str, Any]:
    return {
        "type": "sample",
        "h": host,
        "sim": simulated,
        "t": sample.ts_ms,
        "g": [_gpu_message(g) for g in sample.gpus],
    }


def backfill_message(
    host: str, window: str, series: dict[str, Any], *, simulated: bool
) -> dict[str, Any]:
    """``series`` as ``History.read_window`` returns it (``res_s``, ``t``, ``g``)."""
    return {"type": "backfill", "h": host, "sim": simulated, "w": window, **series}


@dataclass(frozen=True, slots=True)
class TableRow:
    """One GPU line of an nvidia-smi-like table, every cell already formatted."""

    index: int
    name: str
    uuid: str
    fan: str
    temperature: str
    power: str
    memory: str
    gpu_util: str
    sm_clock: str
    throttle: str
    processes: str
    simulated: bool
    state: str  # "ok", "lost" or "error"
    kind: str = "gpu"  # "cpu": the host's CPU and RAM (its "GPU-Util" is the CPU's)


def _cell(value: float | int | None, unit: str) -> str:
    return "N/A" if value is None else f"{value:g}{unit}"


def table_row(device: DeviceInfo, gpu: GpuSample | None, *, simulated: bool) -> TableRow:
    values = {} if gpu is None else gpu_values(gpu)
    power_limit = None if gpu is None else display_value("pl", gpu.power_limit_mw)
    total_mib = display_value("m", device.memory_total_bytes)
    state = "error" if gpu is None or gpu.error else "ok"
    state = "lost" if gpu is not None and gpu.lost else state
    return TableRow(
        index=device.index,
        name=device.name,
        uuid=device.uuid,
        fan=_cell(values.get("f"), "%"),
        temperature=_cell(values.get("T"), "C"),
        power=f"{_cell(_whole(values.get('p')), 'W')} / {_cell(_whole(power_limit), 'W')}",
        memory=f"{_cell(values.get('m'), 'MiB')} / {_cell(total_mib, 'MiB')}",
        gpu_util=_cell(values.get("u"), "%"),
        sm_clock=_cell(values.get("c"), "MHz"),
        throttle=", ".join(gpu.throttle_reasons) if gpu else "",
        processes=str(len(gpu.processes)) if gpu else "N/A",
        simulated=simulated and device.kind == "gpu",  # the CPU is real on a simulated host
        state=state,
        kind=device.kind,
    )


def _whole(value: float | int | None) -> int | None:
    return None if value is None else round(value)


def table_rows(
    devices: Sequence[DeviceInfo], sample: HostSample | None, *, simulated: bool
) -> list[TableRow]:
    """Rows in device order; a GPU missing from the sample shows as N/A."""
    by_index = {} if sample is None else {g.index: g for g in sample.gpus}
    return [table_row(d, by_index.get(d.index), simulated=simulated) for d in devices]
