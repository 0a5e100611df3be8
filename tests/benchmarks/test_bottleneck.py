"""The bottleneck reading on recorded series: one table row per class, and its edges.

The series are what a run stores for a level (figures, engine gauges, CPU) plus the GPU samples
of monitoring's history, shaped as HostSamples; `add_readings`' own path (level_evidence, then
gpu_series.level_figures) turns them into evidence, so the table tests what the task runs.
"""

from __future__ import annotations

import pytest

from benchmarks import gpu_series
from benchmarks.bottleneck import (
    ADVICE,
    LevelEvidence,
    classify,
    compare_layouts,
    read_level,
    throughput_gain,
)
from benchmarks.host.level_readings import level_evidence
from monitoring.gpus.base import GpuSample, HostSample

GIB = 1024**3


def gpu(index: int, util: float | None, used_gib: float = 40, power_w: float = 300) -> GpuSample:
    return GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        gpu_util_pct=util,
        mem_util_pct=None,
        memory_used_bytes=int(used_gib * GIB),
        memory_free_bytes=int((80 - used_gib) * GIB),
        memory_total_bytes=80 * GIB,
        temperature_c=50,
        power_mw=int(power_w * 1000),
        power_limit_mw=700_000,
        sm_clock_mhz=1800,
        fan_pct=None,
        throttle_reasons=(),
        ecc_uncorrected=0,
        processes=(),
        lost=False,
        error=None,
    )


def samples(utils_per_tick: list[list[float | None]], used_gib: float = 40) -> list[HostSample]:
    return [
        HostSample(ts_ms=1000 * t, gpus=tuple(gpu(i, u, used_gib) for i, u in enumerate(row)))
        for t, row in enumerate(utils_per_tick)
    ]


def level(concurrency: int, throughput: float, **extra) -> dict:
    return {
        "load": concurrency,
        "concurrency": concurrency,
        "output_throughput": throughput,
        "requests": 64,
        "failed": 0,
        "engine": {"available": False},
        "host_cpu_pct": 30.0,
        "client_cpu_pct": 20.0,
        **extra,
    }


def vllm(kv: float, waiting: float, preemptions: float = 0) -> dict:
    return {
        "available": True,
        "kv_usage_max": kv,
        "waiting_mean": waiting,
        "preemptions": preemptions,
    }


LAYOUT_1 = {"gpu_indices": [0], "simulated": False}
LAYOUT_4 = {"gpu_indices": [0, 1, 2, 3], "simulated": False}

# (name, layout, previous level, this level, GPU samples per tick, expected class)
CASES = [
    (
        "kv full, requests waiting",
        LAYOUT_1,
        level(16, 900),
        level(32, 950, engine=vllm(0.98, 12.5)),
        [[85], [88], [86]],
        "kv_cache",
    ),
    (
        "preemptions alone",
        LAYOUT_1,
        None,
        level(64, 1500, engine=vllm(0.7, 0, preemptions=3)),
        [[70]],
        "kv_cache",
    ),
    (
        "kv full and throughput flat",
        LAYOUT_1,
        level(16, 1000),
        level(32, 1030, engine=vllm(0.95, 0)),
        [[80]],
        "kv_cache",
    ),
    (
        "gpus busy",
        LAYOUT_1,
        level(8, 800),
        level(16, 1200, engine=vllm(0.4, 0)),
        [[93], [97], [95]],
        "compute",
    ),
    (
        "four ranks idle, flat",
        LAYOUT_4,
        level(8, 700),
        level(16, 720),
        [[35, 30, 33, 31], [38, 29, 30, 36]],
        "communication",
    ),
    (
        "gpus idle, host cpu busy",
        LAYOUT_1,
        level(8, 300),
        level(16, 310, host_cpu_pct=97.0),
        [[20], [25]],
        "client_io",
    ),
    (
        "gpus idle, load generator saturated",
        LAYOUT_4,
        level(8, 300),
        level(16, 305, client_cpu_pct=99.0),
        [[10, 10, 10, 10]],
        "client_io",
    ),
    (
        "still rising",
        LAYOUT_1,
        level(1, 100),
        level(2, 190),
        [[30], [35]],
        "headroom",
    ),
    ("first level, some load", LAYOUT_4, None, level(1, 50), [[20, 20, 20, 20]], "headroom"),
    ("no gpu samples", LAYOUT_1, level(1, 100), level(2, 102), [], "unknown"),
    (
        "one gpu, idle, flat: no communication to blame",
        LAYOUT_1,
        level(8, 700),
        level(16, 705),
        [[30]],
        "unknown",
    ),
    (
        "most requests failed",
        LAYOUT_1,
        None,
        level(4, 10, failed=40),
        [[95]],
        "errors",
    ),
]


@pytest.mark.parametrize(
    ("name", "layout", "previous", "this", "ticks", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_reading_of_recorded_series(name, layout, previous, this, ticks, expected) -> None:
    figures = gpu_series.level_figures(samples(ticks), layout["gpu_indices"])
    evidence = level_evidence(this, figures, layout, previous)
    reading = read_level(evidence)
    assert reading.kind == expected, (name, evidence)
    assert (reading.title, reading.advice) == ADVICE[expected]
    labels = dict(reading.evidence)
    assert labels["concurrency"] == str(this["load"])
    if ticks:
        assert labels["GPU utilization (mean)"].endswith("%")
    else:
        assert "GPU utilization (mean)" not in labels


def test_evidence_shows_the_numbers_that_led_to_it() -> None:
    reading = read_level(
        LevelEvidence(
            load=32,
            gpu_count=1,
            output_throughput=950.0,
            requests=64,
            kv_usage=0.98,
            waiting=12.5,
            preemptions=2,
            gpu_util_pct=86.4,
            previous_load=16,
            previous_throughput=900.0,
        )
    )
    shown = dict(reading.evidence)
    assert shown["KV-cache usage (max)"] == "98 %"
    assert shown["requests waiting (mean)"] == "12.5"
    assert shown["preemptions"] == "2"
    assert shown["gain over the previous level"] == "+6 %"
    assert shown["GPU utilization (mean)"] == "86 %"


def test_simulated_gpus_are_said() -> None:
    e = LevelEvidence(load=1, gpu_count=1, output_throughput=10, simulated=True)
    assert "Simulated GPUs" in read_level(e).note
    assert read_level(LevelEvidence(load=1, gpu_count=1, output_throughput=10)).note == ""


@pytest.mark.parametrize(
    ("previous", "this", "gain"),
    [((None, None), (2, 100), None), ((4, 100), (2, 150), None), ((1, 100), (2, 150), 0.5)],
)
def test_throughput_gain(previous, this, gain) -> None:
    e = LevelEvidence(
        load=this[0],
        gpu_count=1,
        output_throughput=this[1],
        previous_load=previous[0],
        previous_throughput=previous[1],
    )
    assert throughput_gain(e) == gain


def test_thresholds_are_edges() -> None:
    base = {"load": 4, "gpu_count": 1, "output_throughput": 100.0}
    assert classify(LevelEvidence(**base, gpu_util_pct=90.0)) == "compute"
    assert classify(LevelEvidence(**base, gpu_util_pct=89.9)) == "headroom"
    assert classify(LevelEvidence(**base, kv_usage=0.9, waiting=0.1)) == "kv_cache"
    assert classify(LevelEvidence(**base, kv_usage=0.89, waiting=5)) == "unknown"


@pytest.mark.parametrize(
    ("fewer", "more", "expected"),
    [((2, 1000.0), (4, 1050.0), "communication"), ((2, 1000.0), (4, 1500.0), None)],
)
def test_two_layouts_compared(fewer, more, expected) -> None:
    reading = compare_layouts(fewer, more)
    assert (reading.kind if reading else None) == expected
    if reading:
        assert dict(reading.evidence)["change with more ranks"] == "+5 %"
