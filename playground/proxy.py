"""The gateway: authenticate, resolve the deployment, hold a slot, relay the engine's answer.

Streaming answers are relayed event by event as they arrive (no buffering); a client that goes
away cancels the relay, which closes the engine request. Every request ends in one audit row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from controlpanel.audit import client_ip
from playground import limits, selectors, services, sse
from playground.access import AccessError, Caller, authenticate
from playground.payload import (
    GatewayCall,
    Kind,
    LengthCap,
    PayloadError,
    cap_length,
    engine_body,
    parse_call,
)
from playground.services import Outcome
from playground.upstream import Target, UpstreamError, open_response, transport_error

PLAYGROUND_HEADER = "X-Shardboard-Playground"
T = TypeVar("T")


def stream_max_s() -> float:
    return settings.PLAYGROUND_STREAM_MAX_S


def error_response(status: int, kind: str, message: str) -> JsonResponse:
    response = JsonResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="shardboard"'
    return response


@dataclass(slots=True)
class Exchange:
    """One gateway request on its way through."""

    caller: Caller
    call: GatewayCall
    target: Target
    length: LengthCap
    from_playground: bool
    ip: str | None
    started_s: float


def _admit(request: HttpRequest, kind: Kind, started_s: float) -> Exchange:
    """Everything that needs the database before the engine is called, in one thread hop."""
    caller = authenticate(request)
    try:
        call, length = _capped_call(request.body, kind)
        target = selectors.gateway_target(user=caller.user, name=call.model)
    except AccessError as exc:
        _audit_refusal(caller, request, exc)
        raise
    from_playground = request.headers.get(PLAYGROUND_HEADER) == "1"
    return Exchange(caller, call, target, length, from_playground, client_ip(request), started_s)


def _capped_call(raw: bytes, kind: Kind) -> tuple[GatewayCall, LengthCap]:
    try:
        call = parse_call(raw, kind)
        body, length = cap_length(call, settings.PLAYGROUND_MAX_TOKENS)
    except PayloadError as exc:
        raise AccessError(400, "invalid_request_error", str(exc)) from exc
    return GatewayCall(call.kind, call.model, call.stream, call.wants_usage, body), length


def _audit_refusal(caller: Caller, request: HttpRequest, exc: AccessError) -> None:
    services.gateway_audit(
        user=caller.user,
        via=caller.via,
        call=None,
        deployment=None,
        outcome=Outcome(exc.kind, exc.status, error=exc.message),
        ip=client_ip(request),
    )


async def gateway(request: HttpRequest, kind: Kind) -> HttpResponse:
    started_s = time.perf_counter()
    try:
        exchange = await _in_thread(_admit, request, kind, started_s)
    except AccessError as exc:
        return error_response(exc.status, exc.kind, exc.message)
    slot = await limits.slot_acquire(
        exchange.caller.user.pk, limit=settings.PLAYGROUND_MAX_CONCURRENT, ttl_s=stream_max_s()
    )
    if slot is None:
        return await _refuse_busy(exchange)
    try:
        return await _forward(exchange, slot)
    except BaseException:
        await slot.release()
        raise


async def _refuse_busy(exchange: Exchange) -> HttpResponse:
    limit = settings.PLAYGROUND_MAX_CONCURRENT
    message = f"you already have {limit} playground requests running; wait for one to finish"
    await _finish(exchange, Outcome("rate_limited", 429, error=message))
    response = error_response(429, "rate_limit_exceeded", message)
    response["Retry-After"] = "1"
    return response


async def _forward(exchange: Exchange, slot: limits.Slot) -> HttpResponse:
    body = engine_body(
        exchange.call.body, stream=exchange.call.stream, served_model=exchange.target.served_model
    )
    try:
        upstream = await open_response(exchange.target, exchange.call.path, body)
    except UpstreamError as exc:
        await slot.release()
        await _finish(exchange, Outcome(exc.kind, exc.status, error=exc.message))
        return error_response(exc.status, exc.kind, exc.message)
    if not exchange.call.stream:
        return await _whole(exchange, upstream, slot)
    response = StreamingHttpResponse(
        relay(exchange, upstream, slot), content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _whole(exchange: Exchange, upstream: httpx.Response, slot: limits.Slot) -> HttpResponse:
    try:
        raw = await upstream.aread()
    except httpx.HTTPError as exc:
        error = transport_error(exchange.target, exc)
        await _finish(exchange, Outcome(error.kind, error.status, error=error.message))
        return error_response(error.status, error.kind, error.message)
    finally:
        await upstream.aclose()
        await slot.release()
    meter = sse.StreamMeter(started_s=exchange.started_s)
    payload = sse.parse_payload(raw) or {}
    now_s = time.perf_counter()
    meter.observe(payload, now_s)
    await _finish(exchange, Outcome("ok", 200, meter.timings(now_s), answer=meter.answer))
    return HttpResponse(raw, status=200, content_type="application/json")


async def relay(
    exchange: Exchange, upstream: httpx.Response, slot: limits.Slot
) -> AsyncIterator[bytes]:
    meter = sse.StreamMeter(started_s=exchange.started_s)
    splitter = sse.EventSplitter()
    error: UpstreamError | None = None
    recorded = False
    try:
        async for data in _chunks(upstream):
            out = _pass_events(splitter.feed(data), meter, exchange.call.wants_usage)
            if out:
                yield out
    except (httpx.HTTPError, TimeoutError) as exc:
        error = _relay_error(exchange.target, exc)
    except (asyncio.CancelledError, GeneratorExit):
        recorded = True
        await _stop(upstream, slot)
        await _finish(exchange, _with_meter(Outcome("client_disconnected", 499), meter))
        raise
    finally:
        if not recorded:
            await _stop(upstream, slot)
    outcome = _with_meter(_ended(meter, error), meter)
    run_id = await _finish(exchange, outcome)
    yield _closing(exchange, outcome, error, run_id)


async def _stop(upstream: httpx.Response, slot: limits.Slot) -> None:
    await upstream.aclose()
    await slot.release()


async def _chunks(upstream: httpx.Response) -> AsyncIterator[bytes]:
    """The engine's bytes, bounded by the stream's total time budget."""
    async with asyncio.timeout(stream_max_s()):
        async for data in upstream.aiter_raw():
            yield data


def _pass_events(events: list[bytes], meter: sse.StreamMeter, wants_usage: bool) -> bytes:
    """The events to forward; `[DONE]` is held back and a usage chunk nobody asked for dropped."""
    now_s = time.perf_counter()
    out = []
    for event in events:
        data = sse.event_data(event)
        if data == b"[DONE]":
            continue
        payload = sse.parse_payload(data)
        if payload is not None:
            meter.observe(payload, now_s)
            if not wants_usage and sse.is_usage_only(payload):
                continue
        out.append(event)
    return b"".join(out)


def _ended(meter: sse.StreamMeter, error: UpstreamError | None) -> Outcome:
    if error is not None:
        return Outcome(error.kind, error.status, error=error.message)
    if meter.error:
        return Outcome("engine_error", 502, error=meter.error)
    return Outcome("ok", 200)


def _relay_error(target: Target, exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.HTTPError):
        return transport_error(target, exc)
    limit = stream_max_s()
    return UpstreamError(504, "stream_time_limit", f"the answer took longer than {limit:g} s")


def _closing(
    exchange: Exchange, outcome: Outcome, error: UpstreamError | None, run_id: int | None
) -> bytes:
    frames = [sse.error_frame(error.message, error.kind, error.status)] if error else []
    if exchange.from_playground:
        metrics = {**outcome.timings, "status": outcome.status, "run_id": run_id}
        frames.append(sse.metrics_frame(metrics))
    frames.append(sse.DONE)
    return b"".join(frames)


def _with_meter(outcome: Outcome, meter: sse.StreamMeter) -> Outcome:
    timings = meter.timings(time.perf_counter())
    error = outcome.error or (meter.error or "")
    return Outcome(outcome.status, outcome.http_status, timings, error, meter.answer)


async def _finish(exchange: Exchange, outcome: Outcome) -> int | None:
    return await _in_thread(_record, exchange, outcome)


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Database work off the shared thread-sensitive thread, so that concurrent streams do not
    queue behind each other's audit writes; stale connections of pool threads are dropped the
    way Django drops them between requests."""

    def run() -> T:
        close_old_connections()
        return fn(*args)

    return await sync_to_async(run, thread_sensitive=False)()


def _record(exchange: Exchange, outcome: Outcome) -> int | None:
    """The audit row, and the run when the playground page asked; the run's id."""
    target = exchange.target
    services.gateway_audit(
        user=exchange.caller.user,
        via=exchange.caller.via,
        call=exchange.call,
        deployment=(target.deployment_id, target.name),
        outcome=outcome,
        length=exchange.length,
        ip=exchange.ip,
    )
    if not exchange.from_playground:
        return None
    run = services.run_record(
        user=exchange.caller.user, deployment_name=target.name, call=exchange.call, outcome=outcome
    )
    return run.pk
