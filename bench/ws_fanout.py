"""Websocket fan-out: N browsers on /ws/gpus/, one simulated 8-GPU host at 1 Hz.

    .venv/bin/python bench/ws_fanout.py [--ns 50,100,200,500] [--seconds 10] [--extend]
    SHARDBOARD_BENCH_LAYER=pubsub .venv/bin/python bench/ws_fanout.py   # compare layers

Starts daphne on a free loopback port (the real ASGI app, the real Redis channel layer from
REDIS_URL, the database from DATABASE_URL, which must be migrated), registers a simulated
8-GPU host, and publishes its samples with the host worker's own sink (history append +
group_send) at 1 Hz. For each N it opens N authenticated websocket clients (``websockets``),
waits for their backfills, then measures sample-to-client latency: receive time minus the
sample's timestamp. Prints p50/p99/max per N and the first N whose p99 exceeds 250 ms
(``--extend`` keeps doubling N past the list until that happens or 3000 clients).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
LAYERS = {
    "core": "channels_redis.core.RedisChannelLayer",
    "pubsub": "channels_redis.pubsub.RedisPubSubChannelLayer",
}


def _choose_layer() -> None:
    """``SHARDBOARD_BENCH_LAYER=pubsub`` swaps the channel layer (server and publisher alike)
    before Django reads the settings module; the project's settings file is not changed."""
    layer = os.environ.get("SHARDBOARD_BENCH_LAYER", "core")
    from controlpanel import settings as project_settings

    config = project_settings.CHANNEL_LAYERS["default"]
    config["BACKEND"] = LAYERS[layer]
    if layer == "pubsub":
        config["CONFIG"] = {"hosts": [project_settings.REDIS_URL], "prefix": "shardboard.bench"}


_choose_layer()

import django  # noqa: E402

django.setup()

import websockets  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.test import Client  # noqa: E402

from monitoring import selectors, worker  # noqa: E402
from monitoring.gpus.simulated import SimulatedBackend  # noqa: E402
from monitoring.history import minute_key, raw_key  # noqa: E402
from monitoring.models import Host  # noqa: E402
from monitoring.sampler import Sampler  # noqa: E402

HOST = "bench-fanout"
P99_TARGET_MS = 250.0
CONNECT_PARALLEL = 50
SAMPLE_T = re.compile(r'^\{"type":"sample".*?"t":(\d+)')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def session_cookie() -> str:
    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def serve(port: int) -> None:
    from daphne.cli import CommandLineInterface

    CommandLineInterface().run(
        ["-b", "127.0.0.1", "-p", str(port), "controlpanel.asgi:application"]
    )


def start_daphne(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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
    raise SystemExit("daphne did not start within 30 s")


def start_publisher(state_dir: Path) -> tuple[Sampler, worker.HostAgent]:
    backend = SimulatedBackend("8xH100-80GB@nvlink", state_dir=state_dir, seed=1)
    worker.register(HOST, backend)
    agent = worker.HostAgent(HOST, backend, selectors.history())
    sampler = Sampler(backend, agent.sink(), interval_s=1.0, name="bench-sampler")
    sampler.start()
    return sampler, agent


async def client(url: str, cookie: str, latencies: list[float], ready: asyncio.Event) -> None:
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}"}
    async with websockets.connect(
        url, additional_headers=headers, origin="http://127.0.0.1", max_size=None
    ) as ws:
        first = json.loads(await ws.recv())
        assert first["type"] == "backfill", first
        ready.set()
        async for raw in ws:
            received_ms = time.time_ns() / 1e6
            # A browser parses on its own CPU; here 500 clients share the server's two cores,
            # so read only the timestamp (the message starts {"type":"sample","h":…,"t":…).
            found = SAMPLE_T.search(raw[:200] if isinstance(raw, str) else raw[:200].decode())
            if found:
                latencies.append(received_ms - int(found.group(1)))


async def run_n(url: str, cookie: str, n: int, seconds: float) -> dict[str, float]:
    gate = asyncio.Semaphore(CONNECT_PARALLEL)
    latencies: list[float] = []
    events = [asyncio.Event() for _ in range(n)]

    async def one(ready: asyncio.Event) -> None:
        async with gate:
            task = asyncio.create_task(client(url, cookie, latencies, ready))
            await asyncio.wait_for(ready.wait(), 30)
        await task

    start = time.monotonic()
    tasks = [asyncio.create_task(one(e)) for e in events]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 120)
    connect_s = time.monotonic() - start
    latencies.clear()  # measure only once everyone is connected
    await asyncio.sleep(seconds)
    measured = sorted(latencies)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if not measured:
        return {"n": n, "messages": 0, "connect_s": connect_s}
    return {
        "n": n,
        "messages": len(measured),
        "expected": n * round(seconds),
        "connect_s": round(connect_s, 1),
        "p50_ms": round(statistics.median(measured), 1),
        "p99_ms": round(measured[min(len(measured) - 1, int(0.99 * len(measured)))], 1),
        "max_ms": round(measured[-1], 1),
    }


async def main_async(url: str, cookie: str, ns: list[int], seconds: float, extend: bool) -> None:
    broke_at: int | None = None
    queue = list(ns)
    while queue:
        n = queue.pop(0)
        result = await run_n(url, cookie, n, seconds)
        print(json.dumps(result), flush=True)
        if broke_at is None and result.get("p99_ms", float("inf")) > P99_TARGET_MS:
            broke_at = n
        if extend and not queue and broke_at is None and n < 3000:
            queue.append(min(3000, n * 2))
    verdict = (
        f"p99 first exceeds {P99_TARGET_MS:g} ms at N = {broke_at}"
        if broke_at
        else (
            f"p99 <= {P99_TARGET_MS:g} ms for every N tried (up to {max(ns) if not extend else n})"
        )
    )
    print(verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="50,100,200,500")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--extend", action="store_true")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    ns = [int(x) for x in args.ns.split(",")]
    port = free_port()
    server = start_daphne(port)
    cookie = session_cookie()
    with tempfile.TemporaryDirectory() as tmp:
        sampler, _agent = start_publisher(Path(tmp))
        try:
            layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
            print(f"daphne on 127.0.0.1:{port}, {os.cpu_count()} CPUs, {layer}, 8 GPUs at 1 Hz")
            url = f"ws://127.0.0.1:{port}/ws/gpus/?window=5m&host={HOST}"
            asyncio.run(main_async(url, cookie, ns, args.seconds, args.extend))
        finally:
            sampler.stop()
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
            Host.objects.filter(name=HOST).delete()
            selectors.redis_client().delete(
                raw_key(HOST), minute_key(HOST), selectors.owners_key(HOST)
            )


if __name__ == "__main__":
    main()
