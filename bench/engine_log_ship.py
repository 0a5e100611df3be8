"""Engine log shipping: how fast lines go from an engine's file to Redis and to a live page.

    REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python bench/engine_log_ship.py [--lines 200000]

Figures: (1) a flood: `--lines` lines of 120 characters written at once, the time until the
follower thread has caught up (shipping what its per-pass budget allows, skipping ahead past
the rest), lines shipped per second and its CPU time per line; (2) latency:
single lines written 100 ms apart, write → the PUBLISHed batch received (p50, p95, max), which
is what a page watching live sees on top of the websocket hop. Uses the Redis db of REDIS_URL
and deletes the keys it made.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

import django  # noqa: E402

django.setup()

from deployments import enginelog  # noqa: E402
from deployments.host.logship.cleaning import Masker  # noqa: E402
from deployments.host.logship.follower import Follower  # noqa: E402

PK = 999_999_001


def follower(path: Path) -> Follower:
    return Follower(
        pk=PK,
        path=path,
        mask=Masker(["9f2c" * 16, "hf_AbCdEfGhIjKlMnOpQrStUv"]),
        client=enginelog.client(),
        channel=enginelog.channel(PK),
    )


def flood(path: Path, lines: int) -> None:
    path.write_text("".join(f"INFO {i:08d} " + "x" * 106 + "\n" for i in range(lines)))
    ship = follower(path)
    cpu: dict[str, float] = {}

    def run() -> None:  # the thread body, so that its CPU time can be read on its own clock
        started = time.thread_time()
        ship._run()
        cpu["s"] = time.thread_time() - started

    size = path.stat().st_size
    t0 = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    while ship.offset < size:
        time.sleep(0.01)
    elapsed = time.monotonic() - t0
    ship._stop.set()
    thread.join()
    print(
        f"flood of {lines} lines ({size / 2**20:.1f} MiB): caught up in {elapsed:.2f} s, "
        f"{ship.shipped_lines} lines shipped ({ship.shipped_lines / elapsed:,.0f} lines/s), "
        f"{ship.skipped_bytes / 2**20:.1f} MiB skipped; follower CPU {cpu['s']:.2f} s = "
        f"{cpu['s'] * 1e6 / max(1, ship.shipped_lines):.1f} µs per shipped line; "
        f"stream kept {enginelog.client().xlen(enginelog.stream_key(PK))} lines"
    )


def latency(path: Path, samples: int) -> None:
    path.write_text("")
    pubsub = enginelog.client().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(enginelog.channel(PK))
    ship = follower(path).start()
    delays_ms = []
    with path.open("a") as engine:
        for i in range(samples):
            written = time.monotonic()
            engine.write(f"request {i} done\n")
            engine.flush()
            while True:
                message = pubsub.get_message(timeout=2)
                if message and any(
                    f"request {i} " in t for _, t in json.loads(message["data"])["lines"]
                ):
                    break
            delays_ms.append((time.monotonic() - written) * 1000)
            time.sleep(0.1)
    ship.stop()
    pubsub.close()
    ordered = sorted(delays_ms)
    print(
        f"latency write → published: n={samples} p50={statistics.median(ordered):.0f} ms "
        f"p95={ordered[int(0.95 * (len(ordered) - 1))]:.0f} ms max={ordered[-1]:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    keys = (enginelog.stream_key(PK), enginelog.position_key(PK))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            enginelog.client().delete(*keys)
            flood(Path(tmp) / "flood.log", args.lines)
            enginelog.client().delete(*keys)
            latency(Path(tmp) / "latency.log", args.samples)
        finally:
            enginelog.client().delete(*keys)


if __name__ == "__main__":
    main()
