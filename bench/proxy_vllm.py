"""bench/proxy_overhead.py --vllm: the gateway in front of the real vLLM instead of the stand-in.

The engine is vLLM's CPU build as scripts/vllm.sh installed it (`vllm serve` on the tests' tiny
Llama, eager, a 128 MiB KV space, no API key: the deployment row's key is not asked for), one
process tree for the whole command; each run starts a fresh Shardboard server (uvicorn, its
default processes, a throwaway SQLite database with one running vLLM row on the engine's port).
Per level, direct and proxied chat streams (`max_tokens` = --tokens, `ignore_eos`, burst
arrivals) alternate in blocks, so that a machine that slows down weighs on both. Printed: each
run's table, then per level the median over the runs and their range. The engine's own pace
(tens of tokens a second a stream on two shared cores) sets the scale: the added time is small
beside it, and its spread is the engine's as much as the gateway's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from proxy_client import Level, run_level, spread
from proxy_procs import (
    ROOT,
    bench_env,
    free_port,
    prepare_replicas,
    start_server,
    wait_port,
)

KV_BYTES = 128 << 20
BLOCKS = 3
ROUNDS = {1: 8, 8: 3}  # per block; a 64-token stream takes about a second alone


def vllm_binary() -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "vllm.sh"), "--path"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit("no vLLM: run scripts/vllm.sh first")
    return done.stdout.strip().splitlines()[-1]


def start_vllm(port: int, model: Path, log_path: Path) -> subprocess.Popen[bytes]:
    argv = [vllm_binary(), "serve", str(model), "--served-model-name", "bench",
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512",
            "--enforce-eager", "--kv-cache-memory-bytes", str(KV_BYTES)]  # fmt: skip
    env = {
        **os.environ,
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 400) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM exited {proc.returncode} while starting")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"vLLM not healthy after {timeout_s} s")


async def one_run(
    direct: str, proxied: str, token: str, levels: list[int], pids: dict[str, int], tokens: int
) -> dict[int, tuple[Level, Level]]:
    auth = {"Authorization": f"Bearer {token}"}
    body = {"max_tokens": tokens, "ignore_eos": True}
    found = {}
    for concurrency in levels:
        rounds = ROUNDS.get(concurrency, 3)
        ways: tuple[list[Level], list[Level]] = ([], [])
        for _ in range(BLOCKS):
            for url, headers, into in ((direct, {}, ways[0]), (proxied, auth, ways[1])):
                into.append(
                    await run_level(url, headers, concurrency, rounds, pids, extra_body=body)
                )
        found[concurrency] = (Level.joined(ways[0]), Level.joined(ways[1]))
    return found


def row(concurrency: int, direct: Level, proxied: Level) -> dict[str, float]:
    d50, x50 = statistics.median(direct.ttfts_s), statistics.median(proxied.ttfts_s)
    return {
        "direct_ttft_s": d50,
        "proxied_ttft_s": x50,
        "added_ttft_s": x50 - d50,
        "direct_tok_s": direct.throughput,
        "proxied_tok_s": proxied.throughput,
        "ratio": proxied.throughput / direct.throughput,
        "server_cpu_s": proxied.cpu_s.get("server", 0.0) / len(proxied.ttfts_s),
    }


def print_run(n: int, rows: dict[int, dict[str, float]]) -> None:
    print(f"run {n}  (load average {' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    for c, r in rows.items():
        print(
            f"  {c:>2} streams  TTFT p50 direct {r['direct_ttft_s'] * 1e3:7.1f} ms  proxied "
            f"{r['proxied_ttft_s'] * 1e3:7.1f} ms  added {r['added_ttft_s'] * 1e3:+6.2f} ms  "
            f"throughput direct {r['direct_tok_s']:6.1f} tok/s  proxied "
            f"{r['proxied_tok_s']:6.1f} tok/s ({r['ratio'] * 100:5.1f} %)  server CPU "
            f"{r['server_cpu_s'] * 1e3:.1f} ms/request"
        )


def print_summary(runs: list[dict[int, dict[str, float]]]) -> None:
    print(f"\nover {len(runs)} runs: median (min–max)")
    print(
        "| streams | TTFT p50 direct ms | added TTFT p50 ms | throughput direct tok/s "
        "| throughput through /v1/ % of direct | server CPU ms/request |"
    )
    print("|---|---|---|---|---|---|")
    for c in runs[0]:
        cells = [
            spread([r[c]["direct_ttft_s"] for r in runs], 1e3, ".1f"),
            spread([r[c]["added_ttft_s"] for r in runs], 1e3, "+.2f"),
            spread([r[c]["direct_tok_s"] for r in runs], 1, ".1f"),
            spread([r[c]["ratio"] for r in runs], 100, ".1f"),
            spread([r[c]["server_cpu_s"] for r in runs], 1e3, ".1f"),
        ]
        print(f"| {c} | " + " | ".join(cells) + " |")


def main(args: argparse.Namespace, levels: list[int], workers: int) -> int:
    from deployments.catalog.demo_model import make_tiny_llama

    with tempfile.TemporaryDirectory(prefix="proxy-vllm-") as tmp:
        model = make_tiny_llama(Path(tmp) / "tiny")
        engine_port = free_port()
        engine = start_vllm(engine_port, model, Path(tmp) / "vllm.log")
        direct = f"http://127.0.0.1:{engine_port}"
        try:
            start_s = wait_healthy(direct, engine)
            print(
                f"vLLM (CPU build) up in {start_s:.0f} s; uvicorn ({workers} process(es)); "
                f"{args.tokens} tokens a stream, burst arrivals, {BLOCKS} blocks, rounds per "
                f"block {ROUNDS}, {os.cpu_count()} CPUs"
            )
            runs = [
                run_once(n, args, levels, workers, engine.pid, engine_port)
                for n in range(1, args.runs + 1)
            ]
        finally:
            os.killpg(engine.pid, 15)
            engine.wait(30)
    print_summary(runs)
    return 0


def run_once(
    n: int,
    args: argparse.Namespace,
    levels: list[int],
    workers: int,
    engine_pid: int,
    engine_port: int,
) -> dict[int, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix=f"proxy-vllm-run{n}-") as tmp:
        env = bench_env(Path(tmp))
        token = prepare_replicas(env, {"bench": [engine_port]}, {"bench": "vllm"})
        server_port = free_port()
        server = start_server("uvicorn", server_port, env, None, workers)
        try:
            wait_port(server_port)
            path = "/v1/chat/completions"
            pids = {"server": server.pid, "engine": engine_pid}
            measured = asyncio.run(
                asyncio.wait_for(
                    one_run(
                        f"http://127.0.0.1:{engine_port}{path}",
                        f"http://127.0.0.1:{server_port}{path}",
                        token,
                        levels,
                        pids,
                        args.tokens,
                    ),
                    1800,
                )
            )
        finally:
            server.terminate()
            server.wait(10)
    rows = {c: row(c, *ways) for c, ways in measured.items()}
    print_run(n, rows)
    return rows
