"""The history's writes, in the host worker: each sample appended to the raw stream, each
minute that has ended downsampled to the 1-minute stream (format: ``monitoring.history``).
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import redis

from monitoring.gpus.base import GpuSample, HostSample
from monitoring.history import (
    MINUTE_MS,
    MINUTE_RETENTION,
    RAW_RETENTION_S,
    History,
    decode_sample,
    encode_sample,
    entry_data,
    entry_ms,
    minute_key,
    owners_key,
    raw_key,
    stream_entries,
)
from monitoring.payloads import SERIES_FIELDS

log = logging.getLogger(__name__)


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


class HistoryWriter(History):
    """The host's one writer of its streams; reads as ``History`` does."""

    def __init__(self, client: redis.Redis, *, interval_s: float = 1.0) -> None:
        super().__init__(client, interval_s=interval_s)
        self.raw_maxlen = math.ceil(RAW_RETENTION_S / interval_s) + 1
        self._last_minute: dict[str, int] = {}

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
        last = stream_entries(self.client.xrevrange(minute_key(host), count=1))
        start_ms = entry_ms(last[0][0]) + MINUTE_MS if last else 0
        if start_ms >= before_ms:
            return 0
        by_minute: dict[int, list[HostSample]] = defaultdict(list)
        for entry_id, entry in stream_entries(
            self.client.xrange(raw_key(host), min=start_ms, max=before_ms - 1)
        ):
            by_minute[entry_ms(entry_id) // MINUTE_MS * MINUTE_MS].append(
                decode_sample(entry_data(entry))
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
