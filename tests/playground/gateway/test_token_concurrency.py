"""A token's own concurrent-request limit (issue 30, part 5): an application behind one API
token runs as many streams as its token allows, not its owner's per-user slots."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from openai import OpenAI

from playground import services, token_limits
from tests.support.gateway import GATEWAY_MAX_CONCURRENT, bearer_for, sse_stream
from tests.support.waiting import wait_for

MESSAGES = [{"role": "user", "content": "hello"}]
STREAMS = 8


def _stream(client: OpenAI, firsts: list[str], texts: list[str]) -> None:
    stream = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=5,
        stream=True,  # type: ignore[arg-type]
    )
    parts = []
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            if len(parts) == 1:
                firsts.append(parts[0])
    texts.append("".join(parts))


def test_eight_parallel_sdk_streams_on_a_token_allowed_eight(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    assert STREAMS > GATEWAY_MAX_CONCURRENT  # the per-user limit would refuse some
    stub.hold_after_first = threading.Event()
    make_deployment("tiny", stub.port)
    token, raw = services.token_create(user=operator, name="harness")
    token_limits.limits_set(
        user=operator,
        token_id=token.pk,
        rpm_limit=None,
        tokens_per_day_limit=None,
        max_concurrent=STREAMS,
    )
    client = OpenAI(base_url=f"{server.url}/v1", api_key=raw, max_retries=0)
    firsts: list[str] = []
    texts: list[str] = []
    threads = [
        threading.Thread(target=_stream, args=(client, firsts, texts)) for _ in range(STREAMS)
    ]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(firsts) == STREAMS, timeout_s=20)  # all 8 in flight at once
        url = f"{server.url}/v1/chat/completions"
        body = {"model": "tiny", "messages": MESSAGES, "max_tokens": 5}
        ninth = httpx.post(url, json=body, headers={"Authorization": f"Bearer {raw}"})
        assert ninth.status_code == 429
        assert "this API token has 8 requests running" in ninth.json()["error"]["message"]
        # The owner's own slots (another token at the default) are not the harness's.
        with sse_stream(url, {**body, "stream": True}, bearer_for(operator)) as other:
            assert other.status_code == 200
    finally:
        stub.hold_after_first.set()
        for t in threads:
            t.join(timeout=20)
    assert texts == ["t0 t1 t2 t3 t4 "] * STREAMS


@pytest.mark.django_db
def test_owner_may_not_pass_the_admins_ceiling(operator: Any, settings: Any) -> None:
    settings.PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING = 16
    token, _ = services.token_create(user=operator, name="harness")
    try:
        token_limits.limits_set(
            user=operator,
            token_id=token.pk,
            rpm_limit=None,
            tokens_per_day_limit=None,
            max_concurrent=17,
        )
    except token_limits.LimitError as exc:
        assert "at most 16" in str(exc)
    else:
        raise AssertionError("a limit past the ceiling was accepted")
    assert token_limits.parse_concurrency("16") == 16
    assert token_limits.parse_concurrency("") is None
    for bad in ("0", "17", "x"):
        try:
            token_limits.parse_concurrency(bad)
        except token_limits.LimitError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
