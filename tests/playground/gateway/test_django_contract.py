"""The parts of Django that the gateway's lean handler (playground.gateway.asgi) relies on.

The handler subclasses Django's ASGIHandler: it overrides `__call__`, `handle`,
`send_response`, `load_middleware` and `get_response_async`, calls `create_request`,
`listen_for_disconnect`, `run_get_response` and `check_response`, and runs a response's
`_resource_closers` itself. None of these is documented API, so a Django release may change
them without notice and `/v1/` break silently. These tests fail first:

- signatures: each such method or function still takes what the handler passes;
- sources: the Django methods the handler copies (less the request signals, a chunking pass, a
  task and a thread hop) are still the ones it was copied from; when one changed, re-read it,
  carry the change into playground.gateway.asgi where it applies, then update the fingerprint;
- behaviour: `HttpResponseBase.close` and `create_request` still do what the handler's copies
  assume, and the handler, driven end to end in this process, still answers each of its paths
  (a view, a stream chunk by chunk, a 404, a bad request, a refusal before the body, a client
  gone mid-stream) without sending Django's request signals.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core import signals
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.http import HttpResponse, HttpResponseBase
from django.utils.log import log_response

from playground.gateway.asgi import GatewayHandler, RelayResponse, _close_resources
from tests.support.waiting import STATE_WAIT_S

SIGNATURES: list[tuple[Callable[..., Any], str, bool]] = [  # (callable, signature, async)
    (ASGIHandler.__call__, "(self, scope, receive, send)", True),
    (ASGIHandler.handle, "(self, scope, receive, send)", True),
    (ASGIHandler.create_request, "(self, scope, body_file)", False),
    (ASGIHandler.listen_for_disconnect, "(self, receive)", True),
    (ASGIHandler.run_get_response, "(self, request)", True),
    (ASGIHandler.send_response, "(self, response, send)", True),
    (BaseHandler.load_middleware, "(self, is_async=False)", False),
    (BaseHandler.get_response_async, "(self, request)", True),
    (BaseHandler.check_response, "(self, response, callback, name=None)", False),
    (HttpResponseBase.close, "(self)", False),
    (get_script_prefix, "(scope)", False),
    (convert_exception_to_response, "(get_response)", False),
    (response_for_exception, "(request, exc)", False),
    (
        log_response,
        "(message, *args, response=None, request=None, logger=..., level=None, exception=None)",
        False,
    ),
]

# The first 16 hex digits of the sha256 of each method's source, as of the Django pinned in
# pyproject.toml (5.2.19): the methods the handler copies, and the steps around them it keeps.
FINGERPRINTS: dict[Callable[..., Any], str] = {
    ASGIHandler.__init__: "41379d4f4b69f900",  # calls load_middleware(is_async=True)
    ASGIHandler.__call__: "f756809e9c9308dc",
    ASGIHandler.handle: "98faeb5bef800331",
    ASGIHandler.send_response: "77eda2b08689b44e",
    ASGIHandler.run_get_response: "0234ea5fe09a5777",
    BaseHandler.get_response_async: "ad82c920df0cebbb",
    HttpResponseBase.close: "84589f5b23acbb23",
}


@pytest.mark.parametrize(("func", "signature", "is_async"), SIGNATURES, ids=lambda v: str(v))
def test_django_signatures_the_gateway_relies_on(
    func: Callable[..., Any], signature: str, is_async: bool
) -> None:
    assert _shape(func) == signature, func.__qualname__
    assert inspect.iscoroutinefunction(func) is is_async, func.__qualname__


def _shape(func: Callable[..., Any]) -> str:
    """The signature, with a default that is no plain literal (a logger) shown as `...`."""
    sig = inspect.signature(func)
    params = [
        p
        if p.default is p.empty or isinstance(p.default, str | int | float | bool | type(None))
        else p.replace(default=...)
        for p in sig.parameters.values()
    ]
    return str(sig.replace(parameters=params)).replace("=Ellipsis", "=...")


def test_django_methods_the_gateway_copies_are_unchanged() -> None:
    changed = [
        func.__qualname__
        for func, digest in FINGERPRINTS.items()
        if hashlib.sha256(inspect.getsource(func).encode()).hexdigest()[:16] != digest
    ]
    assert not changed, (
        f"Django changed {changed}: compare each with its copy in playground.gateway.asgi, "
        "carry the change over where it applies, then update FINGERPRINTS"
    )


def test_response_close_is_what_close_resources_copies() -> None:
    """close() runs and forgets the closers, then sends request_finished; the gateway's copy
    does the first two only."""
    finished: list[object] = []

    def on_finished(**_kwargs: Any) -> None:
        finished.append(_kwargs.get("sender"))

    signals.request_finished.connect(on_finished)
    try:
        for close, sends in ((HttpResponseBase.close, True), (_close_resources, False)):
            ran: list[int] = []
            response = HttpResponse()
            response._resource_closers.append(lambda ran=ran: ran.append(1))  # type: ignore[attr-defined]
            response._resource_closers.append(lambda: 1 / 0)  # type: ignore[attr-defined]
            response._resource_closers.append(lambda ran=ran: ran.append(2))  # type: ignore[attr-defined]
            finished.clear()
            close(response)
            assert ran == [1, 2] and response._resource_closers == []  # type: ignore[attr-defined]
            assert bool(finished) is sends
    finally:
        signals.request_finished.disconnect(on_finished)


def test_create_request_answers_a_request_or_an_error() -> None:
    handler = ASGIHandler()
    request, error = handler.create_request(_scope("GET", "/v1/models"), io.BytesIO())
    assert error is None and request is not None and request.path_info == "/v1/models"
    request, error = handler.create_request(
        _scope("GET", "/v1/models", query_string=b"\xff"), io.BytesIO()
    )
    assert request is None and error is not None and error.status_code == 400


# --- the handler end to end, in this process (the paths with a database and an engine behind
# them run over a real uvicorn server in test_gateway.py and test_hostile_bodies.py) -----------


@pytest.fixture
def request_signals(settings: Any) -> Iterator[list[str]]:
    """The names of the request signals sent while the test runs (the gateway sends none)."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    sent: list[str] = []

    def on_started(**_kwargs: Any) -> None:
        sent.append("request_started")

    def on_finished(**_kwargs: Any) -> None:
        sent.append("request_finished")

    signals.request_started.connect(on_started)
    signals.request_finished.connect(on_finished)
    yield sent
    signals.request_started.disconnect(on_started)
    signals.request_finished.disconnect(on_finished)


def test_each_answer_of_the_handler(request_signals: list[str]) -> None:
    status, head, body = _exchange(_scope("GET", "/v1/models"))  # a view: no credentials
    assert status == 401 and "error" in json.loads(body)
    assert head[b"x-content-type-options"] == b"nosniff"  # what SecurityMiddleware would add
    status, _, body = _exchange(_scope("GET", "/v1/nowhere"))  # Django's resolver: a 404
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    status, _, _ = _exchange(_scope("GET", "/v1/models", query_string=b"\xff"))  # create_request
    assert status == 400
    status, _, body = _exchange(_scope("GET", "/v1/models", {"Host": "evil.example"}))
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    assert request_signals == []


def test_a_body_too_large_is_refused_before_it_is_read(
    settings: Any, request_signals: list[str]
) -> None:
    settings.PLAYGROUND_MAX_BODY_BYTES = 1024
    scope = _scope("POST", "/v1/chat/completions", {"Content-Length": "4096"})
    status, _, body = _exchange(scope, more=True)  # the client has not sent its body
    assert status == 413 and "error" in json.loads(body)
    assert request_signals == []


def test_a_relayed_stream_is_sent_chunk_by_chunk() -> None:
    async def chunks() -> AsyncGenerator[bytes, None]:
        for chunk in (b"data: a\n\n", b"", b"data: b\n\n"):
            yield chunk

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    response = RelayResponse(chunks(), content_type="text/event-stream")
    async_to_sync(GatewayHandler().send_response)(response, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert [m.get("body") for m in sent[1:]] == [b"data: a\n\n", b"data: b\n\n", None]
    assert [m.get("more_body", False) for m in sent[1:]] == [True, True, False]


def _scope(
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    *,
    body: bytes = b"",
    query_string: bytes = b"",
) -> dict[str, Any]:
    fields = {"Host": "127.0.0.1", **(headers or {})}
    if body:
        fields |= {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query_string,
        "headers": [(k.lower().encode(), v.encode("latin1")) for k, v in fields.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def _exchange(
    scope: dict[str, Any], *, more: bool = False
) -> tuple[int, dict[bytes, bytes], bytes]:
    """The status, headers and whole body of the handler's answer to a request without a body
    (`more`: one the client has not finished sending)."""
    status, head, messages = _stream(scope, b"", more=more)
    return status, head, b"".join(m.get("body", b"") for m in messages)


def _stream(
    scope: dict[str, Any], body: bytes, *, more: bool = False
) -> tuple[int, dict[bytes, bytes], list[dict[str, Any]]]:
    async def run() -> tuple[int, dict[bytes, bytes], list[dict[str, Any]]]:
        app = ApplicationCommunicator(GatewayHandler(), scope)
        await app.send_input({"type": "http.request", "body": body, "more_body": more})
        start = await app.receive_output(STATE_WAIT_S)
        assert start["type"] == "http.response.start"
        messages = [await app.receive_output(STATE_WAIT_S)]
        while messages[-1].get("more_body"):
            messages.append(await app.receive_output(STATE_WAIT_S))
        await app.wait(STATE_WAIT_S)
        return start["status"], {k.lower(): v for k, v in start["headers"]}, messages

    return async_to_sync(run)()
