"""What the playground gateway adds: direct vs through the proxy, at 1, 8 and 32 streams.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py \
        [--tokens 64] [--interval-ms 5] [--server uvicorn|daphne] [--workers N] [--pin] \
        [--arrivals burst|staggered] [--levels 1,8,32]

Starts, on loopback only: a stand-in engine streaming N tokens at a fixed rate
(tests/playground/stub_upstream.py, its own process), a real ASGI server running Shardboard
(uvicorn with controlpanel.webserver's options and its default number of processes, as
`make run` starts it, or daphne for comparison) on a throwaway SQLite database, and
measures from this process with a hand-written keep-alive HTTP/1.1 client (cheap enough not
to starve the server): time to first token (p50/p95) and token throughput, direct and
proxied, with the CPU share each process used meanwhile.
Targets: added TTFT p50 <= 5 ms; proxied throughput >= 95 % of direct. Redis (REDIS_URL)
is used for the concurrency slots when it is up; the limit is raised so that it never bites.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from controlpanel import webserver  # noqa: E402  (the server's defaults)

LEVELS = (1, 8, 32)
BLOCKS = 3  # direct and proxied alternate this many times per level
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


def start_server(
    kind: str, port: int, env: dict[str, str], profile: str | None, workers: int
) -> subprocess.Popen[bytes]:
    python = [sys.executable, *(["-m", "cProfile", "-o", profile] if profile else [])]
    if kind == "daphne":
        cmd = [*python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
        cmd += ["--access-log", os.devnull]
        return subprocess.Popen([*cmd, "controlpanel.asgi:application"], cwd=ROOT, env=env)
    env = dict(env, SHARDBOARD_PORT=str(port), SHARDBOARD_WEB_WORKERS=str(workers))
    cmd = [*python, "-m", "controlpanel.webserver"]
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


@dataclass
class Stream:
    ttft_s: float
    total_s: float
    chunks: int


class Connection:
    """A keep-alive HTTP/1.1 connection, spoken by hand: the load generator must cost far less
    CPU than what it measures (httpx spent about as much as the proxy per chunk)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> Stream:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        head += "Content-Type: application/json\r\n" + f"Content-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        started = time.perf_counter()
        self.writer.write(head.encode() + body)
        status, response_headers = await self._head()
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
        first, chunks = None, 0
        async for data in self._body(response_headers):
            if first is None and b'"content"' in data:
                first = time.perf_counter()
            chunks += data.count(b'"content"')
        ended = time.perf_counter()
        if response_headers.get("connection", "").lower() == "close":
            self.close()
        return Stream((first or ended) - started, ended - started, chunks)

    async def _head(self) -> tuple[int, dict[str, str]]:
        assert self.reader is not None
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(" ")[1]), headers

    async def _body(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        assert self.reader is not None
        if "content-length" in headers:
            yield await self.reader.readexactly(int(headers["content-length"]))
            return
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return
            yield data[:-2]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class Level:
    ttfts_s: list[float]
    tokens: int
    wall_s: float
    cpu_s: dict[str, float]

    @property
    def throughput(self) -> float:
        return self.tokens / self.wall_s

    @staticmethod
    def joined(levels: list[Level]) -> Level:
        cpu: dict[str, float] = {}
        for level in levels:
            for name, used in level.cpu_s.items():
                cpu[name] = cpu.get(name, 0.0) + used
        return Level(
            [t for level in levels for t in level.ttfts_s],
            sum(level.tokens for level in levels),
            sum(level.wall_s for level in levels),
            cpu,
        )


def cpu_s(pid: int, *, tree: bool) -> float:
    """User + system CPU seconds so far of a process (and its live children: server workers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    if not tree:
        return own
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return own + sum(cpu_s(int(child), tree=True) for child in children)


def cpu_all(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_s(pid, tree=name == "server") for name, pid in pids.items()}


async def run_level(
    url: str,
    headers: dict[str, str],
    concurrency: int,
    rounds: int,
    pids: dict[str, int],
    stagger_s: float | None = None,
) -> Level:
    """`rounds` requests on each of `concurrency` keep-alive connections.

    Burst (stagger_s None): every round starts all streams at once and waits for all.
    Staggered: connection i starts i * stagger_s later and then sends its requests back to
    back, so that streams start evenly spread, as in a steady state of that many streams.
    """
    parts = urlsplit(url)
    body = json.dumps(BODY).encode()
    conns = [
        Connection(parts.hostname or "127.0.0.1", parts.port or 80) for _ in range(concurrency)
    ]

    async def one_connection(index: int, conn: Connection) -> list[Stream]:
        await asyncio.sleep(index * (stagger_s or 0.0))
        return [await conn.post(parts.path, body, headers) for _ in range(rounds)]

    try:
        await asyncio.gather(*(c.post(parts.path, body, headers) for c in conns))  # warm up
        ttfts, tokens = [], 0
        cpu_before = cpu_all(pids)
        started = time.perf_counter()
        if stagger_s is None:
            for _ in range(rounds):
                streams = await asyncio.gather(*(c.post(parts.path, body, headers) for c in conns))
                ttfts += [s.ttft_s for s in streams]
                tokens += sum(s.chunks for s in streams)
        else:
            runs = await asyncio.gather(*(one_connection(i, c) for i, c in enumerate(conns)))
            ttfts = [s.ttft_s for run in runs for s in run]
            tokens = sum(s.chunks for run in runs for s in run)
        wall_s = time.perf_counter() - started
        used = {name: cpu - cpu_before[name] for name, cpu in cpu_all(pids).items()}
        return Level(ttfts, tokens, wall_s, used)
    finally:
        for conn in conns:
            conn.close()


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
        f"throughput direct {direct.throughput:6.0f} tok/s  proxied {proxied.throughput:6.0f} "
        f"tok/s ({ratio * 100:5.1f} %)  {'OK' if ok else 'MISSED'}"
    )
    for name, level in (("direct", direct), ("proxied", proxied)):
        shares = "  ".join(f"{k} {v / level.wall_s * 100:5.1f} %" for k, v in level.cpu_s.items())
        print(f"             CPU while {name:<7}  {shares}")
    return ok


async def measure(
    direct_url: str,
    proxy_url: str,
    token: str,
    rounds: dict[int, int],
    pids: dict[str, int],
    stream_s: float | None,
) -> bool:
    """Each level direct and proxied, in alternating blocks of rounds (so that a machine that
    slows down or speeds up meanwhile weighs on both alike); stream_s (a stream's length)
    staggers arrivals."""
    auth = {"Authorization": f"Bearer {token}"}
    ok = True
    for concurrency in rounds:
        stagger_s = None if stream_s is None else stream_s / concurrency
        blocks = min(BLOCKS, rounds[concurrency])
        per_block = [
            rounds[concurrency] // blocks + (i < rounds[concurrency] % blocks)
            for i in range(blocks)
        ]
        direct, proxied = [], []
        for n in per_block:
            direct.append(await run_level(direct_url, {}, concurrency, n, pids, stagger_s))
            proxied.append(await run_level(proxy_url, auth, concurrency, n, pids, stagger_s))
        ok = report(concurrency, Level.joined(direct), Level.joined(proxied)) and ok
    return ok


def pin(pid: int, cpu: int | None) -> None:
    if cpu is None:
        return
    os.sched_setaffinity(pid, {cpu})
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        pin(int(child), cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on CPU 1, the stand-in engine and this load generator on CPU 0",
    )
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds per level (default: by level)"
    )
    parser.add_argument(
        "--levels", default=",".join(map(str, LEVELS)), help="concurrent streams, comma-separated"
    )
    parser.add_argument(
        "--arrivals",
        choices=("burst", "staggered"),
        default="burst",
        help="burst: all streams of a round start together (the worst case); staggered: "
        "starts spread evenly over a stream's length (a steady state of that many streams)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="web server processes (uvicorn only; default: the server's own default)",
    )
    parser.add_argument(
        "--profile", metavar="PATH", help="run the server under cProfile, stats written to PATH"
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",")]
    # Bursts: 3 per block at 8 and 32 streams, so that one slow moment of the machine does not
    # decide a level's median alone (with one burst per block it did: +2.9 to +5.7 ms at 32
    # streams for the same code within minutes).
    default_rounds = {1: 30, 8: 9, 32: 9} if args.arrivals == "burst" else {1: 30, 8: 12, 32: 8}
    rounds = {c: args.rounds or default_rounds.get(c, 3) for c in levels}
    upstream_port, server_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        env = bench_env(Path(tmp))
        token = prepare_database(env, upstream_port)
        procs = [start_upstream(upstream_port, args.tokens, args.interval_ms)]
        workers = args.workers or webserver.default_workers()
        procs.append(start_server(args.server, server_port, env, args.profile, workers))
        pids = {"client": os.getpid(), "engine": procs[0].pid, "server": procs[1].pid}
        try:
            wait_port(upstream_port)
            wait_port(server_port)
            for name, cpu in (("client", 0), ("engine", 0), ("server", 1)):
                pin(pids[name], cpu if args.pin else None)
            print(
                f"{args.server} ({workers} process(es)), {args.tokens} tokens per stream at {args.interval_ms:g} ms "
                f"each ({1000 / args.interval_ms:.0f} tok/s per stream), loopback, "
                f"{'pinned' if args.pin else 'not pinned'}, {os.cpu_count()} CPUs, "
                f"{args.arrivals} arrivals"
            )
            direct = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
            proxied = f"http://127.0.0.1:{server_port}/v1/chat/completions"
            stream_s = args.tokens * args.interval_ms / 1000
            run = measure(
                direct,
                proxied,
                token,
                rounds,
                pids,
                stream_s if args.arrivals == "staggered" else None,
            )
            ok = asyncio.run(asyncio.wait_for(run, 300))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
