"""A time-compressed load ramp against a deployment with a scaling policy (issue 30, part 7).

    .venv/bin/python bench/elastic.py [--rates 2,10,1] [--phase-s 60,120,120] [--slo-s 1]

Real parts on loopback: a host worker process (`manage.py hostworker`, the autoscaler's leased
loop inside it) on 8 simulated H100s, the web server (`python -m controlpanel.webserver`: the
/v1/ gateway), the configured database (DATABASE_URL; migrated here) and Redis (REDIS_URL).
The engines are tests/support/vllm_standin.py run as `vllm serve` (SHARDBOARD_VLLM_BIN) with a
known capacity: --max-num-seqs sequences at VLLM_STANDIN_TOKEN_S a token, so a request of
--max-tokens takes max_tokens × token_s and one replica serves max_num_seqs / that per second.

Open-loop Poisson arrivals at each phase's rate, streamed through the gateway with a bearer
token. Printed: SLO attainment (client-side TTFT ≤ --slo-s), average and peak replicas
(sampled every 0.5 s from the rows: pending, starting or running — what holds GPUs),
replica-hours against a static deployment sized for the peak (the peak rate at 80 % of the
replicas' capacity), the time from the load's rise to a new replica serving (its row
running), and requests lost (not 200, or a stream without [DONE]).

Then the idle sleep (issue 30, part 2): the deployment was launched with an idle setting
(--sleep-after-s; vLLM sleep mode), so once the ramp's tail is over and no request came for that
long, the host worker puts every replica to sleep (level 1 here). One request then wakes it:
printed, wake-to-first-token beside the engine's own wake time (VLLM_STANDIN_WAKE_S, --wake-s).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
from launch_latency import start_worker, wait_for, worker_log  # noqa: E402
from proxy_procs import free_port, start_server, wait_port  # noqa: E402

STANDIN = ROOT / "tests" / "support" / "vllm_standin.py"
HOST = f"elastic-{os.getpid()}"
NAME = f"elastic-{os.getpid()}"
UTILIZATION = 0.8  # the static deployment is sized to run its peak at 80 % of capacity


@dataclass
class Run:
    ttfts: list[float] = field(default_factory=list)
    lost: int = 0
    sent: int = 0
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # t, live, running


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--rates", default="2,10,1", help="requests/s of each phase")
    p.add_argument("--phase-s", default="60,120,120", help="seconds of each phase")
    p.add_argument("--slo-s", type=float, default=1.0, help="p90 TTFT target and SLO")
    p.add_argument("--token-s", type=float, default=0.05)
    p.add_argument("--max-tokens", type=int, default=20)
    p.add_argument("--max-num-seqs", type=int, default=4)
    p.add_argument("--max-replicas", type=int, default=8)
    p.add_argument("--up-after-s", type=float, default=3)
    p.add_argument("--down-after-s", type=float, default=15)
    p.add_argument("--ready-delay-s", type=float, default=2, help="the engine's model load")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sleep-after-s", type=int, default=20, help="idle setting; 0: no sleep phase")
    p.add_argument("--wake-s", type=float, default=1.5, help="the stand-in engine's wake time")
    return p.parse_args()


async def one(client: httpx.AsyncClient, url: str, args: argparse.Namespace, run: Run) -> None:
    body = {"model": NAME, "prompt": "tell me a story", "max_tokens": args.max_tokens,
            "stream": True}  # fmt: skip
    started, first, done = time.monotonic(), None, False
    run.sent += 1
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as answer:
            async for line in answer.aiter_lines():
                if first is None and line.startswith("data: {"):
                    first = time.monotonic() - started
                done = done or line.strip() == "data: [DONE]"
            ok = answer.status_code == 200 and done
    except httpx.HTTPError:
        ok = False
    if not ok or first is None:
        run.lost += 1
        return
    run.ttfts.append(first)


async def drive(url: str, token: str, args: argparse.Namespace, run: Run) -> float:
    """The ramp; returns the monotonic time the highest phase began."""
    rng = random.Random(args.seed)
    rates = [float(r) for r in args.rates.split(",")]
    spans = [float(s) for s in args.phase_s.split(",")]
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    rise = 0.0
    async with httpx.AsyncClient(headers=headers, timeout=300, limits=limits) as client:
        tasks = []
        for rate, span in zip(rates, spans, strict=True):
            if rate == max(rates):
                rise = time.monotonic()
            end = time.monotonic() + span
            while (now := time.monotonic()) < end:
                tasks.append(asyncio.create_task(one(client, url, args, run)))
                await asyncio.sleep(min(rng.expovariate(rate), end - now))
        await asyncio.gather(*tasks)
    return rise


def sample(first_pk: int, run: Run, stop: threading.Event) -> None:
    from django.db import close_old_connections

    from deployments.models import Deployment

    first = Deployment.objects.get(pk=first_pk)
    while not stop.wait(0.5):
        statuses = list(first.group().values_list("status", flat=True))
        live = sum(s in ("pending", "starting", "running") for s in statuses)
        run.samples.append((time.monotonic(), live, statuses.count("running")))
        close_old_connections()


def report(run: Run, rise: float, args: argparse.Namespace, capacity_rps: float) -> None:

    t = [s[0] for s in run.samples]
    live = [s[1] for s in run.samples]
    duration_s = t[-1] - t[0]
    area = sum((t[i + 1] - t[i]) * live[i] for i in range(len(t) - 1))
    peak_rate = max(float(r) for r in args.rates.split(","))
    static = math.ceil(peak_rate / (capacity_rps * UTILIZATION))
    at_rise = next(s[2] for s in run.samples if s[0] >= rise)
    served = next((s[0] for s in run.samples if s[0] >= rise and s[2] > at_rise), None)
    met = sum(x <= args.slo_s for x in run.ttfts)
    ttfts = sorted(run.ttfts)
    p90 = ttfts[math.ceil(0.9 * len(ttfts)) - 1] if ttfts else float("nan")
    print(f"ramp {args.rates} req/s over {args.phase_s} s; one replica serves "
          f"{capacity_rps:.2f} req/s ({args.max_num_seqs} seqs × {args.max_tokens} tokens "
          f"at {args.token_s} s); SLO TTFT ≤ {args.slo_s} s")  # fmt: skip
    print(f"requests sent {run.sent}, lost {run.lost}")
    print(
        f"SLO attainment {100 * met / max(1, len(run.ttfts)):.1f} % (client TTFT p90 {p90:.2f} s)"
    )
    print(
        f"replicas: average {area / duration_s:.2f}, peak {max(live)}; static for the peak {static}"
    )
    print(f"replica-hours {area / 3600:.4f} vs static {static * duration_s / 3600:.4f} "
          f"= {100 * area / (static * duration_s):.1f} %")  # fmt: skip
    reaction = f"{served - rise:.1f} s" if served else "never"
    print(f"load rise → a new replica serving: {reaction} (engine load {args.ready_delay_s} s)")


def main() -> None:
    args = parse()
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line a request otherwise
    from django.core.management import call_command

    from deployments import planning
    from deployments.autoscale.services import PolicySettings, policy_set
    from deployments.catalog.demo_model import make_tiny_llama
    from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
    from deployments.models import Deployment
    from monitoring.models import Host
    from playground.services import token_create

    call_command("migrate", verbosity=0)
    user = _operator()
    token = token_create(user=user, name="elastic")[1]
    with tempfile.TemporaryDirectory(prefix="shardboard-elastic-") as tmp:
        work = Path(tmp)
        make_tiny_llama(work / "models" / "tiny")
        (work / "hf" / "hub").mkdir(parents=True)
        from django.conf import settings

        settings.MODEL_ROOTS = [work / "models"]
        engine_env = {
            "SHARDBOARD_VLLM_BIN": str(STANDIN),
            "VLLM_STANDIN_TOKEN_S": str(args.token_s),
            "VLLM_STANDIN_READY_DELAY_S": str(args.ready_delay_s),
            "SHARDBOARD_AUTOSCALE_TICK_S": "1",
            "SHARDBOARD_DRAIN_GRACE_S": "30",
            "SHARDBOARD_STOP_GRACE_S": "2",
            "VLLM_STANDIN_WAKE_S": str(args.wake_s),
            "SHARDBOARD_IDLE_CHECK_S": "1",
        }
        worker = start_worker(work, name=HOST, gpus="8xH100-80GB@nvlink", **engine_env)
        port = free_port()
        server_env = dict(
            os.environ,
            PLAYGROUND_MAX_CONCURRENT="1000",
            LOG_LEVEL="WARNING",
            PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING="1000",  # noqa: S106 (a count, not a secret)
        )
        server = start_server("uvicorn", port, server_env, None, workers=1)
        first = None
        try:
            wait_for(lambda: Host.objects.filter(name=HOST, gpus__isnull=False).exists(), 60)
            # The stand-in plays vLLM on a GPU host, with sleep mode (on simulated GPUs vLLM
            # runs on the CPU in their place, where it cannot sleep).
            Host.objects.filter(name=HOST).update(simulated=False)
            wait_port(port, 60)
            request = LaunchRequest(
                name=NAME,
                model_ref="local:0/tiny",
                host_name=HOST,
                engine="vllm",
                plan_request=planning.PlanRequest(max_num_seqs=args.max_num_seqs),
                sleep_after_s=args.sleep_after_s or None,
            )
            first = deployment_create(user=user, request=request)
            wait_for(lambda: Deployment.objects.get(pk=first.pk).status == "running", 120, 0.1)
            policy_set(user=user, deployment=first, settings=PolicySettings(
                min_replicas=1, max_replicas=args.max_replicas, ttft_p90_s=args.slo_s,
                up_after_s=args.up_after_s, down_after_s=args.down_after_s))  # fmt: skip
            run, stop = Run(), threading.Event()
            sampler = threading.Thread(target=sample, args=(first.pk, run, stop), daemon=True)
            sampler.start()
            rise = asyncio.run(drive(f"http://127.0.0.1:{port}", token, args, run))
            time.sleep(args.down_after_s)  # the tail: the last scale-down shows
            stop.set()
            sampler.join()
            capacity_rps = args.max_num_seqs / (args.max_tokens * args.token_s)
            report(run, rise, args, capacity_rps)
            if args.sleep_after_s:
                wake(first.pk, f"http://127.0.0.1:{port}", token, args)
        except Exception:
            print(worker_log(work, HOST).read_text()[-4000:])
            raise
        finally:
            if first is not None:
                deployment_stop(user=user, deployment=Deployment.objects.get(pk=first.pk))
                time.sleep(3)
            server.terminate()
            worker.terminate()
            server.wait(30)
            worker.wait(60)


def wake(first_pk: int, url: str, token: str, args: argparse.Namespace) -> None:
    """Every replica asleep after the idle setting, then one request: its time to first token."""
    from deployments.models import Deployment

    def asleep() -> bool:
        statuses = set(Deployment.objects.get(pk=first_pk).group().values_list("status", flat=True))
        return "sleeping" in statuses and not statuses & {"pending", "starting", "running"}

    wait_for(asleep, args.sleep_after_s + 120, 0.2)
    run = Run()

    async def ask() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=300) as client:
            await one(client, url, args, run)

    asyncio.run(ask())
    first = f"{run.ttfts[0]:.2f} s" if run.ttfts else "lost"
    print(f"asleep after {args.sleep_after_s} s idle; wake → first token {first} "
          f"(the engine's wake {args.wake_s} s; goal ≤ wake + 1 s)")  # fmt: skip


def _operator() -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, _ = get_user_model().objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


if __name__ == "__main__":
    main()
