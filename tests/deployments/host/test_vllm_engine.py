"""The real vLLM (its 0.32 CPU build), started through the adapter and the supervisor as a host
worker starts it, judges what Shardboard reads from it: the start's steps and figures from its
own log, its /metrics under load and the autoscaler's decision from them, and why it ended when
its engine core is killed mid-stream. One engine for the module; the last test kills it. (TP 2 on
the two cores, through a host worker: lifecycle/test_vllm_deployment.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.autoscale import series
from deployments.autoscale.controller import Controller
from deployments.autoscale.decide import Decision
from deployments.autoscale.scrape import scrape
from deployments.engines import phases, startup_figures
from deployments.host import supervisor as sv
from deployments.host.diagnosis import diagnose, diagnose_exit
from deployments.lifecycle.services import LaunchRequest, deployment_create
from deployments.models import Deployment, ScalingPolicy, Status
from monitoring.models import Host
from tests.support.hosts import sim_host
from tests.support.vllm_engine import (
    ENGINE_TEST_TIMEOUT_S,
    KV_BYTES,
    Engine,
    cpu_spec,
    running,
)
from tests.support.waiting import wait_for

# Every test may be the one whose set-up starts the module's engine (minutes, loaded); all
# use the database, so that pytest-django's ordering keeps them together: one start.
pytestmark = [
    pytest.mark.engine,
    pytest.mark.django_db,
    pytest.mark.timeout(ENGINE_TEST_TIMEOUT_S),
]
KEY = "sk-real-vllm"
SEQS = 2  # --max-num-seqs: a third request waits, as on a full GPU
# The demo model's KV per token in the dtype vLLM picks on this CPU (bfloat16): 2 layers x
# (K, V) x 1 KV head x head_dim 64 x 2 bytes.
KV_BYTES_PER_TOKEN = 2 * 2 * 1 * 64 * 2
LONG_TOKENS = 400
LONG = {"model": "tiny", "prompt": "1 + 1 =", "max_tokens": LONG_TOKENS, "ignore_eos": True}
LOAD = 10  # requests at once: SEQS running, the rest waiting
LOAD_ROUNDS = 3


@pytest.fixture(scope="module")
def engine(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    spec = cpu_spec(tiny_model, api_key=KEY, max_num_seqs=SEQS)
    with running(spec, tmp_path_factory.mktemp("vllm") / "vllm.log") as started:
        yield started


def test_the_start_is_read_from_the_engines_own_log(engine: Engine) -> None:
    lines = engine.log().splitlines()
    figures = startup_figures.read_lines(lines)
    assert figures.engine_version == "0.32.0"
    assert figures.kv_tokens == engine.logged_kv_tokens() == KV_BYTES // KV_BYTES_PER_TOKEN
    assert figures.kv_bytes is not None and abs(figures.kv_bytes - KV_BYTES) <= 0.005 * (1 << 30)
    assert figures.failure == "" and figures.weights_bytes is None  # the CPU prints no weights
    tracker = phases.PhaseTracker()
    steps = [step for line in lines if (step := tracker.feed(line)) is not None]
    assert list(dict.fromkeys(s.phase for s in steps)) == [
        phases.LOADING,
        phases.PROFILING,
        phases.WARMING_UP,
    ]
    assert any(s.phase == phases.LOADING and s.done == s.total == 1 for s in steps)
    assert diagnose(engine.log()) is None
    assert sv.smoke_test(engine.url, engine.command.request_model, KEY).ok


def test_the_autoscaler_scrapes_the_real_metrics_under_load_and_decides(
    engine: Engine, model_root: Path, operator: Any
) -> None:
    """Moved from the stand-in: the controller's pass on the real engine's /metrics, full (two
    running, the rest waiting); a second replica the one GPU cannot hold is refused with the
    planner's reason."""
    sim_host("policyhost", 1)
    request = LaunchRequest(name="chat", model_ref="local:0/tiny", host_name="policyhost",
                            plan_request=planning.PlanRequest())  # fmt: skip
    d = deployment_create(user=operator, request=request)
    Deployment.objects.filter(pk=d.pk).update(status=Status.RUNNING, port=engine.port)
    # up_after_s 0: the decision is the loaded tick's own (decide's window is unit-tested); under
    # load two scrapes in a row may not both land while requests wait.
    ScalingPolicy.objects.create(deployment=d, set_by=operator, min_replicas=1, max_replicas=2,
                                 waiting_per_replica=1, up_after_s=0)  # fmt: skip
    series._redis().delete(series.key(d.pk))
    controller = Controller()
    before = scrape(engine.url)
    assert before is not None and before.running == before.waiting == 0
    assert controller.tick(now_s=time.time())[0].replicas == 1  # idle: holds
    decision, seen, rounds = _decision_under_load(controller, engine, d)
    assert seen["running"] == SEQS and seen["waiting"] >= 2 and seen["kv_usage"] > 0
    assert decision.replicas == 2 and decision.reason.startswith("waiting a replica")
    row = AuditEvent.objects.get(action="deployment.autoscale", target_id=str(d.pk))
    assert "Cannot add 1 replica(s) to chat" in row.detail["refused"]
    assert row.detail["figures"]["waiting"] >= 2 and row.actor == operator
    after = scrape(engine.url)
    assert (
        after is not None and after.ttft[float("inf")] >= before.ttft[float("inf")] + rounds * LOAD
    )


def _decision_under_load(
    controller: Controller, engine: Engine, d: Deployment
) -> tuple[Decision, dict[str, Any], int]:
    """The controller's first scale-up decision while LOAD requests run, with the observation it
    took it on and the rounds of load it took: a round whose load ended before a scrape landed
    in it is followed by another. Rare since the engine core sits beside its worker
    (vllm_engine.core_beside_workers) and the load shares one client: a client per request built
    an SSL context each, and 30 of them in this process held a scrape for the whole load
    (controlpanel/enginehttp.py).
    """
    headers = {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=LOAD)
    for rounds in range(1, LOAD_ROUNDS + 1):
        # Online as its worker's heartbeat keeps it: a refusal for an offline host (30 s without
        # one) would hide the planner's own.
        Host.objects.filter(pk=d.host_id).update(last_heartbeat=timezone.now())
        decision = None
        with (
            httpx.Client(headers=headers, timeout=120, limits=limits) as http,
            ThreadPoolExecutor(LOAD) as pool,
        ):
            url = f"{engine.url}/v1/completions"
            answers = [pool.submit(http.post, url, json=LONG) for _ in range(LOAD)]
            while decision is None and not all(a.done() for a in answers):
                tick = controller.tick(now_s=time.time())[0]
                decision = tick if tick.replicas == 2 else None
            assert [a.result().status_code for a in answers] == [200] * LOAD
        if decision is not None:
            return decision, series.read(d.pk)[-1], rounds
    rows = series.read(d.pk)
    seen = [(r["running"], r["waiting"], r["decision"]) for r in rows if r["waiting"]] or rows[-3:]
    raise AssertionError(f"no decision to scale in {LOAD_ROUNDS} rounds of {LOAD}: {seen}")


def test_an_engine_core_killed_mid_stream_ends_the_stream_with_an_error_and_says_why(
    engine: Engine,
) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    core = engine.core()  # found before: the process table is slower than the tiny model
    with httpx.stream("POST", f"{engine.url}/v1/completions", json={**LONG, "stream": True},
                      headers=headers, timeout=60) as response:  # fmt: skip
        assert response.status_code == 200
        # As the stream opens, not at its first token: the core made all 400 tokens before the
        # API server beside it on the two cores had sent the first (seen twice; 0.3 s alone).
        core.kill()
        frames = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    error = json.loads(frames[-2])["error"]
    assert error["code"] == 500 and "EngineCore" in error["message"]
    tokens = [json.loads(frame)["choices"][0] for frame in frames[:-2]]
    assert len(tokens) < LONG_TOKENS and all(t["finish_reason"] is None for t in tokens)
    gone = wait_for(lambda: sv.poll_exit(engine.handle), 60)
    why = diagnose_exit(engine.log(), gone.exit_code, gone.signal)
    assert why.code == "engine_core_died"
    assert "engine core exited unexpectedly" in why.matched_line  # vLLM's own line
    wait_for(lambda: not engine.processes(), 60)  # the worker follows its core: nothing left
