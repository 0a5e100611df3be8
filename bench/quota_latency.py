"""What the team quota check adds to a launch: `deployment_create` with and without it.

    flock /tmp/shardboard-bench.lock .venv/bin/python bench/quota_latency.py \
        [--launches 40] [--history 1000]

Uses the configured database (DATABASE_URL; migrated here); no worker: the launch task is
sent to a queue nobody consumes, and purged at the end. A simulated 8-GPU host, the tiny demo
model; launches alternate between an operator in no team (no check) and one whose team has
both quotas (the check: the team's row locked, its active leases counted, the month's leases
summed). `--history`: leases the team already held and released this month, which the
GPU-hours sum reads. After each launch its deployment is marked stopped and its leases
released through the ORM, so every launch finds the same free GPUs. Printed: p50/p95 of
`deployment_create` for each, and of the check alone inside a transaction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
HOST = "quota-bench"
GIB = 1 << 30


def user(name: str) -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    u, _ = get_user_model().objects.get_or_create(username=name)
    u.groups.add(Group.objects.get_or_create(name="operator")[0])
    return u


def setup(history: int) -> tuple[Any, Any, Any]:
    from django.utils import timezone

    from deployments.models import Deployment, GpuLease, Status
    from monitoring.models import Gpu, Host
    from teams.models import Team

    host, _ = Host.objects.update_or_create(
        name=HOST,
        defaults={"queue": f"host.{HOST}", "backend": "simulated", "simulated": True},
    )
    host.last_heartbeat = timezone.now()
    host.save()
    for index in range(8):
        Gpu.objects.get_or_create(
            host=host,
            index=index,
            defaults={
                "uuid": f"GPU-{HOST}-{index}",
                "name": "H100",
                "memory_total_bytes": 80 * GIB,
            },
        )
    team, _ = Team.objects.get_or_create(name="bench-team")
    team.max_gpus, team.gpu_hours_per_month = 1000, 1e9
    team.save()
    member, loner = user("bench-member"), user("bench-loner")
    team.members.add(member)
    past = Deployment.objects.create(
        name=f"history-{os.getpid()}",
        model_id="m",
        engine="vllm",
        host=host,
        team=team,
        created_by=member,
        status=Status.STOPPED,
    )
    gpu = host.gpus.first()
    now = timezone.now()
    leases = GpuLease.objects.bulk_create(
        GpuLease(deployment=past, gpu=gpu, memory_bytes=GIB, active=False) for _ in range(history)
    )
    GpuLease.objects.filter(pk__in=[x.pk for x in leases]).update(
        created_at=now - timedelta(minutes=30), released_at=now - timedelta(minutes=10)
    )
    return team, member, loner


def one_launch(u: Any, name: str, team: str | None) -> float:
    from django.utils import timezone

    from deployments import planning
    from deployments.lifecycle.services import LaunchRequest, deployment_create
    from deployments.models import Deployment, GpuLease, Status

    request = LaunchRequest(
        name=name,
        model_ref="local:0/tiny",
        host_name=HOST,
        team=team,
        plan_request=planning.PlanRequest(tensor_parallel_size=1),
    )
    started = time.perf_counter()
    d = deployment_create(user=u, request=request)
    took = time.perf_counter() - started
    GpuLease.objects.filter(deployment=d).update(active=False, released_at=timezone.now())
    Deployment.objects.filter(pk=d.pk).update(status=Status.STOPPED)
    return took


def check_alone(team: Any, rounds: int) -> list[float]:
    from django.db import transaction
    from django.utils import timezone

    from teams import quota

    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        with transaction.atomic():
            quota.check_launch(team_id=team.pk, adding_gpus=1, now=timezone.now())
        out.append(time.perf_counter() - started)
    return out


def line(label: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"{label:<34} p50 {statistics.median(ms):7.2f} ms  p95 {p95:7.2f} ms  (n={len(ms)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=40, help="of each kind")
    parser.add_argument("--history", type=int, default=1000)
    args = parser.parse_args()
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from deployments.catalog.demo_model import make_tiny_llama

    call_command("migrate", verbosity=0)
    with tempfile.TemporaryDirectory(prefix="quota-bench-") as tmp:
        make_tiny_llama(Path(tmp) / "models" / "tiny")
        settings.MODEL_ROOTS = [Path(tmp) / "models"]
        team, member, loner = setup(args.history)
        tag = f"{os.getpid()}"
        one_launch(loner, f"warm-a-{tag}", None)  # caches, connections, the model's spec
        one_launch(member, f"warm-b-{tag}", team.name)
        without, with_check = [], []
        for i in range(args.launches):
            without.append(one_launch(loner, f"q-off-{tag}-{i}", None))
            with_check.append(one_launch(member, f"q-on-{tag}-{i}", team.name))
        alone = check_alone(team, 200)
    redis.Redis.from_url(settings.REDIS_URL).delete(f"host.{HOST}")
    print(
        f"database: {connection.vendor}; {args.launches} launches of each; the team's month "
        f"holds {args.history} released leases"
    )
    print(line("deployment_create, no team", without))
    print(line("deployment_create, team quotas", with_check))
    added = statistics.median(with_check) - statistics.median(without)
    print(f"added by the quota check (p50 difference): {added * 1000:.2f} ms")
    print(line("quota.check_launch alone", alone))


if __name__ == "__main__":
    main()
