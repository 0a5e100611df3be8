"""The benchmark load generator measured: its own ceiling, and its agreement with another client.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/loadgen_overhead.py \
        [--levels 1,4,16,64] [--requests 2000] [--tokens 16]
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/loadgen_overhead.py \
        --agree http://127.0.0.1:PORT [--levels 1,4] [--requests 40] [--prompt 32] [--output 32]

Overhead: a stand-in engine that answers at once (tests/support/stub_upstream.py, its own
process, vLLM's dialect, --tokens chunks per answer, no pause) and the generator
(benchmarks.host.loadgen, one asyncio loop, as the host task runs it) at each concurrency: requests
per second sustained, output tokens per second, and the CPU each side used (of one core). The
highest requests/s is the generator's ceiling on this machine: engines slower than that are
measured, not the generator.

Agreement (--agree URL of a running engine, e.g. transformers serve, or --agree stub: the
stand-in engine pacing --output chunks --interval-ms apart, whose timing is known): the same prompts and
max_tokens sent by the generator and by bench/proxy_overhead.py's hand-written HTTP/1.1 client
(no aiohttp), alternating per level; TTFT p50/p95 and output tokens/s side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))
from proxy_overhead import Connection  # noqa: E402

from benchmarks.host.loadgen.client import Target  # noqa: E402
from benchmarks.host.loadgen.runner import LevelPlan, run_level  # noqa: E402
from benchmarks.host.loadgen.stats import summarize  # noqa: E402
from benchmarks.workload import parse_workload, request_stream  # noqa: E402


class NoHooks:
    def tick(self, progress: dict[str, Any]) -> bool:
        return False

    def level_load(self, concurrency: int | None) -> None:
        return None


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_stub(
    tokens: int, interval_ms: float = 0, dialect: str = "vllm"
) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stub_upstream", "--port", "0", "--tokens",
         str(tokens), "--interval-ms", str(interval_ms), "--dialect", dialect],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line.split()[1])


async def generator_level(url: str, workload: Any, concurrency: int, requests: int) -> dict:
    plan = LevelPlan(0, concurrency, requests=requests)
    with ThreadPoolExecutor(1) as executor:
        out = await run_level(Target(url), plan, request_stream(workload, 0), NoHooks(), executor)
    return {**summarize(out.results, out.duration_s), "client_cpu_pct": out.client_cpu_pct}


def overhead(args: argparse.Namespace) -> None:
    stub, port = start_stub(args.tokens)
    url = f"http://127.0.0.1:{port}"
    workload = parse_workload({"prompt": 8, "output": args.tokens, "levels": "1", "duration_s": 1})
    print(
        f"stand-in engine: {args.tokens} chunks an answer, no pause; {args.requests} requests a level"
    )
    print(
        f"{'conc':>5} {'req/s':>9} {'tok/s':>10} {'TTFT p50 ms':>12} {'gen CPU %':>10} {'stub CPU %':>11} {'failed':>7}"
    )
    try:
        for c in args.levels:
            asyncio.run(generator_level(url, workload, c, min(50, args.requests)))  # warm up
            before, started = cpu_s(stub.pid), time.perf_counter()
            s = asyncio.run(generator_level(url, workload, c, args.requests))
            stub_pct = 100 * (cpu_s(stub.pid) - before) / (time.perf_counter() - started)
            print(
                f"{c:>5} {s['request_throughput']:>9.0f} {s['output_throughput']:>10.0f} "
                f"{s['ttft_ms']['p50']:>12.2f} {s['client_cpu_pct']:>10.0f} "
                f"{s['client_cpu_pct'] * 1e4 * s['duration_s'] / s['requests']:>15.0f} {stub_pct:>11.0f} "
                f"{s['failed']:>7}"
            )  # fmt: skip
    finally:
        stub.terminate()
        stub.wait(5)


async def raw_level(url: str, workload: Any, concurrency: int, requests: int) -> dict:
    """proxy_overhead's keep-alive connections; first chunk with text = TTFT, usage = tokens."""
    parts = urlsplit(url)
    prompts = request_stream(workload, 0)
    conns = [Connection(parts.hostname or "", parts.port or 80) for _ in range(concurrency)]
    ttfts: list[float] = []
    tokens = [0]
    left = [requests]

    async def one(conn: Connection) -> None:
        while left[0] > 0:
            left[0] -= 1
            spec = next(prompts)
            body = json.dumps({"prompt": spec.text, "max_tokens": spec.max_tokens,
                               "temperature": 0.0, "stream": True}).encode()  # fmt: skip
            started = time.perf_counter()
            if conn.writer is None:
                conn.reader, conn.writer = await asyncio.open_connection(conn.host, conn.port)
            head = f"POST /v1/completions HTTP/1.1\r\nHost: {conn.host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            conn.writer.write(head.encode() + body)
            _, headers = await conn._head()
            first = None
            async for data in conn._body(headers):
                now = time.perf_counter()
                for line in data.split(b"\n"):
                    if not line.startswith(b"data: {"):
                        continue
                    event = json.loads(line[6:])
                    texts = [c.get("text") for c in event.get("choices") or []]
                    if first is None and any(texts):
                        first = now
                        ttfts.append(first - started)
                    tokens[0] += (event.get("usage") or {}).get("completion_tokens", 0)

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in conns))
    wall = time.perf_counter() - started
    for conn in conns:
        conn.close()
    ordered = sorted(ttfts)
    return {
        "ttft_p50": statistics.median(ordered) * 1000,
        "ttft_p95": ordered[round(0.95 * (len(ordered) - 1))] * 1000,
        "output_throughput": tokens[0] / wall,
    }


def agree(args: argparse.Namespace) -> None:
    workload = parse_workload(
        {"prompt": args.prompt, "output": args.output, "levels": "1", "duration_s": 1}
    )
    print(
        f"engine {args.agree}: prompt {args.prompt} words, {args.output} tokens, {args.requests} requests a level"
    )
    print(f"{'conc':>5} {'client':>22} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'tok/s':>8}")
    for c in args.levels:
        for _ in range(args.repeats):
            g = asyncio.run(generator_level(args.agree, workload, c, args.requests))
            r = asyncio.run(raw_level(args.agree, workload, c, args.requests))
            print(
                f"{c:>5} {'benchmarks.host.loadgen':>22} {g['ttft_ms']['p50']:>12.1f} {g['ttft_ms']['p95']:>12.1f} {g['output_throughput']:>8.1f}"
            )
            print(
                f"{c:>5} {'proxy_overhead client':>22} {r['ttft_p50']:>12.1f} {r['ttft_p95']:>12.1f} {r['output_throughput']:>8.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default=None)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--agree", metavar="URL|stub")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--interval-ms", type=float, default=5.0, help="--agree stub: pace")
    args = parser.parse_args()
    default_levels, default_requests = ("1,4", 40) if args.agree else ("1,4,16,64", 2000)
    args.levels = [int(x) for x in (args.levels or default_levels).split(",")]
    args.requests = args.requests or default_requests
    if args.agree == "stub":  # a paced stand-in: the engine's own timing is known exactly
        stub, port = start_stub(args.output, args.interval_ms, dialect="transformers")
        args.agree = f"http://127.0.0.1:{port}"
        try:
            agree(args)
        finally:
            stub.terminate()
            stub.wait(5)
    else:
        agree(args) if args.agree else overhead(args)


if __name__ == "__main__":
    main()
