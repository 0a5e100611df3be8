"""bench/proxy_overhead.py --replicas: the gateway in front of 1 and of 4 replicas of one name.

Starts, on loopback: four stand-in engines (each its own process, streaming at a fixed rate),
a private redis-server (the gateway's shared in-flight counts per replica, which pick the
least-loaded healthy replica), and the web server as `make run` starts it, on a throwaway
SQLite database with two deployments: `one` (one replica, the first engine) and `four` (four
replicas, all four engines). Per level, blocks in which the same load goes direct to the
first engine, direct to the four engines (connection i to engine i mod 4), then through the
gateway to `one` and to `four` (their order rotated each block). Per block and variant: the
added TTFT p50 and the throughput as a share of direct, each against the direct run of the
same block to the same engines (one engine for `one`, the four for `four`): what the gateway
adds, not what four engine processes cost the machine instead of one; and the web server's
and Redis's CPU per request. Printed: the median over blocks and the spread (min–max), and
how the engines' CPU split over the four replicas (the balance actually spreading).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from proxy_client import run_level, spread
from proxy_procs import (
    bench_env,
    free_port,
    prepare_replicas,
    start_redis,
    start_server,
    start_upstream,
    wait_port,
)

from controlpanel import webserver

REPLICAS = 4
VARIANTS = {"1 replica": "one", f"{REPLICAS} replicas": "four"}
ROUNDS = {1: 8, 8: 3, 32: 2}  # per block: requests on one connection, or bursts


@dataclass
class Block:
    added_ttft_s: float
    throughput_ratio: float
    engine_cpu_s: list[float]
    server_cpu_s: float  # per request, every web server process
    redis_cpu_s: float  # per request


async def measure(
    direct_urls: list[str],
    proxy_url: str,
    token: str,
    levels: list[int],
    blocks: int,
    pids: list[int],
) -> dict[int, dict[str, list[Block]]]:
    """pids: the engines', then Redis's and the web server's."""
    auth = {"Authorization": f"Bearer {token}"}
    engines = {f"engine{i}": pid for i, pid in enumerate(pids[:REPLICAS])}
    watched = {**engines, "redis": pids[REPLICAS], "server": pids[REPLICAS + 1]}
    names = list(VARIANTS)
    results: dict[int, dict[str, list[Block]]] = {}
    for concurrency in levels:
        n = ROUNDS.get(concurrency, 2)
        results[concurrency] = {name: [] for name in names}
        for model in VARIANTS.values():  # every server process's first requests
            await run_level(proxy_url, auth, concurrency, 1, {}, model=model)
        for block in range(blocks):
            direct = {
                "one": await run_level(direct_urls[:1], {}, concurrency, n, {}),
                "four": await run_level(direct_urls, {}, concurrency, n, {}),
            }
            shift = block % len(names)
            for name in names[shift:] + names[:shift]:
                model = VARIANTS[name]
                level = await run_level(proxy_url, auth, concurrency, n, watched, model=model)
                base = direct[model]
                added = statistics.median(level.ttfts_s) - statistics.median(base.ttfts_s)
                ratio = level.throughput / base.throughput
                cpu = [level.cpu_s[key] for key in engines]
                requests = len(level.ttfts_s)
                server, redis_cpu = (level.cpu_s[k] / requests for k in ("server", "redis"))
                results[concurrency][name].append(Block(added, ratio, cpu, server, redis_cpu))
    return results


def report(results: dict[int, dict[str, list[Block]]]) -> None:
    print(
        "| streams | behind the name | added TTFT p50 ms | throughput vs direct % "
        "| server CPU/request µs | Redis CPU/request µs | engine CPU per replica % | blocks |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for concurrency, by_name in results.items():
        for name, blocks in by_name.items():
            added = spread([b.added_ttft_s for b in blocks], 1e3, "+.2f")
            ratio = spread([b.throughput_ratio for b in blocks], 100, ".1f")
            cpu = [sum(b.engine_cpu_s[i] for b in blocks) for i in range(REPLICAS)]
            split = "/".join(f"{c / (sum(cpu) or 1) * 100:.0f}" for c in cpu)
            server = spread([b.server_cpu_s for b in blocks], 1e6, ".0f")
            redis_cpu = spread([b.redis_cpu_s for b in blocks], 1e6, ".0f")
            print(
                f"| {concurrency} | {name} | {added} | {ratio} | {server} | {redis_cpu} "
                f"| {split} | {len(blocks)} |"
            )


def main(args: argparse.Namespace, levels: list[int]) -> int:
    ports = [free_port() for _ in range(REPLICAS)]
    server_port, redis_port = free_port(), free_port()
    workers = args.workers or webserver.default_workers()
    with tempfile.TemporaryDirectory(prefix="proxy-replicas-") as tmp:
        env = bench_env(Path(tmp))
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        token = prepare_replicas(env, {"one": ports[:1], "four": ports})
        procs = [start_upstream(port, args.tokens, args.interval_ms) for port in ports]
        procs.append(start_redis(redis_port, Path(tmp)))
        procs.append(start_server("uvicorn", server_port, env, None, workers))
        try:
            for port in [*ports, redis_port, server_port]:
                wait_port(port)
            print(
                f"replicas: uvicorn ({workers} process(es)), {REPLICAS} stand-in engines, "
                f"{args.tokens} tokens per stream at {args.interval_ms:g} ms, burst arrivals, "
                f"{os.cpu_count()} CPUs, {args.blocks} blocks, rounds per block "
                f"{ {c: ROUNDS.get(c, 2) for c in levels} }"
            )
            direct = [f"http://127.0.0.1:{port}/v1/chat/completions" for port in ports]
            proxied = f"http://127.0.0.1:{server_port}/v1/chat/completions"
            pids = [proc.pid for proc in procs]  # the engines, Redis, the server
            run = measure(direct, proxied, token, levels, args.blocks, pids)
            report(asyncio.run(asyncio.wait_for(run, 1800)))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    return 0
