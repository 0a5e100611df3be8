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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from monitoring.gpus.base import GpuProcess, GpuSample, HostSample
from monitoring.payloads import SERIES_FIELDS, SERIES_KEYS, display_value

log = logging.getLogger(__name__)

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


# --- downsampling (pure) ----------------------------------------------------------------


def owner_split(gpu: GpuSample, owners: Mapping[str, str]) -> tuple[dict[str, int], int]:
    """Bytes per deployment on one GPU, and the rest of its used memory ("other")."""
    split: dict[str, int] = {}
    for process in gpu.processes:
        owner = owners.get(str(process.pid))
        if owner and process.used_memory_bytes is not None:
            split[owner] = split.get(owner, 0) + process.used_memory_bytes
    return split, max(0, (gpu.memory_used_bytes or 0) - sum(split.values()))


def aggregate_minute(
    samples: Iterable[HostSample], owners: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """min/mean/max per GPU and metric over the samples of one minute (unknowns skipped),
    and the mean memory split by owner (a deployment absent from a sample counts as 0 there,
    so the means stack up to the mean memory used)."""
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    split: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    other: dict[int, int] = defaultdict(int)
    count = 0
    for sample in samples:
        count += 1
        for gpu in sample.gpus:
            for key, attr in SERIES_FIELDS.items():
                value = getattr(gpu, attr)
                if value is not None:
                    values[gpu.index][key].append(float(value))
            if gpu.memory_used_bytes is not None:
                owned, rest = owner_split(gpu, owners or {})
                for name, used in owned.items():
                    split[gpu.index][name] += used
                other[gpu.index] += rest
    gpus: dict[str, dict[str, Any]] = {
        str(index): {key: [min(v), round(sum(v) / len(v), 2), max(v)] for key, v in metrics.items()}
        for index, metrics in values.items()
    }
    for index, metrics in gpus.items():
        known = len(values[int(index)].get("m", ()))
        if known:
            metrics["dm"] = {name: round(b / known) for name, b in split[int(index)].items()}
            metrics["mo"] = round(other[int(index)] / known)
    return {"n": count, "g": gpus}


class History:
    def __init__(self, client: redis.Redis, *, interval_s: float = 1.0) -> None:
        self.client = client
        self.interval_s = interval_s
        self.raw_maxlen = math.ceil(RAW_RETENTION_S / interval_s) + 1
        self._last_minute: dict[str, int] = {}

    # --- writing ----------------------------------------------------------------------

    def append(self, host: str, sample: HostSample) -> None:
        """Store one sample; when a minute has just ended, downsample it."""
        self._xadd_raw(host, sample)
        minute = sample.ts_ms // MINUTE_MS
        if self._last_minute.get(host) != minute:
            self._last_minute[host] = minute
            self.downsample(host, before_ms=minute * MINUTE_MS)

    def _xadd_raw(self, host: str, sample: HostSample) -> None:
        entry: dict[Any, Any] = {"d": encode_sample(sample)}
        try:
            self.client.xadd(raw_key(host), entry, id=f"{sample.ts_ms}-*", maxlen=self.raw_maxlen)
        except redis.ResponseError as exc:  # the clock went back: keep the sample anyway
            log.warning("history %s: sample at %d ms out of order (%s)", host, sample.ts_ms, exc)
            self.client.xadd(raw_key(host), entry, maxlen=self.raw_maxlen)

    def downsample(self, host: str, *, before_ms: int) -> int:
        """Aggregate every complete minute before ``before_ms`` not aggregated yet."""
        last = _entries(self.client.xrevrange(minute_key(host), count=1))
        start_ms = _entry_ms(last[0][0]) + MINUTE_MS if last else 0
        if start_ms >= before_ms:
            return 0
        by_minute: dict[int, list[HostSample]] = defaultdict(list)
        for entry_id, entry in _entries(
            self.client.xrange(raw_key(host), min=start_ms, max=before_ms - 1)
        ):
            by_minute[_entry_ms(entry_id) // MINUTE_MS * MINUTE_MS].append(
                decode_sample(_data(entry))
            )
        owners = self.owners(host) if by_minute else {}
        for minute_ms in sorted(by_minute):
            self._xadd_minute(host, minute_ms, aggregate_minute(by_minute[minute_ms], owners))
        return len(by_minute)

    def owners(self, host: str) -> dict[str, str]:
        raw: Any = self.client.hgetall(owners_key(host))
        return {_text(k): _text(v) for k, v in dict(raw or {}).items()}

    def _xadd_minute(self, host: str, minute_ms: int, aggregate: dict[str, Any]) -> None:
        data = json.dumps(aggregate, separators=(",", ":"))
        try:
            self.client.xadd(
                minute_key(host), {"d": data}, id=f"{minute_ms}-0", maxlen=MINUTE_RETENTION
            )
        except redis.ResponseError as exc:
            log.info(
                "history %s: minute %d already aggregated elsewhere (%s)", host, minute_ms, exc
            )

    # --- reading ----------------------------------------------------------------------

    def latest(self, host: str) -> HostSample | None:
        entries = _entries(self.client.xrevrange(raw_key(host), count=1))
        return decode_sample(_data(entries[0][1])) if entries else None

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
        entries = _entries(self.client.xrange(raw_key(host), min=since_ms, max=now_ms))
        stride = max(1, math.ceil(len(entries) / max_points)) if max_points else 1
        samples = [decode_sample(_data(entry)) for _, entry in entries[::stride]]
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
        entries = _entries(self.client.xrange(minute_key(host), min=since_ms, max=now_ms))
        docs = [(_entry_ms(entry_id), json.loads(_data(entry))) for entry_id, entry in entries]
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


def _entries(result: Any) -> list[Entry]:
    """redis-py types replies as sync-or-async unions; a sync client returns a list."""
    return list(result or [])


def _data(entry: Mapping[Any, Any]) -> Any:
    """The ``d`` field, whether or not the client decodes responses."""
    return entry[b"d"] if b"d" in entry else entry["d"]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _entry_ms(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])
