"""Follow-ups of a kept response: GET /v1/responses/{id} and POST /v1/responses/{id}/cancel.

vLLM answers them from the engine that made the response
(vllm/entrypoints/openai/responses/api_router.py:80-124): the gateway remembers which replica
that was when it relays the answer (playground.gateway.response_routes) and sends the follow-up
there. One from another caller, or for an id it never relayed, is a 404 (ids are not secrets
to rely on).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from controlpanel.audit import client_ip
from deployments.models import Deployment
from playground import tokens
from playground.gateway import dbwork, ratelimit, rows, sse
from playground.gateway.access import AccessError, authenticate_async, bearer_credential
from playground.gateway.asgi import RelayResponse
from playground.gateway.engine_client import Answer, EngineIOError
from playground.gateway.errors import error_response
from playground.gateway.meters import ResponsesMeter
from playground.gateway.payload import GatewayCall
from playground.gateway.response_routes import ID_PATTERN, replica_of, store
from playground.gateway.rows import Outcome
from playground.gateway.targets import deployments_usable, target_of
from playground.gateway.upstream import Target, UpstreamError, open_get, open_response

if TYPE_CHECKING:
    from playground.gateway.access import Caller
    from playground.gateway.admission import Exchange

FOLLOWUP_ENGINES = frozenset({"vllm"})  # transformers serve and llama-server keep none
_QUERY_KEYS = ("stream", "starting_after")  # vLLM's GET parameters (api_router.py:82-87)
_pending: set[asyncio.Task[None]] = set()


async def remember(exchange: Exchange, meter: sse.StreamMeter) -> None:
    response_id = getattr(meter, "response_id", None)
    if response_id:
        await store(response_id, exchange.target.deployment_id, exchange.caller.user.pk)


def watch(exchange: Exchange, meter: sse.StreamMeter) -> None:
    """Remember a streamed response's id as soon as its first event names it (a cancel may
    come before the stream ends)."""

    def seen(response_id: str) -> None:
        task = asyncio.get_running_loop().create_task(
            store(response_id, exchange.target.deployment_id, exchange.caller.user.pk)
        )
        _pending.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(_pending.discard)

    if isinstance(meter, ResponsesMeter):
        meter.on_id = seen


def _running_target(*, user: Any, replica_id: int) -> Target | None:
    deployment = deployments_usable(user=user).filter(pk=replica_id).first()
    return target_of(deployment) if isinstance(deployment, Deployment) else None


async def follow(request: HttpRequest, response_id: str, *, cancel: bool) -> HttpResponseBase:
    """The answer of the replica that holds `response_id`, relayed; one audit row."""
    started_s = time.perf_counter()
    try:
        caller = await authenticate_async(request)
    except AccessError as exc:
        return error_response(exc.status, exc.kind, exc.message)
    target: Target | None = None
    # A follow-up is a request like any other for the caller's requests-per-minute limits: a
    # client polling a response would otherwise be the one unlimited way into the engines.
    if (rated := await _rate_checked(request, caller)) is not None:
        await _audit(
            request, caller, None, Outcome("rate_limited", 429, error=rated.message), started_s
        )
        return ratelimit.refusal_response(rated)
    try:
        target = await _target(caller, response_id)
        answer = await _ask(request, target, response_id, cancel=cancel)
    except (AccessError, UpstreamError) as exc:
        outcome = Outcome(exc.kind, exc.status, error=exc.message)
        await _audit(request, caller, target, outcome, started_s)
        return error_response(exc.status, exc.kind, exc.message)
    streamed = answer.headers.get("Content-Type", "").startswith("text/event-stream")
    if streamed:
        await _audit(request, caller, target, Outcome("ok", 200), started_s)
        response: HttpResponseBase = RelayResponse(
            _relay(answer), content_type="text/event-stream; charset=utf-8"
        )
        response["Cache-Control"] = "no-cache"
        return response
    try:
        raw = await answer.aread()
    except EngineIOError as exc:
        raw, outcome = b"", Outcome("engine_error", 502, error=str(exc))
    else:
        outcome = Outcome("ok", 200)
    finally:
        await answer.aclose()
    await _audit(request, caller, target, outcome, started_s)
    if outcome.http_status != 200:
        return error_response(502, "engine_error", outcome.error)
    return HttpResponse(raw, status=200, content_type="application/json")


async def _rate_checked(request: HttpRequest, caller: Caller) -> ratelimit.Refusal | None:
    rate_limits = ratelimit.limits_of(caller)
    if not rate_limits.any:
        return None
    credential = bearer_credential(request) if caller.via == "token" else None
    bearer = ratelimit.bearer_id(tokens.token_hash(credential)) if credential else ""
    return await ratelimit.admit(caller.user.pk, bearer, time.time(), rate_limits)


async def _target(caller: Caller, response_id: str) -> Target:
    missing = AccessError(404, "not_found_error", f"no response {response_id[:200]!r} to follow")
    if not ID_PATTERN.fullmatch(response_id):
        raise missing
    replica_id = await replica_of(response_id, caller.user.pk)
    if replica_id is None:
        raise missing
    lookup = functools.partial(_running_target, user=caller.user, replica_id=replica_id)
    target = await dbwork.in_thread(lookup)
    if target is None:
        raise AccessError(
            409, "deployment_not_running", "the replica that holds this response is not running"
        )
    if target.engine not in FOLLOWUP_ENGINES:
        raise AccessError(
            400, "unsupported_endpoint", f"{target.name!r}: its engine keeps no responses"
        )
    return target


async def _ask(request: HttpRequest, target: Target, response_id: str, *, cancel: bool) -> Answer:
    if cancel:
        return await open_response(target, f"/v1/responses/{response_id}/cancel", {})
    query = {k: request.GET[k] for k in _QUERY_KEYS if k in request.GET}
    leaf = response_id + (f"?{urlencode(query)}" if query else "")
    return await open_get(target, "/v1/responses", leaf)


async def _relay(answer: Answer) -> Any:
    try:
        async for chunk in answer:
            yield chunk
    except EngineIOError:
        yield sse.error_frame("the engine's stream broke off", "engine_error", 502)
    finally:
        await answer.aclose()


async def _audit(
    request: HttpRequest, caller: Caller, target: Target | None, outcome: Outcome, started_s: float
) -> None:
    """The follow-up's audit row, committed before the answer (as a refusal's is)."""
    timings = {"duration_ms": round((time.perf_counter() - started_s) * 1000, 2)}
    stream = request.GET.get("stream") == "true"
    call = GatewayCall("responses", target.name if target else "", stream, False, {})

    def build() -> list[Model]:
        row = rows.gateway_audit_row(
            user=caller.user,
            via=caller.via,
            call=call,
            deployment=(target.deployment_id, target.name) if target else None,
            outcome=Outcome(outcome.status, outcome.http_status, timings, outcome.error),
            ip=ip,
        )
        row.detail["follow_up"] = request.path_info.rsplit("/", 1)[-1]  # "cancel" or the id
        return [row]

    ip = client_ip(request)
    await dbwork.wait(dbwork.submit(build, urgent=True))
