"""What the playground gateway adds: direct vs through the proxy, at 1, 8 and 32 streams.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py \
        [--tokens 64] [--interval-ms 5] [--server uvicorn|daphne] [--workers N] [--pin] \
        [--arrivals burst|staggered] [--levels 1,8,32]
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py --peer [--runs 3]
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py --replicas \
        [--levels 1,8,32] [--blocks 7]
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py --ab \
        [--variant NAME=[git:REV,]ENV=VALUE[,ENV=VALUE]]... [--levels 8,32] [--blocks 7]
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py --ab --rate-limits
    flock /tmp/shardboard-bench.lock .venv/bin/python bench/proxy_overhead.py --vllm --runs 3 \
        [--levels 1,8] [--tokens 64]

Starts, on loopback only: a stand-in engine streaming N tokens at a fixed rate
(tests/support/stub_upstream.py, its own process), a real ASGI server running Shardboard
(uvicorn with controlpanel.webserver's options and its default number of processes, as
`make run` starts it, or daphne for comparison) on a throwaway SQLite database, and
measures from this process with a hand-written keep-alive HTTP/1.1 client (cheap enough not
to starve the server): time to first token (p50/p95) and token throughput, direct and
proxied, with the CPU share each process used meanwhile.
Targets: added TTFT p50 <= 5 ms; proxied throughput >= 95 % of direct. Redis (REDIS_URL)
is used for the concurrency slots when it is up; the limit is raised so that it never bites.

--replicas: the same gateway in front of 1 and of 4 replicas behind one model name (see
bench/proxy_replicas.py), side by side in rotated blocks.

--ab: one server per variant (each its own environment, a switch read once at start, and its
own code: this working tree, or a git worktree of REV; default: HEAD against this tree), on one
private redis-server; per level, blocks of bursts go direct and then to every variant in a
rotated order, and each block gives each variant its server's CPU per request (on-CPU time of
every thread, from /proc/PID/task/*/schedstat), Redis's, and its added TTFT p50 (against the
direct run of the same block). Printed: the median over blocks and the spread (min–max).

--peer (the default when bench/proxy_peer.py's virtualenv exists; --no-peer: without it): the
same run also goes through vllm-router 0.1.17 (round robin over the same stand-in engine), and
per level the blocks rotate direct, Shardboard, vllm-router. Printed per level: added TTFT p50
and p90 over direct, throughput as % of direct, and the server's CPU per request (every
Shardboard process, plus its private redis-server apart; the router's process). --runs N
repeats the whole side-by-side N times with fresh processes and prints each run's table;
--base REV adds Shardboard at git REV (a worktree, this tree's virtualenv) as a fourth way in.
With --messages (on by default; --no-messages: off), the same stream is also sent as an
Anthropic Messages request (`/v1/messages`, a vLLM row: transformers serve has none) through
Shardboard and straight to its own stand-in (the first token: the first `text_delta` event),
so its added TTFT stands beside chat completions' (vllm-router is asked chat only).

--vllm: the real vLLM (its CPU build, scripts/vllm.sh) in the stand-in's place (bench/proxy_vllm.py).

--rate-limits: the gateway's per-token and per-user limits (gateway.ratelimit) switched on, so
high that they never refuse: every request pays its Lua script in Redis and its tokens'
charge. With --ab and no --variant: the same tree with them off against on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import proxy_peer  # noqa: E402
import proxy_replicas  # noqa: E402
import proxy_sidebyside  # noqa: E402
import proxy_vllm  # noqa: E402
from proxy_client import Level, p, run_level, spread  # noqa: E402
from proxy_procs import (  # noqa: E402  (bench/ is this script's own folder on sys.path)
    bench_env,
    free_port,
    pin,
    prepare_database,
    start_redis,
    start_server,
    start_upstream,
    wait_port,
    worktree,
)

from controlpanel import webserver  # noqa: E402  (the server's defaults)

LEVELS = (1, 8, 32)
BLOCKS = 3  # direct and proxied alternate this many times per level


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


@dataclass
class Block:
    """One variant in one block: CPU seconds per request (server, Redis), TTFT p50 added,
    throughput as a share of direct's."""

    server_cpu_s: float
    redis_cpu_s: float
    added_ttft_s: float
    throughput_ratio: float


async def measure_ab(
    direct_url: str,
    variants: dict[str, tuple[str, int]],
    token: str,
    rounds: dict[int, int],
    blocks: int,
    redis_pid: int,
) -> dict[int, dict[str, list[Block]]]:
    """Per level, `blocks` times: direct, then each variant (the order rotated each block)."""
    auth = {"Authorization": f"Bearer {token}"}
    results: dict[int, dict[str, list[Block]]] = {}
    names = list(variants)
    for concurrency, n in rounds.items():
        results[concurrency] = {name: [] for name in names}
        for url, _ in variants.values():  # every process's first requests
            await run_level(url, auth, concurrency, 2, {})
        for block in range(blocks):
            direct = await run_level(direct_url, {}, concurrency, n, {})
            direct_p50 = statistics.median(direct.ttfts_s)
            shift = block % len(names)
            for name in names[shift:] + names[:shift]:
                url, pid = variants[name]
                level = await run_level(
                    url, auth, concurrency, n, {"server": pid, "redis": redis_pid}
                )
                requests = len(level.ttfts_s)
                added = statistics.median(level.ttfts_s) - direct_p50
                cpu = level.cpu_s
                results[concurrency][name].append(
                    Block(
                        cpu["server"] / requests,
                        cpu["redis"] / requests,
                        added,
                        level.throughput / direct.throughput,
                    )
                )
    return results


def report_ab(results: dict[int, dict[str, list[Block]]]) -> None:
    print(
        "| streams | variant | server CPU/request µs | Redis CPU/request µs "
        "| added TTFT p50 ms | throughput % of direct | blocks |"
    )
    print("|---|---|---|---|---|---|---|")
    for concurrency, by_name in results.items():
        for name, blocks in by_name.items():
            server = spread([b.server_cpu_s for b in blocks], 1e6, ".0f")
            redis_cpu = spread([b.redis_cpu_s for b in blocks], 1e6, ".0f")
            added = spread([b.added_ttft_s for b in blocks], 1e3, "+.2f")
            ratio = spread([b.throughput_ratio for b in blocks], 100, ".1f")
            print(
                f"| {concurrency} | {name} | {server} | {redis_cpu} | {added} | {ratio} "
                f"| {len(blocks)} |"
            )


def parse_variants(specs: list[str]) -> dict[str, tuple[str | None, dict[str, str]]]:
    """NAME=[git:REV,]ENV=VALUE[,ENV=VALUE] → {NAME: (REV, {ENV: VALUE})}; NAME= alone: this
    working tree as it is. git:REV: the server runs from a worktree of that revision (the code
    an A/B replaced), with this tree's virtualenv."""
    variants: dict[str, tuple[str | None, dict[str, str]]] = {}
    for spec in specs:
        name, _, assignments = spec.partition("=")
        parts = [a for a in assignments.split(",") if a]
        revs = [a.removeprefix("git:") for a in parts if a.startswith("git:")]
        pairs = [a.split("=", 1) for a in parts if not a.startswith("git:")]
        variants[name] = (revs[0] if revs else None, {k: v for k, v in pairs})
    return variants


AB_VARIANTS = ["HEAD=git:HEAD", "this-tree="]  # an uncommitted change against its base
# Checked on every request, never refusing one (the settings' highest values).
RATE_LIMITS = {
    "GATEWAY_RPM_PER_TOKEN": "10000000",
    "GATEWAY_RPM_PER_USER": "10000000",
    "GATEWAY_TOKENS_PER_DAY_PER_TOKEN": str(10**12),
    "GATEWAY_TOKENS_PER_DAY_PER_USER": str(10**12),
}


def rate_limit_variants() -> list[str]:
    on = ",".join(f"{k}={v}" for k, v in RATE_LIMITS.items())
    return ["limits-off=GATEWAY_RPM_PER_USER=0", f"limits-on={on}"]


def main_ab(args: argparse.Namespace, levels: list[int]) -> int:
    rounds = {c: args.rounds or {8: 6, 32: 3}.get(c, 6) for c in levels}
    default = rate_limit_variants() if args.rate_limits else AB_VARIANTS
    variants = parse_variants(args.variant or default)
    upstream_port, redis_port = free_port(), free_port()
    workers = args.workers or webserver.default_workers()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        env = bench_env(Path(tmp))
        env["REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        token = prepare_database(env, upstream_port)
        procs = [
            start_upstream(upstream_port, args.tokens, args.interval_ms),
            start_redis(redis_port, Path(tmp)),
        ]
        servers: dict[str, tuple[str, int]] = {}
        trees: list[Path] = []
        try:
            for name, (rev, extra) in variants.items():
                port = free_port()
                cwd = ROOT if rev is None else worktree(rev, Path(tmp))
                trees += [cwd] if rev is not None else []
                procs.append(start_server("uvicorn", port, env, None, workers, extra, cwd))
                servers[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", procs[-1].pid)
                wait_port(port)
            wait_port(upstream_port)
            wait_port(redis_port)
            print(
                f"A/B: uvicorn ({workers} process(es) each), {args.tokens} tokens per stream at "
                f"{args.interval_ms:g} ms, burst arrivals, {os.cpu_count()} CPUs, "
                f"{args.blocks} blocks, rounds per block {rounds}; variants "
                + "; ".join(f"{n}: {r or 'this tree'} {e or ''}" for n, (r, e) in variants.items())
            )
            direct = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
            run = measure_ab(direct, servers, token, rounds, args.blocks, procs[1].pid)
            report_ab(asyncio.run(asyncio.wait_for(run, 1800)))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
            for tree in trees:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument(
        "--server",
        default="uvicorn",
        help="uvicorn, daphne or granian (--peer: several, comma-separated, side by side)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the server on CPU 1, the stand-in engine and this load generator on CPU 0",
    )
    parser.add_argument(
        "--rounds", type=int, default=0, help="rounds per level (default: by level)"
    )
    parser.add_argument(
        "--levels", help="concurrent streams, comma-separated (default 1,8,32; --ab: 8,32)"
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
    parser.add_argument("--ab", action="store_true", help="compare variants (see above)")
    parser.add_argument("--replicas", action="store_true", help="1 vs 4 replicas (see above)")
    parser.add_argument("--variant", action="append", help="NAME=ENV=VALUE[,ENV=VALUE] (--ab)")
    parser.add_argument("--blocks", type=int, default=7, help="blocks per level (--ab)")
    parser.add_argument(
        "--rate-limits",
        action="store_true",
        help="the gateway's rate limits on, never biting (with --ab: off against on)",
    )
    parser.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="vllm-router side by side (default: when its virtualenv exists; see above)",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs (--peer, --vllm)")
    parser.add_argument("--vllm", action="store_true", help="the real vLLM as the engine")
    parser.add_argument(
        "--messages",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--peer: also /v1/messages (Anthropic) through Shardboard, against its own direct run",
    )
    parser.add_argument(
        "--base", metavar="REV", help="--peer: also Shardboard at git REV (a worktree) beside"
    )
    args = parser.parse_args()
    if args.vllm:
        levels = [int(n) for n in (args.levels or "1,8").split(",")]
        return proxy_vllm.main(args, levels, args.workers or webserver.default_workers())
    plain = not (args.replicas or args.ab or args.pin or args.arrivals != "burst")
    if args.peer or (args.peer is None and plain and proxy_peer.available()):
        levels = [int(n) for n in (args.levels or "1,8,32").split(",")]
        workers = args.workers or webserver.default_workers()
        return proxy_sidebyside.main(args, levels, workers)
    if args.replicas:
        return proxy_replicas.main(args, [int(n) for n in (args.levels or "1,8,32").split(",")])
    if args.ab:
        return main_ab(args, [int(level) for level in (args.levels or "8,32").split(",")])
    levels = [int(level) for level in (args.levels or ",".join(map(str, LEVELS))).split(",")]
    # Bursts: 3 per block at 8 and 32 streams, so that one slow moment of the machine does not
    # decide a level's median alone (with one burst per block it did: +2.9 to +5.7 ms at 32
    # streams for the same code within minutes).
    default_rounds = {1: 30, 8: 9, 32: 9} if args.arrivals == "burst" else {1: 30, 8: 12, 32: 8}
    rounds = {c: args.rounds or default_rounds.get(c, 3) for c in levels}
    upstream_port, server_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        env = bench_env(Path(tmp))
        env.update(RATE_LIMITS if args.rate_limits else {})
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
