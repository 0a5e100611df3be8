"""CPU cost of GPU sampling: 8 simulated GPUs at 1 Hz (target <= 1 % of one core).

    .venv/bin/python bench/sampler_cost.py [--seconds 20] [--gpus 8] [--interval 1.0]

With REDIS_URL set, each tick also does what the host worker does: history append (raw
stream + minute downsample) and building the websocket message. Where NVML answers, the
per-tick NVML cost is measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitoring.gpus import GpuBackend, GpuBackendError, HostSample
from monitoring.gpus.simulated import SimulatedBackend
from monitoring.host.sampler import Sampler
from monitoring.payloads import live_message

GIB = 1024**3


def make_sink(host: str) -> tuple[Callable[[HostSample], None], str]:
    url = os.environ.get("REDIS_URL")
    if not url:
        return (lambda s: None), "sample only (REDIS_URL unset: no history append)"
    import redis

    from monitoring.history import minute_key, raw_key
    from monitoring.host.history_writer import HistoryWriter

    client = redis.Redis.from_url(url)
    client.delete(raw_key(host), minute_key(host))
    history = HistoryWriter(client)

    def sink(sample: HostSample) -> None:
        history.append(host, sample)
        json.dumps(live_message(host, sample, simulated=True), separators=(",", ":"))

    return sink, "sample + history append + websocket payload"


def per_call_cpu_ms(fn: Callable[[], object], calls: int) -> list[float]:
    costs = []
    for _ in range(calls):
        t0 = time.thread_time_ns()
        fn()
        costs.append((time.thread_time_ns() - t0) / 1e6)
    return costs


def report(label: str, costs_ms: list[float], interval_s: float) -> None:
    mean = statistics.fmean(costs_ms)
    p99 = sorted(costs_ms)[int(len(costs_ms) * 0.99) - 1]
    share = mean / (interval_s * 1000) * 100
    print(
        f"{label}: {mean:.3f} ms CPU/tick (p99 {p99:.3f} ms)"
        f" = {share:.3f} % of one core at {1 / interval_s:g} Hz"
    )


def run_loop(
    backend: GpuBackend, sink: Callable[[HostSample], None], seconds: float, interval_s: float
) -> None:
    ticks: list[float] = []

    def timed_sink(sample: HostSample) -> None:
        sink(sample)
        ticks.append(time.thread_time())

    sampler = Sampler(backend, timed_sink, interval_s=interval_s, name="bench-sampler")
    cpu0, wall0 = time.process_time(), time.monotonic()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
    print(
        f"sampler thread, real clock: {sampler.ticks} ticks in {wall_s:.1f} s,"
        f" process CPU {cpu_s * 1000:.1f} ms"
        f" = {cpu_s / wall_s * 100:.3f} % of one core (includes the idle main thread)"
    )


def bench_nvml(calls: int) -> None:
    try:
        from monitoring.gpus.nvml import NvmlBackend

        nvml = NvmlBackend()
    except GpuBackendError as exc:
        print(f"NVML: not measured ({exc})")
        return
    print(
        f"NVML: {len(nvml.devices())} GPU(s): {', '.join(sorted({d.name for d in nvml.devices()}))}"
    )
    t0 = time.perf_counter()
    nvml.topology()
    print(f"NVML topology(): {(time.perf_counter() - t0) * 1000:.1f} ms wall (once at start)")
    walls = []
    for _ in range(calls):
        t0 = time.perf_counter()
        nvml.sample()
        walls.append((time.perf_counter() - t0) * 1000)
    report("NVML sample()", per_call_cpu_ms(nvml.sample, calls), 1.0)
    print(f"NVML sample() wall: mean {statistics.fmean(walls):.3f} ms, max {max(walls):.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as state_dir:
        backend = SimulatedBackend(f"{args.gpus}xH100-80GB@nvlink", state_dir=Path(state_dir))
        backend.attach(os.getpid(), list(range(args.gpus // 2)), 40 * GIB, 85.0, name="engine-a")
        backend.attach(
            os.getppid(), list(range(args.gpus // 2, args.gpus)), 30 * GIB, 60.0, name="engine-b"
        )
        sink, what = make_sink("bench-sampler-cost")
        print(f"{args.gpus} simulated GPUs, 2 engines attached; per tick: {what}")
        report("simulated sample()", per_call_cpu_ms(backend.sample, args.calls), args.interval)
        report(
            "full tick", per_call_cpu_ms(lambda: sink(backend.sample()), args.calls), args.interval
        )
        loop_sink, _ = make_sink("bench-sampler-loop")  # fresh keys: no catch-up downsample
        run_loop(backend, loop_sink, args.seconds, args.interval)
    bench_nvml(args.calls)
    print(f"threads alive at exit: {threading.active_count()}")


if __name__ == "__main__":
    main()
