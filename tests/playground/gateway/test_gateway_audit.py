"""Exactly one audit row per gateway request, however it ends; written after the answer."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from playground.models import PlaygroundRun
from tests.support.gateway import bearer_for, sse_stream
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
SETTLE_S = 0.5  # long enough for a second, wrongly written row to show up


def _statuses() -> list[str]:
    rows = AuditEvent.objects.filter(action="playground.request").order_by("id")
    return [row.detail["status"] for row in rows]


def _settled_statuses() -> list[str]:
    wait_for(_statuses)
    time.sleep(SETTLE_S)
    return _statuses()


def test_a_finished_stream_is_recorded_once(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    with sse_stream(f"{server.url}/v1/chat/completions", CHAT, bearer_for(operator)) as r:
        assert b"[DONE]" in r.read()
    assert _settled_statuses() == ["ok"]


def test_a_client_that_hangs_up_mid_stream_is_recorded_once(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    stub.hold_after_first = threading.Event()
    make_deployment("tiny", stub.port)
    with sse_stream(f"{server.url}/v1/chat/completions", CHAT, bearer_for(operator)) as r:
        assert b"t0 " in next(r.iter_raw())
    wait_for(stub.disconnected.is_set)
    assert _settled_statuses() == ["client_disconnected"]


@pytest.mark.parametrize("from_playground", [False, True])
def test_a_client_that_hangs_up_right_after_done_is_recorded_once(
    server: Any, stub: Any, make_deployment: Any, operator: Any, from_playground: bool
) -> None:
    """The OpenAI client stops reading at [DONE]; the row still says ok, once."""
    make_deployment("tiny", stub.port)
    headers = bearer_for(operator)
    if from_playground:
        headers["X-Shardboard-Playground"] = "1"
    with sse_stream(f"{server.url}/v1/chat/completions", CHAT, headers) as r:
        seen = b""
        for data in r.iter_raw():
            seen += data
            if b"[DONE]" in seen:
                break
    assert _settled_statuses() == ["ok"]
    assert PlaygroundRun.objects.count() == (1 if from_playground else 0)


def test_whole_answers_and_refusals_are_recorded_once_each(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    url, headers = f"{server.url}/v1/chat/completions", bearer_for(operator)
    assert httpx.post(url, json=CHAT, headers=headers).status_code == 200
    wait_for(_statuses)
    assert httpx.post(url, json={**CHAT, "model": "nope"}, headers=headers).status_code == 404
    assert _settled_statuses() == ["ok", "model_not_found"]


@pytest.mark.postgres
def test_a_run_whose_answer_holds_a_nul_is_still_saved(operator: Any) -> None:
    # PostgreSQL text refuses NUL; a random-weight model may emit that token.
    from playground.gateway.payload import GatewayCall
    from playground.gateway.rows import Outcome, run_row

    call = GatewayCall(kind="completion", model="m", stream=False, wants_usage=False,
                       body={"prompt": "a\x00b"})  # fmt: skip
    row = run_row(
        user=operator,
        deployment_name="m",
        call=call,
        outcome=Outcome(status="ok", http_status=200, answer="x\x00y"),
    )
    row.save()
    saved = PlaygroundRun.objects.get(pk=row.pk)
    assert (saved.answer, saved.prompt) == ("x\ufffdy", "a\ufffdb")
