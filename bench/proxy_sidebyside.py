"""bench/proxy_overhead.py --peer: direct, Shardboard's /v1/ and vllm-router side by side in
one run (see proxy_overhead's docstring), `runs` times with fresh processes each time."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import proxy_peer
from proxy_client import Level, p, run_level
from proxy_procs import (
    ROOT,
    bench_env,
    free_port,
    prepare_replicas,
    start_redis,
    start_server,
    start_upstream,
    wait_port,
    worktree,
)

BLOCKS = 3
ROUNDS = {1: 30, 8: 9, 32: 9}  # per level, split over the blocks
PATH = "/v1/chat/completions"
MESSAGES = "/v1/messages"  # Anthropic Messages: the same stream in its own events, via Shardboard


@dataclass(frozen=True)
class Row:
    """One way in (Shardboard or the router) at one level, against direct in the same run."""

    name: str
    streams: int
    added_p50_ms: float
    added_p90_ms: float
    throughput_pct: float
    cpu_pct: float  # of one core, over the level's wall time
    cpu_ms_per_request: float
    redis_ms_per_request: float | None


@dataclass(frozen=True)
class Way:
    url: str
    headers: dict[str, str]
    pids: dict[str, int]  # "cpu": the server (children included), "redis": its Redis
    model: str = "bench"
    baseline: str = "direct"  # the direct way it is compared with (itself: it is one)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def measure(ways: dict[str, Way], levels: list[int], rounds: dict[int, int]) -> list[Row]:
    rows = []
    names = list(ways)
    for concurrency in levels:
        for way in ways.values():  # every process's first requests
            await run_level(way.url, way.headers, concurrency, 1, {}, model=way.model)
        per_block = [
            rounds[concurrency] // BLOCKS + (i < rounds[concurrency] % BLOCKS)
            for i in range(BLOCKS)
        ]
        got: dict[str, list[Level]] = {name: [] for name in names}
        for block, n in enumerate(per_block):
            shift = block % len(names)
            for name in names[shift:] + names[:shift]:
                way = ways[name]
                level = await run_level(
                    way.url, way.headers, concurrency, n, way.pids, model=way.model
                )
                got[name].append(level)
        for name, way in ways.items():
            if way.baseline != name:
                direct = Level.joined(got[way.baseline])
                rows.append(_row(name, concurrency, direct, Level.joined(got[name])))
    return rows


def _row(name: str, streams: int, direct: Level, way: Level) -> Row:
    requests = len(way.ttfts_s)
    redis_s = way.cpu_s.get("redis")
    return Row(
        name,
        streams,
        (statistics.median(way.ttfts_s) - statistics.median(direct.ttfts_s)) * 1000,
        (p(way.ttfts_s, 90) - p(direct.ttfts_s, 90)) * 1000,
        way.throughput / direct.throughput * 100,
        way.cpu_s["cpu"] / way.wall_s * 100,
        way.cpu_s["cpu"] / requests * 1000,
        None if redis_s is None else redis_s / requests * 1000,
    )


def one_run(args: argparse.Namespace, levels: list[int], workers: int) -> list[Row]:
    rounds = {c: args.rounds or ROUNDS.get(c, 3) for c in levels}
    upstream_port, redis_port, router_port, messages_port = (free_port() for _ in range(4))
    with tempfile.TemporaryDirectory(prefix="proxy-peer-") as tmp:
        env = bench_env(Path(tmp))
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        # /v1/messages goes to a vLLM row (transformers serve has no Messages API): its own
        # stand-in in the vllm dialect, its own direct baseline.
        names = {"bench": [upstream_port], "bench-messages": [messages_port]}
        token = prepare_replicas(env, names, engines={"bench-messages": "vllm"})
        upstream = start_upstream(upstream_port, args.tokens, args.interval_ms)
        messages = start_upstream(messages_port, args.tokens, args.interval_ms, "vllm")
        procs = [upstream, start_redis(redis_port, Path(tmp)), messages]
        redis_pid, base = procs[1].pid, "http://127.0.0.1"
        auth = {"Authorization": f"Bearer {token}"}
        ways = {"direct": Way(f"{base}:{upstream_port}{PATH}", {}, {"cpu": upstream.pid})}
        direct_m = "direct messages"
        if args.messages:
            url = f"{base}:{messages_port}{MESSAGES}"
            ways[direct_m] = Way(url, {}, {"cpu": messages.pid}, baseline=direct_m)
        try:
            servers = [(server, ROOT, "") for server in args.server.split(",")]
            if args.base:  # the same server from a worktree of that revision, beside this tree
                servers += [(servers[0][0], worktree(args.base, Path(tmp)), f"@{args.base}")]
            for server, cwd, rev in servers:
                port = free_port()
                procs.append(start_server(server, port, env, args.profile, workers, None, cwd))
                name = "shardboard" if "," not in args.server else f"shardboard-{server}"
                pids = {"cpu": procs[-1].pid, "redis": redis_pid}
                ways[name + rev] = Way(f"{base}:{port}{PATH}", auth, pids)
                if args.messages and not rev:
                    url = f"{base}:{port}{MESSAGES}"
                    ways[f"{name} messages"] = Way(url, auth, pids, "bench-messages", direct_m)
                wait_port(port)
            for port in (upstream_port, redis_port, messages_port):
                wait_port(port)
            log = Path(tmp) / "vllm-router.log"
            procs.append(
                proxy_peer.start_router(router_port, free_port(), [f"{base}:{upstream_port}"], log)
            )
            try:
                wait_port(router_port, timeout_s=60)
            except RuntimeError:
                print(log.read_text()[-3000:])
                raise
            ways["vllm-router"] = Way(f"{base}:{router_port}{PATH}", {}, {"cpu": procs[-1].pid})
            return asyncio.run(asyncio.wait_for(measure(ways, levels, rounds), 900))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
            if args.base:
                tree = worktree(args.base, Path(tmp))
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])


def print_run(rows: list[Row]) -> None:
    print(
        "| streams | via | added TTFT p50 ms | added TTFT p90 ms | throughput % of direct "
        "| server CPU % | server CPU ms/request | its Redis ms/request |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        redis = "" if r.redis_ms_per_request is None else f"{r.redis_ms_per_request:.2f}"
        print(
            f"| {r.streams} | {r.name} | {r.added_p50_ms:+.2f} | {r.added_p90_ms:+.2f} "
            f"| {r.throughput_pct:.1f} | {r.cpu_pct:.1f} | {r.cpu_ms_per_request:.2f} | {redis} |"
        )


def print_summary(runs: list[list[Row]]) -> None:
    """Per level and way: the median over runs and the spread (min–max)."""
    print("| streams | via | added TTFT p50 ms | throughput % | server CPU ms/request |")
    print("|---|---|---|---|---|")
    keys = [(r.streams, r.name) for r in runs[0]]
    for streams, name in keys:
        same = [r for run in runs for r in run if (r.streams, r.name) == (streams, name)]
        cells = [
            _cell([r.added_p50_ms for r in same], "+.2f"),
            _cell([r.throughput_pct for r in same], ".1f"),
            _cell([r.cpu_ms_per_request for r in same], ".2f"),
        ]
        print(f"| {streams} | {name} | " + " | ".join(cells) + " |")


def _cell(values: list[float], fmt: str) -> str:
    m = statistics.median(values)
    return f"{m:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def main(args: argparse.Namespace, levels: list[int], workers: int) -> int:
    if not proxy_peer.available():
        print(f"vllm-router is not installed in {proxy_peer.VENV}; see bench/proxy_peer.py")
        return 2
    runs = []
    for index in range(args.runs):
        started = time.strftime("%H:%M:%S", time.gmtime())
        print(
            f"run {index + 1}/{args.runs} at {started} UTC: {args.server} ({workers} process(es)) "
            f"and vllm-router {proxy_peer.VERSION} (round robin), {args.tokens} tokens at "
            f"{args.interval_ms:g} ms, burst arrivals, {os.cpu_count()} CPUs, "
            f"load average {load_average()}"
        )
        rows = one_run(args, levels, workers)
        print(f"load average at its end {load_average()}")
        print_run(rows)
        runs.append(rows)
    if len(runs) > 1:
        print(f"\nover {len(runs)} runs: median (min–max)")
        print_summary(runs)
    return 0
