"""What the playground gateway adds: direct vs through the proxy, at 1, 8 and 32 streams.

    .venv/bin/python bench/proxy_overhead.py [--tokens 64] [--interval-ms 5] [--server uvicorn|daphne]

Starts, on loopback only: a stand-in engine streaming N tokens at a fixed rate
(tests/playground/stub_upstream.py, its own process), a real ASGI server running Shardboard
(uvicorn or daphne, its own process) on a throwaway SQLite database, and measures from here
with httpx: time to first token (p50/p95) and token throughput, direct and proxied.
Targets: added TTFT p50 <= 5 ms; proxied throughput >= 95 % of direct. Redis (REDIS_URL)
is used for the concurrency slots when it is up; the limit is raised so that it never bites.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LEVELS = (1, 8, 32)
BODY = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


def bench_env(var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SHARDBOARD_VAR_DIR=str(var_dir),
        DATABASE_URL=f"sqlite:///{var_dir / 'bench.sqlite3'}",
        PLAYGROUND_MAX_CONCURRENT="1000",
        PLAYGROUND_MAX_TOKENS="100000",
        DJANGO_SETTINGS_MODULE="controlpanel.settings",
        LOG_LEVEL="WARNING",
    )
    return env


def prepare_database(env: dict[str, str], upstream_port: int) -> str:
    """Migrate, create an operator, a token and a deployment row; returns the token."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    script = (
        "from django.contrib.auth.models import Group, User\n"
        "from deployments.models import Deployment\n"
        "from monitoring.models import Host\n"
        "from playground.services import token_create\n"
        "u = User.objects.create_user('bench-operator', password='x')\n"
        "u.groups.add(Group.objects.get_or_create(name='operator')[0])\n"
        "h = Host.objects.create(name='bench', queue='host.bench', backend='simulated', simulated=True)\n"
        f"Deployment.objects.create(name='bench', model_id='/m', engine='transformers', host=h,"
        f" status='running', bind_host='127.0.0.1', port={upstream_port}, created_by=u)\n"
        "print(token_create(user=u, name='bench')[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def start_upstream(port: int, tokens: int, interval_ms: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "tests.playground.stub_upstream", "--port", str(port)]
    cmd += ["--tokens", str(tokens), "--interval-ms", str(interval_ms), "--dialect", "transformers"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)


def start_server(kind: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    if kind == "daphne":
        cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        cmd += ["--access-log", os.devnull]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--log-level", "warning", "--no-access-log"]
    return subprocess.Popen([*cmd, "controlpanel.asgi:application"], cwd=ROOT, env=env)


@dataclass
class Stream:
    ttft_s: float
    total_s: float
    chunks: int


async def one_stream(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Stream:
    started = time.perf_counter()
    first = None
    chunks = 0
    async with client.stream("POST", url, json=BODY, headers=headers) as response:
        response.raise_for_status()
        async for data in response.aiter_raw():
            if first is None and b'"content"' in data:
                first = time.perf_counter()
            chunks += data.count(b'"content"')
    ended = time.perf_counter()
    return Stream((first or ended) - started, ended - started, chunks)


@dataclass
class Level:
    ttfts_s: list[float]
    tokens: int
    wall_s: float

    @property
    def throughput(self) -> float:
        return self.tokens / self.wall_s


async def run_level(url: str, headers: dict[str, str], concurrency: int, rounds: int) -> Level:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=30, limits=limits, trust_env=False) as client:
        await one_stream(client, url, headers)  # warm the connections and the server
        ttfts, tokens = [], 0
        started = time.perf_counter()
        for _ in range(rounds):
            streams = await asyncio.gather(
                *(one_stream(client, url, headers) for _ in range(concurrency))
            )
            ttfts += [s.ttft_s for s in streams]
            tokens += sum(s.chunks for s in streams)
        return Level(ttfts, tokens, time.perf_counter() - started)


def p(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def report(concurrency: int, direct: Level, proxied: Level) -> bool:
    d50, x50 = statistics.median(direct.ttfts_s) * 1000, statistics.median(proxied.ttfts_s) * 1000
    added = x50 - d50
    ratio = proxied.throughput / direct.throughput
    ok = added <= 5.0 and ratio >= 0.95
    print(
        f"{concurrency:>3} streams  TTFT p50 direct {d50:6.2f} ms  proxied {x50:6.2f} ms  "
        f"added {added:+6.2f} ms (p95 proxied {p(proxied.ttfts_s, 95) * 1000:6.2f} ms)  "
        f"throughput direct {direct.throughput:8.0f} tok/s  proxied {proxied.throughput:8.0f} tok/s  "
        f"({ratio * 100:5.1f} %)  {'OK' if ok else 'MISSED'}"
    )
    return ok


async def measure(direct_url: str, proxy_url: str, token: str, rounds: dict[int, int]) -> bool:
    auth = {"Authorization": f"Bearer {token}"}
    ok = True
    for concurrency in LEVELS:
        direct = await run_level(direct_url, {}, concurrency, rounds[concurrency])
        proxied = await run_level(proxy_url, auth, concurrency, rounds[concurrency])
        ok = report(concurrency, direct, proxied) and ok
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds per level (default: by level)"
    )
    args = parser.parse_args()
    rounds = {c: args.rounds or {1: 30, 8: 6, 32: 3}[c] for c in LEVELS}
    upstream_port, server_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        env = bench_env(Path(tmp))
        token = prepare_database(env, upstream_port)
        procs = [start_upstream(upstream_port, args.tokens, args.interval_ms)]
        procs.append(start_server(args.server, server_port, env))
        try:
            wait_port(upstream_port)
            wait_port(server_port)
            print(
                f"{args.server}, {args.tokens} tokens per stream at {args.interval_ms:g} ms "
                f"each ({1000 / args.interval_ms:.0f} tok/s per stream), loopback"
            )
            direct = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
            proxied = f"http://127.0.0.1:{server_port}/v1/chat/completions"
            ok = asyncio.run(asyncio.wait_for(measure(direct, proxied, token, rounds), 300))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
