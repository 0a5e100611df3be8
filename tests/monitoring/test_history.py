"""History against a real Redis (REDIS_URL)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from monitoring.gpus import GpuProcess, GpuSample, HostSample
from monitoring.gpus.simulated import SimulatedBackend
from monitoring.history import (
    MINUTE_MS,
    History,
    decode_sample,
    encode_sample,
    minute_key,
    owners_key,
    raw_key,
)
from monitoring.host.history_writer import HistoryWriter

MIB = 1024 * 1024
T0_MS = 1_800_000_000_000 // MINUTE_MS * MINUTE_MS  # a minute boundary


def gpu(index: int, util: float | None, *, mem_mib: int = 1000, lost: bool = False) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        gpu_util_pct=util,
        mem_util_pct=None if util is None else util / 2,
        memory_used_bytes=None if lost else mem_mib * MIB,
        memory_free_bytes=(8000 - mem_mib) * MIB,
        memory_total_bytes=8000 * MIB,
        temperature_c=40.0,
        power_mw=123_456,
        power_limit_mw=300_000,
        sm_clock_mhz=1500,
        fan_pct=None,
        throttle_reasons=("sw_power_cap",),
        ecc_uncorrected=0,
        processes=(GpuProcess(42, 512 * MIB, "vllm"),),
        lost=lost,
        error="GPU is lost" if lost else None,
    )


@pytest.fixture
def host(redis_client: redis.Redis) -> Iterator[str]:
    name = f"test host/{uuid.uuid4().hex[:8]}"
    yield name
    redis_client.delete(raw_key(name), minute_key(name), owners_key(name))


def test_keys_are_prefixed_and_sanitised() -> None:
    assert raw_key("gpu box/1:a") == "shardboard:gpu:raw:gpu_box_1_a"
    assert minute_key("") == "shardboard:gpu:1m:_"


def test_encoding_is_lossless(tmp_path: Path, engine_process: subprocess.Popen[bytes]) -> None:
    backend = SimulatedBackend("2xRTX4090-24GB@pcie,1xH100", state_dir=tmp_path)
    backend.attach(engine_process.pid, [1], 3 * 1024 * MIB, name="engine")
    backend.throttle(0, "hw_slowdown")
    backend.lose(2)
    sample = backend.sample()
    assert decode_sample(encode_sample(sample)) == sample
    assert len(encode_sample(sample)) < 200 * len(sample.gpus)


def test_raw_stream_is_bounded(redis_client: redis.Redis, host: str) -> None:
    history = HistoryWriter(redis_client, interval_s=60.0)  # one hour = 61 entries
    for k in range(400):
        history.append(host, HostSample(T0_MS + k * 60_000, (gpu(0, 10.0),)))
    length = redis_client.xlen(raw_key(host))
    assert history.raw_maxlen <= length <= history.raw_maxlen + 100  # MAXLEN ~ trims per node
    assert redis_client.xlen(minute_key(host)) == 399


def test_windows_read_raw_and_downsampled(redis_client: redis.Redis, host: str) -> None:
    history = HistoryWriter(redis_client, interval_s=1.0)
    for k in range(0, 3 * 60 + 30):  # 3.5 minutes at 1 Hz
        history.append(host, HostSample(T0_MS + k * 1000, (gpu(0, float(k % 60)), gpu(1, None))))
    now_ms = T0_MS + 209_000

    five = history.read_window(host, "5m", now_ms=now_ms)
    assert five["res_s"] == 1.0 and len(five["t"]) == 210
    assert five["g"]["0"]["u"][:3] == [0, 1, 2] and five["g"]["1"]["u"][0] is None
    assert five["g"]["0"]["m"][0] == 1000 and five["g"]["0"]["p"][0] == 123.5

    recent = history.read_window(host, "5m", now_ms=now_ms + 240_000)
    assert recent["t"][0] >= now_ms + 240_000 - 300_000

    thinned = history.read_window(host, "1h", now_ms=now_ms, max_points=50)
    assert len(thinned["t"]) <= 50 and thinned["res_s"] == 5.0

    day = history.read_window(host, "24h", now_ms=now_ms)
    assert day["res_s"] == 60 and day["t"] == [T0_MS, T0_MS + MINUTE_MS, T0_MS + 2 * MINUTE_MS]
    assert day["g"]["0"]["u"] == [30, 30, 30]  # mean of 0..59 = 29.5, rounded half to even
    assert day["g"]["0"]["u_min"] == [0, 0, 0] and day["g"]["0"]["u_max"] == [59, 59, 59]
    assert day["g"]["1"]["u"] == [None] * 3 and day["g"]["1"]["m"] == [1000] * 3

    with pytest.raises(ValueError, match="unknown window"):
        history.read_window(host, "2h")


def test_downsample_is_exact_and_survives_a_restart(redis_client: redis.Redis, host: str) -> None:
    first = HistoryWriter(redis_client)
    for k, util in enumerate([10.0, 20.0, 60.0]):
        first.append(host, HostSample(T0_MS + k * 20_000, (gpu(0, util, mem_mib=100 * (k + 1)),)))
    lost = HostSample(T0_MS + 59_000, (gpu(0, None, lost=True),))
    first.append(host, lost)

    restarted = HistoryWriter(redis_client)  # a new worker catches up the minute on its first tick
    restarted.append(host, HostSample(T0_MS + MINUTE_MS + 5, (gpu(0, 0.0),)))
    first.append(host, HostSample(T0_MS + MINUTE_MS + 1005, (gpu(0, 0.0),)))  # no duplicate

    entries = redis_client.xrange(minute_key(host))
    assert len(entries) == 1
    week = restarted.read_window(host, "7d", now_ms=T0_MS + 2 * MINUTE_MS)
    series = week["g"]["0"]
    assert (series["u_min"], series["u"], series["u_max"]) == ([10], [30], [60])
    assert (series["m_min"], series["m"], series["m_max"]) == ([100], [200], [300])
    assert restarted.latest(host) == HostSample(T0_MS + MINUTE_MS + 1005, (gpu(0, 0.0),))


def test_latest_of_an_unknown_host_is_none(redis_client: redis.Redis, host: str) -> None:
    assert History(redis_client).latest(host) is None
    assert History(redis_client).read_window(host, "5m")["t"] == []


def _with_processes(sample: GpuSample, used_mib: int, *procs: tuple[int, int]) -> GpuSample:
    processes = tuple(GpuProcess(pid, mib * MIB, "engine") for pid, mib in procs)
    return dataclasses.replace(sample, memory_used_bytes=used_mib * MIB, processes=processes)


def test_minutes_keep_the_memory_split_per_deployment(redis_client: redis.Redis, host: str) -> None:
    redis_client.hset(owners_key(host), mapping={"42": "llama", "43": "llama", "50": "qwen"})
    history = HistoryWriter(redis_client)
    gpus = [  # pid 77 is not ours; qwen appears in one sample of three; 43 is llama's second rank
        (
            _with_processes(gpu(0, 50.0), 4000, (42, 3000), (77, 500)),
            _with_processes(gpu(1, 0.0), 0),
        ),
        (
            _with_processes(gpu(0, 50.0), 5000, (42, 3000), (50, 1500)),
            _with_processes(gpu(1, 0.0), 0),
        ),
        (
            _with_processes(gpu(0, 50.0), 4500, (42, 3000), (77, 500)),
            _with_processes(gpu(1, 0.0), 600, (43, 600)),
        ),
    ]
    for k, pair in enumerate(gpus):
        history.append(host, HostSample(T0_MS + k * 10_000, pair))
    history.append(host, HostSample(T0_MS + MINUTE_MS, (gpu(0, 0.0),)))  # the minute is over

    [(_, entry)] = redis_client.xrange(minute_key(host))
    stored = json.loads(entry[b"d"])["g"]
    assert stored["0"]["dm"] == {"llama": 3000 * MIB, "qwen": 500 * MIB}
    assert stored["0"]["mo"] == round((1000 + 500 + 1500) / 3 * MIB)

    day = history.read_window(host, "24h", now_ms=T0_MS + 2 * MINUTE_MS)
    gpu0, gpu1 = day["g"]["0"], day["g"]["1"]
    assert gpu0["m"] == [4500] and gpu0["dm"] == {"llama": [3000], "qwen": [500]}
    assert gpu0["mo"] == [1000]  # the split stacks up to the mean memory used
    assert gpu1["dm"] == {"llama": [200]} and gpu1["mo"] == [0] and gpu1["m"] == [200]


def test_minutes_without_owners_or_stored_before_the_split_are_all_other(
    redis_client: redis.Redis, host: str
) -> None:
    history = HistoryWriter(redis_client)
    history.append(host, HostSample(T0_MS, (gpu(0, 10.0, mem_mib=700),)))
    history.append(host, HostSample(T0_MS + MINUTE_MS, (gpu(0, 10.0),)))
    old = {"n": 1, "g": {"0": {"m": [800 * MIB, 800 * MIB, 800 * MIB]}}}  # written before dm/mo
    redis_client.xadd(minute_key(host), {"d": json.dumps(old)}, id=f"{T0_MS + MINUTE_MS}-0")

    day = history.read_window(host, "24h", now_ms=T0_MS + 3 * MINUTE_MS)
    assert day["g"]["0"]["m"] == [700, 800]
    assert day["g"]["0"]["dm"] == {} and day["g"]["0"]["mo"] == [700, 800]
