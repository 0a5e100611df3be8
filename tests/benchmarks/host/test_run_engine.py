"""A benchmark through the real parts: a real host worker process, a real transformers engine
on the tiny model, Redis, the database; only the GPUs are simulated."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command

from benchmarks.models import BenchmarkRun
from benchmarks.services import BenchmarkError, run_cancel, run_start
from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(300)]
HOST = "benchhost"


@pytest.fixture
def worker(host_worker, model_root):
    # Levels of ten small requests last about a second: sampled five times a second, each level
    # has samples of its own.
    return start_sim_worker(host_worker, HOST, model_root, SAMPLE_INTERVAL_S="0.2")


@pytest.fixture
def running(worker, operator) -> Iterator[Deployment]:
    request = LaunchRequest(
        name="tinybench",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",  # the benchmark is the subject, not the engine
        plan_request=planning.PlanRequest(),
    )
    d = deployment_create(user=operator, request=request)
    wait_for(lambda: _status(d) in ("running", "failed"), timeout_s=90, interval_s=0.5)
    assert d.status == "running", d.failure_reason + worker.log()[-3000:]
    yield d
    # A host worker that stops leaves its engines serving (by design): stop the deployment
    # through whichever worker is up now, so no engine outlives the test.
    if _status(d) == "running":
        deployment_stop(user=operator, deployment=d)
        wait_for(lambda: _status(d) == "stopped", interval_s=0.2)


def _status(obj):
    obj.refresh_from_db()
    return obj.status


def _ended(run: BenchmarkRun, worker, timeout_s: float = 90) -> BenchmarkRun:
    try:
        wait_for(lambda: _status(run) in ("succeeded", "failed", "cancelled"), timeout_s, 0.3)
    except AssertionError:
        print(worker.log()[-5000:])
        raise
    return run


def workload(**extra):
    return {"prompt": 24, "output": 12, "levels": "1,2", "requests_per_level": 10, **extra}


def _ordered(figures: dict) -> bool:
    return figures["p50"] <= figures["p90"] <= figures["p95"] <= figures["p99"]


def test_two_levels_then_a_cancelled_run(running, operator, viewer, worker) -> None:
    run = run_start(user=operator, deployment=running, workload=workload(), label="first")
    assert run.layout["simulated"] and run.layout["gpu_indices"]
    _ended(run, worker)
    assert run.status == "succeeded", run.error + worker.log()[-3000:]
    assert [(lv["load"], lv["concurrency"]) for lv in run.levels] == [(1, 1), (2, 2)]
    for level in run.levels:
        assert level["requests"] == level["completed"] == 10 and level["failed"] == 0
        assert level["output_tokens"] == 10 * 12  # usage's completion tokens, max_tokens each
        assert level["request_throughput"] > 0 and level["output_throughput"] > 0
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            assert _ordered(level[key]), (key, level[key])
        assert level["ttft_ms"]["p99"] <= level["e2el_ms"]["p99"]
        assert len(level["samples"]["ttft_ms"]) == 10
        assert level["engine"] == {"available": False}  # transformers serve has no /metrics
        assert level["reading"]["kind"] in ("headroom", "unknown", "client_io")
        assert "Simulated GPUs" in level["reading"]["note"]
    # The simulated GPUs followed the load: 1/8 then 2/8 of full utilization.
    utils = [lv["gpu"]["util_pct"] for lv in run.levels]
    assert all(u is not None for u in utils) and utils[0] < utils[1] < 50, utils
    assert AuditEvent.objects.filter(action="benchmark.start", actor=operator).exists()

    with pytest.raises(BenchmarkError, match="role"):
        run_start(user=viewer, deployment=running, workload=workload())
    long = run_start(
        user=operator,
        deployment=running,
        workload={"prompt": 24, "output": 12, "levels": "1", "duration_s": 60},
    )
    with pytest.raises(BenchmarkError, match="one run at a time"):
        run_start(user=operator, deployment=running, workload=workload())
    wait_for(
        lambda: _status(long) == "running" and long.progress.get("done", 0) >= 2, interval_s=0.2
    )
    run_cancel(user=operator, run=long)
    _ended(long, worker)
    assert long.status == "cancelled"
    assert long.levels and long.levels[0]["stopped"] == "cancelled"
    assert long.levels[0]["completed"] >= 2 and long.levels[0]["duration_s"] < 30
    assert AuditEvent.objects.filter(action="benchmark.cancel").exists()

    out = StringIO()
    call_command(
        "bench_deployment", running.name, "--user", operator.username, "--levels", "1",
        "--requests", "3", "--output", "8", "--wait", "--timeout", "60", stdout=out,
    )  # fmt: skip
    rows = out.getvalue().splitlines()
    assert rows[0].startswith("benchmark ") and rows[1].split()[:3] == ["load", "ok", "fail"]
    assert rows[2].split()[:3] == ["1", "3", "0"], rows


def test_engine_killed_mid_run_fails_with_what_was_measured(running, operator, worker) -> None:
    run = run_start(
        user=operator,
        deployment=running,
        workload={"prompt": 24, "output": 12, "levels": "2", "duration_s": 60},
    )
    wait_for(lambda: _status(run) == "running" and run.progress.get("done", 0) >= 3, interval_s=0.2)
    os.killpg(running.pgid, signal.SIGKILL)
    _ended(run, worker)
    assert run.status == "failed"
    assert "stopped answering" in run.error, run.error
    level = run.levels[0]
    assert level["completed"] >= 3 and level["failed"] >= 1
    assert level["requests"] == level["completed"] + level["failed"]
    assert any("connect" in e["error"] for e in level["errors"]), level["errors"]


def test_a_run_the_worker_lost_ends_failed_when_it_starts_again(
    host_worker, running, operator, worker
) -> None:
    run = run_start(
        user=operator,
        deployment=running,
        workload={"prompt": 24, "output": 12, "levels": "1,2", "duration_s": 20},
    )
    wait_for(lambda: _status(run) == "running" and run.progress.get("done", 0) >= 2, interval_s=0.2)
    worker.stop(signal.SIGKILL)
    assert _status(run) == "running"
    again = host_worker(HOST, **worker.extra_env)
    _ended(run, again)
    assert run.status == "failed" and "host worker stopped during the run" in run.error
