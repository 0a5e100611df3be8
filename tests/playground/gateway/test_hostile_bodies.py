"""Hostile /v1/ requests on a real uvicorn server: bodies too large (refused before they are
read), strangers' bodies (401 before they are read), bodies nested to exhaust the parser, fields
the gateway does not forward, counts past their caps, and generated bodies (hypothesis): never a
500, never a traceback, a message that names the field."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controlpanel.models import AuditEvent
from playground.gateway.fields import MAX_DEPTH, shown_key
from tests.support.gateway import bearer_for

LIMIT = 64 * 1024  # the server's PLAYGROUND_MAX_BODY_BYTES in these tests
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
PROMPT = {"model": "tiny", "prompt": "1 + 1 =", "max_tokens": 4}
TRACEBACK_MARKERS = ("Traceback", 'File "', "site-packages")


@pytest.fixture
def small_limit(gateway_settings: Any) -> None:
    gateway_settings.PLAYGROUND_MAX_BODY_BYTES = LIMIT
    gateway_settings.PLAYGROUND_MAX_CHOICES = 4


@pytest.fixture
def gw(small_limit: None, server: Any, stub: Any, make_deployment: Any) -> Any:
    make_deployment("tiny", stub.port)
    return server


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return sock


def _head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the server's answer on `sock`."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, json.loads(response.read())


def _audits() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="playground.request").order_by("id"))


# --- size and who may send a body ------------------------------------------------------------


def test_declared_length_past_the_limit_is_413_before_the_body(gw: Any, operator: Any) -> None:
    headers = {**bearer_for(operator), "Content-Type": "application/json"}
    with _connect(gw.url) as sock:
        sock.sendall(_head("/v1/chat/completions", {**headers, "Content-Length": str(LIMIT + 1)}))
        status, body = _response(sock)  # not one byte of the body was sent
    assert status == 413
    assert body["error"]["type"] == "request_too_large"
    assert f"{LIMIT:,} bytes (PLAYGROUND_MAX_BODY_BYTES)" in body["error"]["message"]


def test_a_strangers_body_gets_its_401_before_it_is_sent(gw: Any, small_limit: None) -> None:
    # Under the limit is the point: the 401 must not wait for the body. 60 kB declared, 0 sent.
    for headers in ({}, {"Authorization": "Bearer sb-not-a-token"}):
        with _connect(gw.url) as sock:
            head = {**headers, "Content-Type": "application/json", "Content-Length": "60000"}
            sock.sendall(_head("/v1/chat/completions", head))
            started = time.monotonic()
            status, body = _response(sock)
        assert status == 401, body
        assert time.monotonic() - started < 5
        assert body["error"]["type"] in ("unauthenticated", "invalid_api_key")


def test_a_viewer_gets_its_403_before_the_body(gw: Any, viewer: Any) -> None:
    with _connect(gw.url) as sock:
        head = {**bearer_for(viewer), "Content-Length": "60000"}
        sock.sendall(_head("/v1/completions", head))
        status, body = _response(sock)
    assert status == 403 and "Operator" in body["error"]["message"]


def test_a_chunked_body_stops_at_the_limit(gw: Any, operator: Any, stub: Any) -> None:
    headers = {**bearer_for(operator), "Transfer-Encoding": "chunked"}
    piece = b"x" * 16384
    with _connect(gw.url) as sock:
        sock.sendall(_head("/v1/chat/completions", headers))
        for _ in range(LIMIT // len(piece) + 2):  # past the limit, and never the last chunk
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        status, body = _response(sock)
    assert status == 413 and body["error"]["type"] == "request_too_large"
    assert stub.seen == []


def test_a_body_under_the_limit_but_over_djangos_form_limit_passes(
    gateway_settings: Any, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    # The default limit (4 MiB) is over Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB), which
    # the gateway does not apply to its bodies.
    make_deployment("tiny", stub.port)
    prompt = "word " * (600 * 1024)  # 3 MiB
    r = httpx.post(
        f"{server.url}/v1/completions",
        json={**PROMPT, "prompt": prompt},
        headers=bearer_for(operator),
        timeout=20,
    )
    assert r.status_code == 200, r.text[:300]
    assert stub.seen[-1].body["prompt"] == prompt


# --- what the body says ----------------------------------------------------------------------


def test_a_hundred_thousand_brackets_are_a_400(gw: Any, operator: Any) -> None:
    r = httpx.post(
        f"{gw.url}/v1/chat/completions", content=b"[" * 60_000, headers=bearer_for(operator)
    )
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "the body is not valid JSON: it nests too deeply"


def test_a_hundred_thousand_brackets_under_the_default_limit(
    gateway_settings: Any, server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    r = httpx.post(
        f"{server.url}/v1/completions", content=b"[" * 100_000, headers=bearer_for(operator)
    )
    assert r.status_code == 400 and "nests too deeply" in r.text


def test_nesting_inside_a_field_is_named(gw: Any, operator: Any, stub: Any) -> None:
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    body = {**CHAT, "messages": [{"role": "user", "content": deep}]}
    r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=bearer_for(operator))
    assert r.status_code == 400
    assert r.json()["error"]["message"] == f"'messages' nests deeper than {MAX_DEPTH} levels"
    assert stub.seen == []


@pytest.mark.parametrize(
    ("path", "extra", "message"),
    [
        ("chat", {"n": 5}, "'n' must be between 1 and 4 (PLAYGROUND_MAX_CHOICES); got 5"),
        ("chat", {"n": 0}, "'n' must be between 1 and 4 (PLAYGROUND_MAX_CHOICES); got 0"),
        ("chat", {"n": "2"}, "'n' must be an integer"),
        ("completion", {"best_of": 100}, "'best_of' must be between 1 and 4"),
        ("completion", {"n": 3, "best_of": 2}, "'best_of' (2) must be at least 'n' (3)"),
        ("completion", {"logprobs": 21}, "'logprobs' must be between 0 and 20; got 21"),
        ("chat", {"logprobs": 5}, "'logprobs' must be true or false"),
        ("chat", {"logprobs": True, "top_logprobs": 50}, "'top_logprobs' must be between 0"),
        ("chat", {"max_tokens": "lots"}, "'max_tokens' must be a positive integer"),
        ("chat", {"chat_template": "{{ 7 * 7 }}"}, "'chat_template' is not a field the gateway"),
        ("completion", {"best_of": 2, "prompt_logprobs": 5}, "'prompt_logprobs' is not a field"),
        ("chat", {"stop": ["x"] * 17}, "'stop' has 17 sequences; at most 16"),
        ("chat", {"temperature": "hot"}, "'temperature' must be a number"),
    ],
)
def test_fields_past_their_caps_are_named(
    gw: Any, operator: Any, stub: Any, path: str, extra: dict[str, Any], message: str
) -> None:
    base, url = (CHAT, "chat/completions") if path == "chat" else (PROMPT, "completions")
    r = httpx.post(f"{gw.url}/v1/{url}", json={**base, **extra}, headers=bearer_for(operator))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"].startswith(message), r.json()
    assert stub.seen == []


def test_fields_within_their_caps_pass(gw: Any, operator: Any, stub: Any) -> None:
    headers = bearer_for(operator)
    chat = {**CHAT, "n": 4, "logprobs": True, "top_logprobs": 20, "seed": 7, "stop": ["\n"]}
    assert httpx.post(f"{gw.url}/v1/chat/completions", json=chat, headers=headers).is_success
    prompt = {**PROMPT, "n": 2, "best_of": 4, "logprobs": 20, "temperature": None}
    assert httpx.post(f"{gw.url}/v1/completions", json=prompt, headers=headers).is_success
    assert stub.seen[0].body["top_logprobs"] == 20 and stub.seen[1].body["best_of"] == 4


# --- generated bodies ------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "model", "messages", "prompt", "n", "best_of", "logprobs", "top_logprobs", "max_tokens",
        "max_completion_tokens", "stream", "stream_options", "temperature", "stop", "logit_bias",
        "tools", "chat_template", "seed", "echo", "user",
    ]
) | st.text(min_size=1, max_size=12)  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    path = draw(st.sampled_from(["chat/completions", "completions"]))
    body = dict(CHAT if path == "chat/completions" else PROMPT)
    body.pop("max_tokens")
    body.update(draw(st.dictionaries(KEYS, JSON_VALUES, min_size=1, max_size=3)))
    return path, body


@pytest.fixture
def operator_headers(operator: Any) -> Iterator[dict[str, str]]:
    yield bearer_for(operator)


@settings(
    max_examples=80,
    deadline=3000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=bodies())
def test_generated_bodies_never_500_and_name_the_field(
    gw: Any, operator_headers: dict[str, str], case: tuple[str, dict[str, Any]]
) -> None:
    path, body = case
    r = httpx.post(f"{gw.url}/v1/{path}", json=body, headers=operator_headers, timeout=10)
    event(f"status {r.status_code}")
    assert r.status_code < 500, r.text[:300]
    assert not any(marker in r.text for marker in TRACEBACK_MARKERS), r.text[:300]
    if r.status_code < 400:
        return
    message = r.json()["error"]["message"]
    named = [key for key in body if f"'{key[:40]}" in message or shown_key(key) in message]
    assert named or message.startswith("the body"), (body, message)


def test_a_nul_in_a_field_name_is_named_and_audited(gw: Any, operator: Any) -> None:
    # PostgreSQL stores no NUL: the refusal's audit row once failed, and with it the request.
    body = {**CHAT, "a\x00b": 1}
    r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=bearer_for(operator))
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("'a\\x00b' is not a field the gateway")
    rows = _audits()
    assert len(rows) == 1 and rows[0].detail["error"].startswith("'a\\x00b' is not a field")


def test_a_model_name_no_deployment_could_have_is_a_400(gw: Any, operator: Any) -> None:
    for model in ("ti\x00ny", "x" * 201, "a\nb"):
        body = {**CHAT, "model": model}
        r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=bearer_for(operator))
        assert r.status_code == 400
        assert r.json()["error"]["message"] == "'model' must name a running deployment"
    assert len(_audits()) == 3
