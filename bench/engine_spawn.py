"""Spawn and stop latencies of the engine supervisor.

    .venv/bin/python bench/engine_spawn.py [--spawns 20] [--engines 3]

Figures: spawn() call → process running (exec done: Popen returns after exec), stop() call →
process group gone, for a trivial long-running command and for `transformers serve` on the
tiny demo model (which also gives spawn → /health ready).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deployments.catalog.demo_model import make_tiny_llama  # noqa: E402
from deployments.engines import MARKER_ENV, LaunchSpec, get_adapter  # noqa: E402
from deployments.host import supervisor as sv  # noqa: E402


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def report(name: str, values_s: list[float]) -> None:
    ms = [v * 1000 for v in values_s]
    print(
        f"{name:<44} n={len(ms):<3} p50={statistics.median(ms):8.1f} ms  "
        f"p95={percentile(ms, 95):8.1f} ms  max={max(ms):8.1f} ms"
    )


def bench_trivial(work: Path, n: int) -> None:
    spawn_s, stop_s, scan_s = [], [], []
    for i in range(n):
        start = time.monotonic()
        handle = sv.spawn(["sleep", "60"], {MARKER_ENV: f"bench-{i}"}, work / f"sleep-{i}.log")
        spawn_s.append(time.monotonic() - start)
        assert sv.is_alive(handle.pid, handle.create_time)
        start = time.monotonic()
        sv.group_pids(handle.pgid)
        scan_s.append(time.monotonic() - start)
        result = sv.stop(handle, grace_s=5.0)
        stop_s.append(result.duration_s)
        assert result.remaining_pids == ()
    report("trivial: spawn() -> running", spawn_s)
    report("trivial: stop() -> group gone", stop_s)
    report("group_pids() scan (one /proc pass)", scan_s)


def bench_transformers(work: Path, n: int) -> None:
    model = make_tiny_llama(work / "tiny-llama")
    (work / "hf" / "hub").mkdir(parents=True, exist_ok=True)
    spawn_s, ready_s, smoke_s, stop_s = [], [], [], []
    for i in range(n):
        spec = LaunchSpec(
            deployment_id=f"bench-tf-{i}",
            model=str(model),
            port=sv.find_free_port(),
            device="cpu",
            extra_env=(("HF_HOME", str(work / "hf")),),
        )
        cmd = get_adapter("transformers").build(spec)
        start = time.monotonic()
        handle = sv.spawn(cmd.argv, cmd.env, work / f"tf-{i}.log")
        spawn_s.append(time.monotonic() - start)
        ready = sv.wait_ready(cmd.base_url, cmd.probe, 120.0, lambda h=handle: sv.handle_alive(h))
        assert ready.ready, f"{ready}\n{sv.tail(handle.log_path)}"
        ready_s.append(time.monotonic() - start)
        smoke = sv.smoke_test(cmd.base_url, cmd.request_model, None)
        assert smoke.ok, smoke.reason
        smoke_s.append(smoke.elapsed_s)
        result = sv.stop(handle, grace_s=15.0)
        assert result.signal_sent == "SIGTERM" and result.remaining_pids == ()
        stop_s.append(result.duration_s)
    report("transformers serve: spawn() -> running", spawn_s)
    report("transformers serve: spawn() -> /health 200", ready_s)
    report("transformers serve: smoke completion", smoke_s)
    report("transformers serve: stop() -> group gone", stop_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--engines", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shardboard-bench-") as tmp:
        work = Path(tmp)
        bench_trivial(work, args.spawns)
        if args.engines:
            bench_transformers(work, args.engines)


if __name__ == "__main__":
    main()
