"""Three replicas behind one name, with real parts: a real host worker, three real
transformers engines, the /v1/ gateway on a real server. One engine is killed during a burst:
its streams end with a clear error, nothing more goes to it, the others keep answering, and
it takes requests again once the watchdog restarted it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from deployments import planning
from deployments.lifecycle.scaling import deployment_scale
from deployments.lifecycle.services import LaunchRequest, deployment_create, deployment_stop
from deployments.models import Deployment, Status
from playground.gateway import balance
from tests.support.gateway import bearer_for, sse_data
from tests.support.waiting import wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.worker, pytest.mark.engine, pytest.mark.timeout(600)]
# Its own name per run: the last samples of a host (in Redis) outlive a run cut short, and
# its simulated engines' memory would count against this one's launch.
HOST = f"routing{secrets.token_hex(3)}"
PROMPT = {"model": "trio", "prompt": "count: 1 2 3", "max_tokens": 48}


@pytest.fixture
def roomy(settings: Any) -> None:
    """Room for a burst from one caller (the server is forked with these settings); least
    loaded only, whose even spread this test counts (every request shares one prompt, which
    prefix affinity would keep together: tests/playground/gateway/test_balance.py)."""
    settings.PLAYGROUND_MAX_CONCURRENT = 64
    settings.PLAYGROUND_ROUTING_LOAD_FACTOR = 0


def statuses(rows: list[Deployment]) -> list[str]:
    for r in rows:
        r.refresh_from_db()
    return [r.status for r in rows]


def stream(url: str, headers: dict[str, str], started: list[float]) -> tuple[str, float]:
    """One streamed answer's data lines (joined), and the time it ended."""
    body = {**PROMPT, "stream": True, "max_tokens": 200}
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, headers=headers, timeout=60
    ) as answer:
        lines = []
        for line in answer.iter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                if len(lines) == 1:
                    started.append(time.monotonic())
        return "\n".join(lines), time.monotonic()


def whole(url: str, headers: dict[str, str]) -> int:
    return httpx.post(f"{url}/v1/completions", json=PROMPT, headers=headers, timeout=60).status_code


def test_killed_replica_leaves_the_rotation_and_comes_back(
    roomy, host_worker, model_root, asgi_server, operator
) -> None:
    worker = start_sim_worker(host_worker, HOST, model_root, SHARDBOARD_RESTART_BACKOFF_S="2")
    request = LaunchRequest(
        name="trio",
        model_ref="local:0/tiny",
        host_name=HOST,
        engine="transformers",
        plan_request=planning.PlanRequest(),
        replicas=3,
        auto_restart=True,
    )
    rows = list(deployment_create(user=operator, request=request).group())
    try:
        wait_for(lambda: set(statuses(rows)) <= {"running", "failed"}, timeout_s=200)
    except AssertionError:
        print(worker.log())
        raise
    assert statuses(rows) == ["running"] * 3, [r.failure_reason for r in rows]
    ids = [r.pk for r in rows]
    auth = bearer_for(operator)
    url = asgi_server.url
    victim = rows[1]

    # A burst of long streams: least loaded means three each, counted in Redis once chosen
    # (each engine generates one answer at a time: the other two wait in its queue).
    started: list[float] = []
    with ThreadPoolExecutor(max_workers=24) as pool:
        streams = [pool.submit(stream, url, auth, started) for _ in range(9)]
        counts = wait_for(lambda: _all_in(ids, 9), interval_s=0.02)
        assert counts == dict.fromkeys(ids, 3)
        wait_for(lambda: len(started) >= 3, interval_s=0.05)
        killed_s, killed_at, port = time.monotonic(), time.time(), victim.port
        os.killpg(victim.pgid, signal.SIGKILL)
        # New requests while it is going out: every one is answered, by the others.
        during = [pool.submit(whole, url, auth) for _ in range(12)]
        wait_for(lambda: statuses([victim])[0] != Status.RUNNING, interval_s=0.02)
        out_s = time.monotonic() - killed_s
        ends = [f.result(timeout=120) for f in streams]
        assert [f.result(timeout=120) for f in during] == [200] * 12
    # The watchdog saw it die; the gateway's list of running replicas follows within 1 s.
    assert out_s < 2.0, out_s
    # Its stream under way ends with a clear error at once; those still queued on it were
    # refused before a byte reached the client, so they were retried on the others.
    cut = [(text, end) for text, end in ends if '"error"' in text]
    assert 1 <= len(cut) <= 3, [t[-300:] for t, _ in ends]
    for text, end in cut:
        error = json.loads(next(d for d in sse_data(_as_sse(text)) if '"error"' in d))["error"]
        assert error["type"] == "engine_error" and f":{port}" in error["message"]
        assert "closed the connection" in error["message"]
        assert end - killed_s < 5  # ended at once, not hung until a timeout
    assert all(text.endswith("[DONE]") for text, _ in ends)
    with ThreadPoolExecutor(max_workers=8) as pool:  # while it is down or coming back
        after = list(pool.map(lambda _: whole(url, auth), range(16)))
    assert after == [200] * 16

    # The watchdog restarts it; once it runs again it takes its share.
    wait_for(lambda: statuses([victim])[0] == Status.RUNNING, timeout_s=150, interval_s=0.2)
    rejoined = victim.events.filter(new_status=Status.RUNNING).last()
    assert rejoined is not None and victim.port
    # Nothing was answered by it between the kill and its restart (the 28 requests sent
    # meanwhile all got 200 above: none reached the dead engine without being retried).
    served = _served_between(killed_at, rejoined.created_at.timestamp(), ids)
    assert served[victim.pk] == 0, served
    time.sleep(balance.ROTATION_S + 0.1)  # the gateway's list of replicas is that old at most
    back = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        again = [pool.submit(stream, url, auth, []) for _ in range(6)]
        counts = wait_for(lambda: _all_in(ids, 6), interval_s=0.02)
        assert counts == dict.fromkeys(ids, 2)
        assert all('"error"' not in f.result(timeout=90)[0] for f in again)
    # The gateway writes its audit rows in groups, after the answer: wait for them.
    wait_for(lambda: _served_between(back, float("inf"), ids)[victim.pk] == 2)
    print(f"victim out of rotation {out_s:.2f} s after the kill")

    # Scaled up to four through the service: the new engine runs the same command on the
    # free GPU and joins the rotation; down to two: the highest two stop, their engines end.
    deployment_scale(user=operator, deployment=rows[0], replicas=4)
    rows = list(rows[0].group())
    assert len(rows) == 4
    wait_for(lambda: statuses(rows) == ["running"] * 4, timeout_s=150, interval_s=0.2)
    assert rows[3].planned_argv == rows[0].planned_argv
    assert [a for a in rows[3].argv if a != str(rows[3].port)] == [
        a for a in rows[0].argv if a != str(rows[0].port)
    ]
    ids = [r.pk for r in rows]
    time.sleep(balance.ROTATION_S + 0.1)  # the gateway's list of replicas is that old at most
    with ThreadPoolExecutor(max_workers=8) as pool:
        quad = [pool.submit(stream, url, auth, []) for _ in range(8)]
        counts = wait_for(lambda: _all_in(ids, 8), interval_s=0.02)
        assert counts == dict.fromkeys(ids, 2)
        assert all('"error"' not in f.result(timeout=90)[0] for f in quad)
    gone = rows[2:]
    deployment_scale(user=operator, deployment=rows[0], replicas=2)
    wait_for(lambda: statuses(gone) == ["stopped"] * 2, interval_s=0.2)
    for r in gone:
        with pytest.raises(ProcessLookupError):
            os.killpg(r.pgid, 0)
    rows = list(rows[0].group())
    assert [r.replica_index for r in rows] == [1, 2] and statuses(rows) == ["running"] * 2
    assert whole(url, auth) == 200
    deployment_stop(user=operator, deployment=rows[0])
    wait_for(lambda: statuses(rows) == ["stopped"] * 2, interval_s=0.2)


def _all_in(ids: list[int], total: int) -> dict[int, int] | None:
    """The in-flight counts once `total` requests are counted."""
    counts = balance.in_flight(ids)
    return counts if sum(counts.values()) == total else None


def _as_sse(joined: str) -> str:
    return "\n".join(f"data: {line}" for line in joined.splitlines())


def _served_between(start: float, end: float, ids: list[int]) -> Counter[int]:
    """Gateway requests answered per replica between two wall-clock times (the audit rows
    carry the replica's id)."""
    served: Counter[int] = Counter(dict.fromkeys(ids, 0))
    for event in AuditEvent.objects.filter(action="playground.request"):
        if start <= event.created_at.timestamp() <= end and event.detail.get("status") == "ok":
            served[int(event.target_id)] += 1
    return served
