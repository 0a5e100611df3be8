"""Prefix-aware routing, live: Shardboard's gateway beside the real vllm-router on one trace.

bench/routing_affinity.py compares the rules in a simulation (and vllm-router's rule as a
model). This one runs the real programs: four stand-in engines with a prefix cache and a fixed
capacity (bench/cache_engine.py), the web server as `make run` starts it (two processes, a
private Redis, a throwaway SQLite database holding one name with four running replicas) and
the vllm-router binary (its cache_aware policy with its defaults, and round_robin as the
cache-blind baseline). Each router gets the same seeded trace: Poisson arrivals, each prompt
one of G shared headers of 2000 characters (Zipf popularity) + a unique question, sent as
/v1/completions. Printed per router and run: the affinity hit rate (requests whose header the
chosen engine had cached, counted by the engines), the mean over samples of max/mean requests
inside the engines (sampled every 50 ms while any is busy), the peak in one engine, latency p50
and p90, and errors. Each router is warmed up on a short trace first. Routers run in rotated order, `--runs` times; the spread is printed.

vllm-router is not a dependency: it is installed into its own venv (bench venvs under
~/.cache/shardboard/bench-venvs/router; `--router` names another binary).

    .venv/bin/python bench/routing_live.py [--runs 3] [--requests 900] [--rate 24]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from proxy_procs import ROOT, bench_env, free_port, prepare_replicas, start_redis, wait_port

ENGINES = 4
HEADERS = 32
HEADER_CHARS = 2000
ROUTER = Path.home() / ".cache/shardboard/bench-venvs/router/bin/vllm-router"


@dataclass
class Run:
    router: str
    hit_rate: float
    imbalance: float  # mean of max/mean requests inside the engines
    peak: int
    p50_s: float
    p90_s: float
    errors: int


def trace(n: int, rate: float, seed: int) -> list[tuple[float, str]]:
    """(arrival offset s, prompt) for n requests; the same for every router."""
    rng = random.Random(seed)
    weights = [1 / (k**1.1) for k in range(1, HEADERS + 1)]
    headers = []
    for g in range(HEADERS):
        words = random.Random(g).choices("alpha beta gamma delta kappa sigma omega".split(), k=400)
        headers.append(f"H{g:03d} " + " ".join(words)[: HEADER_CHARS - 5])
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        g = rng.choices(range(HEADERS), weights)[0]
        out.append((t, f"{headers[g]}| question {i}: what follows {rng.random():.12f}?"))
    return out


async def engine_stats(session: aiohttp.ClientSession, ports: list[int]) -> list[dict[str, int]]:
    out = []
    for port in ports:
        async with session.get(f"http://127.0.0.1:{port}/stats") as r:
            out.append(await r.json())
    return out


async def run_trace(
    name: str, url: str, token: str, ports: list[int], requests: list[tuple[float, str]]
) -> Run:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for port in ports:
            async with session.post(f"http://127.0.0.1:{port}/stats/reset"):
                pass
        latencies: list[float] = []
        errors = 0
        ratios: list[float] = []
        done = asyncio.Event()

        async def one(prompt: str) -> None:
            nonlocal errors
            body = {"model": "cached", "prompt": prompt, "max_tokens": 1}
            start = time.perf_counter()
            try:
                async with session.post(f"{url}/v1/completions", json=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
                        return
            except aiohttp.ClientError:
                errors += 1
                return
            latencies.append(time.perf_counter() - start)

        async def sample() -> None:
            while not done.is_set():
                inside = [s["inside"] for s in await engine_stats(session, ports)]
                if sum(inside):
                    ratios.append(max(inside) / (sum(inside) / len(inside)))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        start = time.perf_counter()
        tasks = []
        for offset, prompt in requests:
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(prompt)))
        await asyncio.gather(*tasks)
        done.set()
        await sampler
        stats = await engine_stats(session, ports)
    served = sum(s["requests"] for s in stats) or 1
    latencies.sort()
    return Run(
        router=name,
        hit_rate=sum(s["hits"] for s in stats) / served,
        imbalance=statistics.fmean(ratios) if ratios else 1.0,
        peak=max(s["peak"] for s in stats),
        p50_s=latencies[len(latencies) // 2] if latencies else 0.0,
        p90_s=latencies[int(len(latencies) * 0.9)] if latencies else 0.0,
        errors=errors,
    )


def report(runs: list[Run]) -> None:
    print("\n| router | hit rate | max/mean inside | peak | p50 s | p90 s | errors |")
    print("|---|---|---|---|---|---|---|")
    for name in dict.fromkeys(r.router for r in runs):
        mine = [r for r in runs if r.router == name]

        def cell(values: list[float], fmt: str) -> str:
            mid = statistics.median(values)
            return f"{mid:{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"

        print(
            f"| {name} | {cell([r.hit_rate * 100 for r in mine], '.1f')} % "
            f"| {cell([r.imbalance for r in mine], '.2f')} "
            f"| {max(r.peak for r in mine)} "
            f"| {cell([r.p50_s for r in mine], '.2f')} | {cell([r.p90_s for r in mine], '.2f')} "
            f"| {sum(r.errors for r in mine)} |"
        )


def main(args: argparse.Namespace) -> int:
    if not Path(args.router).exists():
        print(f"no vllm-router at {args.router}: pip install vllm-router into its own venv")
        return 2
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ports = [free_port() for _ in range(ENGINES)]
            for port in ports:
                cmd = [sys.executable, str(ROOT / "bench" / "cache_engine.py"), "--port", str(port)]
                procs.append(subprocess.Popen(cmd, cwd=ROOT))
            for port in ports:
                wait_port(port)
            redis_port = free_port()
            procs.append(start_redis(redis_port, Path(tmp)))
            env = bench_env(Path(tmp)) | {"REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
            env |= {
                "PLAYGROUND_MAX_CONCURRENT": "1000",
                "PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING": "1000",
            }
            wait_port(redis_port)
            token = prepare_replicas(env, {"cached": ports})
            web_port = free_port()
            web_env = env | {"SHARDBOARD_PORT": str(web_port), "SHARDBOARD_WEB_WORKERS": "2"}
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "controlpanel.webserver"], cwd=ROOT, env=web_env
                )
            )
            routers = {
                "shardboard (bounded-load affinity)": (f"http://127.0.0.1:{web_port}", token)
            }
            for policy in ("cache_aware", "round_robin"):
                port = free_port()
                urls = [f"http://127.0.0.1:{p}" for p in ports]
                cmd = [args.router, "--host", "127.0.0.1", "--port", str(port), "--policy", policy]
                cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
                procs.append(
                    subprocess.Popen([*cmd, "--worker-urls", *urls], stdout=subprocess.DEVNULL)
                )
                routers[f"vllm-router {policy}"] = (f"http://127.0.0.1:{port}", "")
            for url, _ in routers.values():
                wait_port(int(url.rsplit(":", 1)[1]), timeout_s=60)
            time.sleep(2)  # vllm-router's first health checks of its workers
            requests = trace(args.requests, args.rate, args.seed)
            # Each router's first requests (a web process's imports, connection pools, the
            # Redis scripts' load) are not what is compared: a short trace first, unmeasured.
            warm = trace(60, args.rate, args.seed + 1)
            for url, tok in routers.values():
                asyncio.run(run_trace("warm-up", url, tok, ports, warm))
            print(
                f"{args.requests} requests at {args.rate}/s over {ENGINES} engines, "
                f"{HEADERS} headers; load average {os.getloadavg()[0]:.1f}"
            )
            results: list[Run] = []
            names = list(routers)
            for i in range(args.runs):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    url, tok = routers[name]
                    run = asyncio.run(run_trace(name, url, tok, ports, requests))
                    print(f"run {i + 1}: {run}", flush=True)
                    results.append(run)
            report(results)
            print(f"load average at the end {os.getloadavg()[0]:.1f}")
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=900)
    parser.add_argument("--rate", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--router", default=str(ROUTER))
    sys.exit(main(parser.parse_args()))
