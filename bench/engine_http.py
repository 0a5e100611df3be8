"""What a call to an engine costs the caller: `httpx.get` per call (a Client, and so an SSL
context from the CA bundle, each time) against the process's shared client
(controlpanel.enginehttp), side by side on one loopback server, in rounds.

    .venv/bin/python bench/engine_http.py [--calls 200] [--rounds 5]

Prints, per round and way, the wall and CPU time of one call (ms), then the spread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

from controlpanel import enginehttp

BODY = b"vllm:num_requests_running 0.0\n" * 200  # a /metrics-sized answer


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        return


def _time(call: object, n: int) -> tuple[float, float]:
    assert callable(call)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        call()
    return (time.perf_counter() - wall) / n * 1000, (time.process_time() - cpu) / n * 1000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    ways = {
        "httpx.get per call": lambda: httpx.get(url, timeout=5),
        "shared client": lambda: enginehttp.client().get(url, timeout=5),
    }
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for r in range(args.rounds):
        for name, call in ways.items():
            wall, cpu = _time(call, args.calls)
            seen[name].append((wall, cpu))
            print(f"round {r + 1} {name:>20}: {wall:6.2f} ms wall, {cpu:6.2f} ms CPU per call")
    for name, rows in seen.items():
        walls, cpus = [w for w, _ in rows], [c for _, c in rows]
        print(
            f"{name:>20}: wall median {statistics.median(walls):.2f} ms "
            f"({min(walls):.2f}-{max(walls):.2f}), CPU median {statistics.median(cpus):.2f} ms "
            f"({min(cpus):.2f}-{max(cpus):.2f})"
        )
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
