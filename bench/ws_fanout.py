"""Websocket fan-out: N browsers on /ws/gpus/, one simulated 8-GPU host at 1 Hz.

    .venv/bin/python bench/ws_fanout.py [--ns 50,100,200,500] [--seconds 10] [--extend]
        [--servers 1] [--client-procs 2] [--profile DIR]

Starts ``--servers`` web server processes on free loopback ports (uvicorn with
controlpanel.webserver's options, as `make run` starts it; the real ASGI app, Redis from
REDIS_URL, the database from DATABASE_URL, which must be migrated), registers a simulated
8-GPU host and publishes its samples with the host worker's own sink (history append + live
publish) at 1 Hz from this process. For each N it starts ``--client-procs`` client processes
(``websockets``, no compression) holding N authenticated connections between them, spread
round-robin over the servers; once every backfill has arrived it measures sample-to-client
latency for ``--seconds``: receive time minus the sample's timestamp (one clock: one machine).

The clients run in processes of their own and only read the timestamp of each message, so
the measuring side is not the bottleneck it measures; the CPU each role used during the
measurement (server, clients, Redis, this publisher) is printed next to the latencies so
that can be checked. Redis may be shared with other work, so its figure is an upper bound.
Prints p50/p99/max per N and the first N whose p99 exceeds 250 ms (``--extend`` keeps
doubling N past the list until that happens or 4000 clients). ``--profile DIR`` runs the
servers under cProfile and prints their top functions (profiling slows them down).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

HOST = "bench-fanout"
P99_TARGET_MS = 250.0
MAX_N = 4000
CONNECT_PARALLEL = 50
SAMPLE_T = re.compile(r'^\{"type":"sample".*?"t":(\d+)')


# --- client processes (no Django here) ----------------------------------------------------


async def _client(
    url: str, cookie: str, latencies: list[tuple[int, float]], ready: asyncio.Event
) -> None:
    import websockets

    headers = {"Cookie": cookie}
    async with websockets.connect(
        url, additional_headers=headers, origin="http://127.0.0.1", max_size=None, compression=None
    ) as ws:
        first = json.loads(await ws.recv())
        assert first["type"] == "backfill", first
        ready.set()
        async for raw in ws:
            received_ms = time.time_ns() / 1e6
            # A browser parses on its own CPU; read only the timestamp (the message starts
            # {"type":"sample","h":…,"t":…) so that the clients stay cheap.
            head = raw[:200] if isinstance(raw, str) else raw[:200].decode()
            found = SAMPLE_T.search(head)
            if found:
                sent_ms = int(found.group(1))
                latencies.append((sent_ms, received_ms - sent_ms))


async def _client_main(urls: list[str], cookie: str) -> None:
    gate = asyncio.Semaphore(CONNECT_PARALLEL)
    latencies: list[tuple[int, float]] = []
    events = [asyncio.Event() for _ in urls]

    async def one(url: str, ready: asyncio.Event) -> None:
        async with gate:
            task = asyncio.create_task(_client(url, cookie, latencies, ready))
            await asyncio.wait_for(ready.wait(), 300)
        await task

    start = time.monotonic()
    tasks = [asyncio.create_task(one(u, e)) for u, e in zip(urls, events, strict=True)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 600)
    print(json.dumps({"ready": round(time.monotonic() - start, 2)}), flush=True)
    loop = asyncio.get_running_loop()
    seconds = float(await loop.run_in_executor(None, sys.stdin.readline))
    latencies.clear()  # measure only once everyone is connected
    await asyncio.sleep(seconds)
    measured = list(latencies)
    print(json.dumps({"latencies": measured}), flush=True)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def client_process(args: argparse.Namespace) -> None:
    spec = json.loads(sys.stdin.readline())
    asyncio.run(_client_main(spec["urls"], spec["cookie"]))


# --- servers ------------------------------------------------------------------------------


def serve(port: int, profile: str | None) -> None:
    import uvicorn

    from controlpanel import webserver

    server = uvicorn.Server(
        webserver.config(webserver.APP, host="127.0.0.1", port=port, log_level="warning")
    )
    if not profile:
        server.run()
        return
    import cProfile

    profiler = cProfile.Profile()
    try:
        profiler.runcall(server.run)
    finally:
        profiler.dump_stats(profile)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, profile: str | None, log_dir: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, __file__, "--serve", str(port)]
    with (log_dir / f"server-{port}.log").open("wb") as log:
        proc = subprocess.Popen(
            [*argv, *(["--profile", profile] if profile else [])],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the web server did not start within 30 s")


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# --- the orchestrator -----------------------------------------------------------------------


def cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def run_n(n: int, args: argparse.Namespace, ports: list[int], cookie: str, roles: dict) -> dict:
    urls = [
        f"ws://127.0.0.1:{ports[k % len(ports)]}/ws/gpus/?window=5m&host={HOST}" for k in range(n)
    ]
    procs = min(args.client_procs, n)
    clients = []
    for p in range(procs):
        proc = subprocess.Popen(
            [sys.executable, __file__, "--client"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"urls": urls[p::procs], "cookie": cookie}) + "\n")
        proc.stdin.flush()
        clients.append(proc)
    try:
        connect_s = max(json.loads(c.stdout.readline())["ready"] for c in clients)  # type: ignore[union-attr]
        pids = {**roles, "clients": [c.pid for c in clients]}
        before = {role: cpu_s(p) for role, p in pids.items()}
        for c in clients:
            c.stdin.write(f"{args.seconds}\n")  # type: ignore[union-attr]
            c.stdin.flush()  # type: ignore[union-attr]
        time.sleep(args.seconds)
        used = {role: cpu_s(p) - before[role] for role, p in pids.items()}
        pairs = [x for c in clients for x in json.loads(c.stdout.readline())["latencies"]]  # type: ignore[union-attr]
        measured = sorted(lat for _, lat in pairs)
    finally:
        for c in clients:
            stop(c)
    result: dict[str, Any] = {
        "n": n,
        "messages": len(measured),
        "expected": n * round(args.seconds),
    }
    result["connect_s"] = connect_s
    if measured:
        result["p50_ms"] = round(statistics.median(measured), 1)
        result["p99_ms"] = round(measured[min(len(measured) - 1, int(0.99 * len(measured)))], 1)
        result["max_ms"] = round(measured[-1], 1)
        # the first client to get each sample: publishing and transport, not the fan-out
        first: dict[int, float] = {}
        for t, lat in pairs:
            first[t] = min(lat, first.get(t, lat))
        result["first_ms"] = sorted(round(v, 1) for v in first.values())
    result["cpu_pct"] = {role: round(100 * s / args.seconds, 1) for role, s in used.items()}
    return result


def orchestrate(args: argparse.Namespace) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    from monitoring import selectors
    from monitoring.gpus.simulated import SimulatedBackend
    from monitoring.history import minute_key, owners_key, raw_key
    from monitoring.host import worker
    from monitoring.host.sampler import Sampler
    from monitoring.models import Host

    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    browser = Client()
    browser.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"

    ports = [free_port() for _ in range(args.servers)]
    profiles = [
        str(Path(args.profile).resolve() / f"server-{port}.prof") if args.profile else None
        for port in ports
    ]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        servers = [
            start_server(port, prof, Path(tmp)) for port, prof in zip(ports, profiles, strict=True)
        ]
        redis_pid = int(selectors.redis_client().info("server")["process_id"])
        roles = {
            "servers": [s.pid for s in servers],
            "redis": [redis_pid],
            "publisher": [os.getpid()],
        }
        backend = SimulatedBackend("8xH100-80GB@nvlink", state_dir=Path(tmp), seed=1)
        worker.register(HOST, backend)
        agent = worker.HostAgent(HOST, backend, worker.history_writer())
        sampler = Sampler(backend, agent.sink(), interval_s=1.0, name="bench-sampler")
        sampler.start()
        try:
            print(
                f"{args.servers} uvicorn process(es), {args.client_procs} client process(es), "
                f"{os.cpu_count()} CPUs, 8 simulated GPUs at 1 Hz",
                flush=True,
            )
            broke_at = sweep(args, ports, cookie, roles)
            tried = max(args.ns_list) if broke_at is None and not args.extend else broke_at
            print(
                f"p99 first exceeds {P99_TARGET_MS:g} ms at N = {broke_at}"
                if broke_at
                else f"p99 <= {P99_TARGET_MS:g} ms for every N tried (up to {tried})"
            )
        finally:
            sampler.stop()
            for s in servers:
                stop(s)
            for port in ports:
                errors = (Path(tmp) / f"server-{port}.log").read_text(errors="replace")
                found = errors.find("Traceback")
                if found >= 0:
                    print(f"--- server {port} log, first error\n{errors[found : found + 8000]}")
            Host.objects.filter(name=HOST).delete()
            selectors.redis_client().delete(raw_key(HOST), minute_key(HOST), owners_key(HOST))
    for prof in profiles:
        if prof and Path(prof).exists():
            print_profile(prof)


def sweep(args: argparse.Namespace, ports: list[int], cookie: str, roles: dict) -> int | None:
    broke_at: int | None = None
    queue = list(args.ns_list)
    while queue:
        n = queue.pop(0)
        result = run_n(n, args, ports, cookie, roles)
        print(json.dumps(result), flush=True)
        if broke_at is None and result.get("p99_ms", float("inf")) > P99_TARGET_MS:
            broke_at = n
        if args.extend and not queue and broke_at is None and n < MAX_N:
            queue.append(min(MAX_N, n * 2))
    return broke_at


def print_profile(path: str) -> None:
    import pstats

    print(f"--- {path} (top 30 by own time)")
    pstats.Stats(path).sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ns", default="50,100,200,500")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--extend", action="store_true")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--profile", help="directory for the servers' cProfile output")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.profile)
    elif args.client:
        client_process(args)
    else:
        args.ns_list = [int(x) for x in args.ns.split(",")]
        orchestrate(args)


if __name__ == "__main__":
    main()
