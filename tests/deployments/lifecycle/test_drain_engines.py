"""Drain with real parts (issue 30, part 4): a real host worker, two real transformers engines,
the /v1/ gateway on a real server. Streams admitted before a scale-down or a stop all finish
with their [DONE] and no error; the replica leaves the rotation first, and its engine gets
SIGTERM only once they did."""

from __future__ import annotations

import secrets
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from deployments import planning
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, Status
from playground.gateway import balance
from tests.support.gateway import bearer_for
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(600)]
HOST = f"drain{secrets.token_hex(3)}"


@pytest.fixture
def roomy(settings: Any) -> None:
    settings.PLAYGROUND_MAX_CONCURRENT = 64  # the server is forked with these settings


def statuses(rows: list[Deployment]) -> list[str]:
    for r in rows:
        r.refresh_from_db()
    return [r.status for r in rows]


def stream(url: str, headers: dict[str, str], n: int) -> tuple[int, str]:
    """The HTTP status and the data lines of one long streamed answer."""
    body = {"model": "duo", "prompt": f"story {n}:", "max_tokens": 120, "stream": True}
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers, timeout=120
    ) as answer:
        lines = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
        return answer.status_code, "\n".join(lines)


def _in_flight(ids: list[int], total: int) -> dict[int, int] | None:
    counts = balance.in_flight(ids)
    return counts if sum(counts.values()) == total else None


def _complete(done: list[Future[tuple[int, str]]]) -> list[tuple[int, str]]:
    ends = [f.result(timeout=240) for f in done]
    for status, text in ends:
        assert status == 200, text[-300:]
        assert '"error"' not in text and text.endswith("[DONE]"), text[-300:]
    return ends


def test_scale_down_and_stop_drop_no_admitted_stream(
    roomy: None, host_worker: Any, model_root: Any, asgi_server: Any, operator: Any
) -> None:
    # SIGKILL 1 s after SIGTERM: transformers serve would otherwise finish its streams on
    # SIGTERM by itself (uvicorn's graceful shutdown), and the test would not see the drain.
    worker = start_sim_worker(
        host_worker, HOST, model_root, SHARDBOARD_DRAIN_GRACE_S="120", SHARDBOARD_STOP_GRACE_S="1"
    )
    request = LaunchRequest(
        name="duo",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
        replicas=2,
    )
    rows = list(deployment_create(user=operator, request=request).group())
    try:
        wait_for(lambda: set(statuses(rows)) <= {"running", "failed"}, timeout_s=200)
    except AssertionError:
        print(worker.log())
        raise
    assert statuses(rows) == ["running"] * 2, [r.failure_reason for r in rows]
    ids, auth, url = [r.pk for r in rows], bearer_for(operator), asgi_server.url
    gone = rows[1]

    with ThreadPoolExecutor(max_workers=8) as pool:
        first = [pool.submit(stream, url, auth, n) for n in range(4)]
        try:
            counts = wait_for(lambda: _in_flight(ids, 4), timeout_s=30, interval_s=0.02)
        except AssertionError:
            print(balance.in_flight(ids), [f.result()[1][-300:] for f in first if f.done()])
            raise
        assert counts[gone.pk] >= 1  # the replica going away holds streams
        deployment_scale(user=operator, deployment=rows[0], replicas=1)
        # Out of the rotation at once: what comes now goes to the replica that stays.
        during = [pool.submit(stream, url, auth, n) for n in range(4, 6)]
        _complete(first + during)
        wait_for(lambda: statuses([gone]) == ["stopped"], timeout_s=60, interval_s=0.2)
    stopped = gone.events.filter(new_status=Status.STOPPED).last()
    assert stopped is not None and "drained in" in stopped.reason, stopped
    assert balance.in_flight([gone.pk]) == {gone.pk: 0}

    kept = rows[0]
    with ThreadPoolExecutor(max_workers=4) as pool:
        last = [pool.submit(stream, url, auth, n) for n in range(6, 9)]
        wait_for(lambda: _in_flight([kept.pk], 3), timeout_s=30, interval_s=0.02)
        stop_asked = time.monotonic()
        deployment_stop(user=operator, deployment=kept)
        _complete(last)
        streams_done = time.monotonic() - stop_asked
    wait_for(lambda: statuses([kept]) == ["stopped"], timeout_s=60, interval_s=0.2)
    stopped = kept.events.filter(new_status=Status.STOPPED).last()
    assert stopped is not None and "drained in" in stopped.reason, stopped

    def ask() -> int:
        body = {"model": "duo", "prompt": "x"}
        return httpx.post(f"{url}/v1/completions", json=body, headers=auth, timeout=10).status_code

    # After the drain a new request is refused: 503 (no replica in rotation) while a web
    # process's list of running replicas is still the one read before the stop (at most
    # balance.ROTATION_S old), then 409 up front (the deployment has stopped). Never served.
    answers = [ask()]
    wait_for(lambda: answers[-1] == 409 or answers.append(ask()), interval_s=0.2)
    assert set(answers) <= {503, 409} and answers[-1] == 409, answers
    print(f"stop: the admitted streams ended {streams_done:.1f} s after it was asked")
