"""Speed of the Models pages: a 20-result search page from cache, and the plan endpoint.

    REDIS_URL=... DATABASE_URL=... .venv/bin/python bench/catalog_speed.py [--runs 40]

Runs the whole Django stack in process (middleware, session, auth, view, template) through
the test client, on a throw-away test database and the Hub stand-in (tests/hubstub) grown to
30 models. Targets (issue 6): search page ≤ 300 ms from cache, plan ≤ 200 ms server time.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from deployments.catalog.hubaccess import _shared_client  # noqa: E402
from tests.support.catalog import clear_hub_cache  # noqa: E402
from tests.support.hubstub import HubStub  # noqa: E402

GIB = 1 << 30
SEARCH_TARGET_MS = 300
PLAN_TARGET_MS = 200


def grown_stub(copies: int) -> HubStub:
    """The stand-in with extra copies of its servable repos, so one page holds 20 results."""
    stub = HubStub()
    servable = [r for r in stub.repos.values() if "gguf" not in r.repo_id.lower()]
    for n in range(copies):
        repo = copy.deepcopy(servable[n % len(servable)])
        repo_id = f"bench-org/{repo.repo_id.split('/')[1]}-copy{n}"
        repo.info.update(id=repo_id, modelId=repo_id, author="bench-org")
        repo.info["downloads"] = int(repo.info.get("downloads", 0)) + n
        stub.repos[repo_id] = repo
    return stub.start()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def report(name: str, values_ms: list[float], target_ms: float) -> bool:
    p95 = percentile(values_ms, 95)
    verdict = "OK" if p95 <= target_ms else "OVER TARGET"
    print(
        f"{name:<52} n={len(values_ms):<3} p50={statistics.median(values_ms):7.1f} ms  "
        f"p95={p95:7.1f} ms  max={max(values_ms):7.1f} ms  (target {target_ms} ms: {verdict})"
    )
    return p95 <= target_ms


def timed(runs: int, call: Callable[[int], None]) -> list[float]:
    out = []
    for i in range(runs):
        start = time.perf_counter()
        call(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def viewer_client() -> Client:
    user = get_user_model().objects.create_user("bench-viewer", password="bench-password-1")  # noqa: S106
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client = Client()
    client.force_login(user)
    return client


def sim_host(gpus: int) -> None:
    from monitoring.models import Gpu, Host

    host = Host.objects.create(name="bench-sim", queue="host.bench-sim", backend="simulated")
    for i in range(gpus):
        Gpu.objects.create(
            host=host, index=i, uuid=f"GPU-bench-{i}", name="H100", memory_total_bytes=80 * GIB
        )


def bench_search(client: Client, runs: int) -> bool:
    first = client.get("/models/", {"sort": "downloads"})
    assert first.status_code == 200, first.status_code
    cards = first.content.decode().split('id="local-models"')[0].count('class="model-card"')
    assert cards == 20, f"expected 20 results, got {cards}"

    def search(_: int) -> None:
        response = client.get("/models/", {"sort": "downloads"})
        assert b"Cached since" in response.content

    ok = report("search page, 20 results, from cache (full page)", timed(runs, search), 300)
    fragment = timed(runs, lambda _: client.get("/models/results/", {"sort": "downloads"}))
    return report("search results fragment (as typed), from cache", fragment, 300) and ok


def bench_plan(client: Client, runs: int, ref: str, target: str, gpus: str = "") -> bool:
    params = {"ref": ref, "target": target, "gpus": gpus}
    assert client.get("/models/plan/", params).status_code == 200  # model info now cached
    planner_ms: list[float] = []

    def plan(i: int) -> None:
        response = client.get("/models/plan/", {**params, "max_model_len": str(4096 + 64 * i)})
        assert response.status_code in (200, 422), response.status_code
        planner_ms.append(response.json()["server_ms"])

    label = f"plan endpoint {ref.split('/')[1][:22]} on {target if target != 'whatif' else gpus}"
    ok = report(label + " (request)", timed(runs, plan), PLAN_TARGET_MS)
    print(f"{'  of which planning (server_ms)':<52} p50={statistics.median(planner_ms):7.1f} ms")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    setup_test_environment()
    test_db = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    stub = grown_stub(copies=22)
    settings.HF_ENDPOINT = stub.url
    settings.HF_TOKEN = ""
    settings.ALLOWED_HOSTS = ["testserver"]
    clear_hub_cache()
    _shared_client.cache_clear()
    try:
        client = viewer_client()
        sim_host(8)
        ok = bench_search(client, args.runs)
        ok &= bench_plan(client, args.runs, "Qwen/Qwen2.5-7B-Instruct", "whatif", "4x80GiB@nvlink")
        big = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
        ok &= bench_plan(client, args.runs, big, "bench-sim")
    finally:
        stub.stop()
        clear_hub_cache()
        connection.creation.destroy_test_db(test_db, verbosity=0)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
