"""GPU metric history in Redis: raw samples for an hour, 1-minute min/mean/max for 7 days.

Keys (host names sanitised to ``[A-Za-z0-9._-]``):

* ``shardboard:gpu:raw:<host>``: a stream, one entry per ``HostSample`` (id = sample time in
  ms), field ``d`` = compact JSON, lossless (bytes, mW), trimmed ``MAXLEN ~`` to one hour at the
  configured interval.
* ``shardboard:gpu:1m:<host>``: a stream, one entry per minute (id = the minute's first ms),
  field ``d`` = ``{"n": samples, "g": {"<index>": {"<key>": [min, mean, max], "dm": {...},
  "mo": bytes}}}`` in storage units, trimmed to 7 days. ``dm`` is the minute's mean memory of
  each deployment on that GPU and ``mo`` the mean of the rest ("other"), so the split survives
  downsampling; owners come from ``shardboard:gpu:own:<host>`` (pid -> deployment, kept by the
  worker) as it is when the minute is aggregated. Minutes are aggregated from the raw stream
  once they are over, so a restarted worker catches up and two writers cannot write one
  minute twice.

This module is both sides' common ground: the keys, the storage codec and the reads. The
writes (append, downsampling) run in the host worker only: ``monitoring.host.history_writer``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

import redis

from monitoring.gpus.base import GpuProcess, GpuSample, HostSample
from monitoring.payloads import SERIES_FIELDS, SERIES_KEYS, display_value

KEY_PREFIX = "shardboard:gpu"
RAW_RETENTION_S = 3600
MINUTE_MS = 60_000
MINUTE_RETENTION = 7 * 24 * 60
WINDOWS_MS: dict[str, int] = {"5m": 300_000, "1h": 3_600_000, "24h": 86_400_000, "7d": 604_800_000}
RAW_WINDOWS = frozenset({"5m", "1h"})

_HOST_RE = re.compile(r"[^A-Za-z0-9._-]")
_GPU_FIELDS = tuple(f.name for f in dataclasses.fields(GpuSample))  # positional storage order


def sanitize_host(host: str) -> str:
    return _HOST_RE.sub("_", host)[:100] or "_"


def raw_key(host: str) -> str:
    return f"{KEY_PREFIX}:raw:{sanitize_host(host)}"


def minute_key(host: str) -> str:
    return f"{KEY_PREFIX}:1m:{sanitize_host(host)}"


def owners_key(host: str) -> str:
    """A hash ``pid -> deployment`` of the engine processes seen on the host's GPUs."""
    return f"{KEY_PREFIX}:own:{sanitize_host(host)}"


# --- storage codec ----------------------------------------------------------------------


def encode_sample(sample: HostSample) -> str:
    """Positional per-GPU lists (field order ``_GPU_FIELDS``): compact and lossless."""
    gpus = [[_encode_field(getattr(g, f)) for f in _GPU_FIELDS] for g in sample.gpus]
    return json.dumps({"t": sample.ts_ms, "g": gpus}, separators=(",", ":"))


def _encode_field(value: Any) -> Any:
    if isinstance(value, tuple):
        return [
            [p.pid, p.used_memory_bytes, p.name] if isinstance(p, GpuProcess) else p for p in value
        ]
    return value


def decode_sample(data: str | bytes) -> HostSample:
    doc = json.loads(data)
    return HostSample(ts_ms=int(doc["t"]), gpus=tuple(_decode_gpu(row) for row in doc["g"]))


def _decode_gpu(row: list[Any]) -> GpuSample:
    values = dict(zip(_GPU_FIELDS, row, strict=True))
    values["throttle_reasons"] = tuple(values["throttle_reasons"])
    values["processes"] = tuple(GpuProcess(int(p[0]), p[1], str(p[2])) for p in values["processes"])
    return GpuSample(**values)


class History:
    """Reads the streams (pages, backfills, benchmarks). The host worker writes them through
    ``monitoring.host.history_writer.HistoryWriter``, the one writer."""

    def __init__(self, client: redis.Redis, *, interval_s: float = 1.0) -> None:
        self.client = client
        self.interval_s = interval_s

    def latest(self, host: str) -> HostSample | None:
        entries = stream_entries(self.client.xrevrange(raw_key(host), count=1))
        return decode_sample(entry_data(entries[0][1])) if entries else None

    def read_window(
        self, host: str, window: str, *, now_ms: int | None = None, max_points: int | None = None
    ) -> dict[str, Any]:
        """``{"res_s", "t": [ms...], "g": {"<index>": {"<key>": [...]}}}`` in display units."""
        if window not in WINDOWS_MS:
            raise ValueError(f"unknown window {window!r} (one of {', '.join(WINDOWS_MS)})")
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        since_ms = now_ms - WINDOWS_MS[window]
        if window in RAW_WINDOWS:
            return self._raw_series(host, since_ms, now_ms, max_points)
        return self._minute_series(host, since_ms, now_ms)

    def _raw_series(
        self, host: str, since_ms: int, now_ms: int, max_points: int | None
    ) -> dict[str, Any]:
        entries = stream_entries(self.client.xrange(raw_key(host), min=since_ms, max=now_ms))
        stride = max(1, math.ceil(len(entries) / max_points)) if max_points else 1
        samples = [decode_sample(entry_data(entry)) for _, entry in entries[::stride]]
        indices = sorted({g.index for s in samples for g in s.gpus})
        gpus: dict[str, dict[str, list[Any]]] = {
            str(i): {k: [] for k in SERIES_KEYS} for i in indices
        }
        for sample in samples:
            by_index = {g.index: g for g in sample.gpus}
            for i in indices:
                gpu = by_index.get(i)
                for key, attr in SERIES_FIELDS.items():
                    raw = None if gpu is None else getattr(gpu, attr)
                    gpus[str(i)][key].append(display_value(key, raw))
        res_s = round(self.interval_s * stride, 3)
        return {"res_s": res_s, "t": [s.ts_ms for s in samples], "g": gpus}

    def _minute_series(self, host: str, since_ms: int, now_ms: int) -> dict[str, Any]:
        """Also ``dm`` (``{deployment: [MiB or null]}``) and ``mo`` (MiB): the memory split."""
        entries = stream_entries(self.client.xrange(minute_key(host), min=since_ms, max=now_ms))
        docs = [(entry_ms(entry_id), json.loads(entry_data(entry))) for entry_id, entry in entries]
        indices = sorted({int(i) for _, doc in docs for i in doc["g"]})
        gpus: dict[str, dict[str, Any]] = {
            str(i): {f"{k}{s}": [] for k in SERIES_KEYS for s in ("", "_min", "_max")}
            for i in indices
        }
        for n, (_, doc) in enumerate(docs):
            for i in indices:
                metrics = doc["g"].get(str(i), {})
                series = gpus[str(i)]
                for key in SERIES_KEYS:
                    lo, mean, hi = metrics.get(key, (None, None, None))
                    series[key].append(display_value(key, mean))
                    series[f"{key}_min"].append(display_value(key, lo))
                    series[f"{key}_max"].append(display_value(key, hi))
                _minute_split(series, metrics, n, len(docs))
        return {"res_s": 60, "t": [ms for ms, _ in docs], "g": gpus}


def _minute_split(series: dict[str, Any], metrics: dict[str, Any], n: int, points: int) -> None:
    """Point ``n`` of the split; a minute stored without one (older data) is all "other"."""
    dm = series.setdefault("dm", {})
    mo = metrics.get("mo")
    series.setdefault("mo", []).append(series["m"][-1] if mo is None else display_value("m", mo))
    for name, used in metrics.get("dm", {}).items():
        dm.setdefault(name, [None] * points)[n] = display_value("m", used)


Entry = tuple[Any, Mapping[Any, Any]]


def stream_entries(result: Any) -> list[Entry]:
    """redis-py types replies as sync-or-async unions; a sync client returns a list."""
    return list(result or [])


def entry_data(entry: Mapping[Any, Any]) -> Any:
    """The ``d`` field, whether or not the client decodes responses."""
    return entry[b"d"] if b"d" in entry else entry["d"]


def entry_ms(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])
