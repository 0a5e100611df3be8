"""The gateway: admit the request, hold a slot, relay the engine's answer, record it once.

Streaming answers are relayed event by event as they arrive (no buffering); a client that goes
away cancels the relay, which closes the engine request. Every request ends in one audit row,
written after the answer (never in front of the first token) and never twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from functools import partial

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from playground.gateway import balance, dbwork, followup, limits, ratelimit, routing, sse, wake
from playground.gateway.access import AccessError
from playground.gateway.admission import PLAYGROUND_HEADER, Exchange, admit
from playground.gateway.asgi import RelayResponse
from playground.gateway.engine_client import (
    Answer,
    ConnectError,
    ConnectTimeout,
    EngineIOError,
    ProtocolError,
    ReadError,
    ReadTimeout,
)
from playground.gateway.errors import error_response
from playground.gateway.payload import Kind, engine_body
from playground.gateway.recording import Recorder
from playground.gateway.rows import Outcome
from playground.gateway.targets import gateway_replicas
from playground.gateway.upstream import Target, UpstreamError, open_response, transport_error

__all__ = ["PLAYGROUND_HEADER", "error_response", "gateway"]


def stream_max_s() -> float:
    return settings.PLAYGROUND_STREAM_MAX_S


async def gateway(request: HttpRequest, kind: Kind) -> HttpResponseBase:
    started_s = time.perf_counter()
    try:
        exchange = await admit(request, kind, started_s)
    except AccessError as exc:
        return error_response(exc.status, exc.kind, exc.message, exc.retry_after_s)
    recorder = Recorder(exchange)
    rated, slot = await _admit_in_redis(exchange)
    if rated is not None:
        if slot is not None:
            await slot.release()
        await recorder.record_and_wait(Outcome("rate_limited", 429, error=rated.message))
        return ratelimit.refusal_response(rated)
    if slot is None:
        return await _refuse_busy(recorder, _slots_of(exchange)[1])
    holds = Holds(slot)
    try:
        return await _forward(recorder, holds)
    except asyncio.CancelledError:
        recorder.record(Outcome("client_disconnected", 499))
        await holds.release()
        raise
    except Exception:
        recorder.record(Outcome("proxy_error", 500, error="the gateway failed; see the log"))
        await holds.release()
        raise


async def _admit_in_redis(
    exchange: Exchange,
) -> tuple[ratelimit.Refusal | None, limits.Slot | None]:
    """The rate limits' answer and a concurrency slot: with rate limits on, both asked of Redis
    side by side (one round trip of waiting, not two)."""
    user_id = exchange.caller.user.pk
    key, limit = _slots_of(exchange)
    acquiring = limits.slot_acquire(key, limit=limit, ttl_s=stream_max_s())
    rate_limits = ratelimit.limits_of(exchange.caller)
    if not rate_limits.any:
        return None, await acquiring
    checking = ratelimit.admit(user_id, exchange.bearer_id, time.time(), rate_limits)
    rated, slot = await asyncio.gather(checking, acquiring)
    return rated, slot


def _slots_of(exchange: Exchange) -> tuple[str, int]:
    return limits.concurrency_of(
        user_id=exchange.caller.user.pk,
        bearer_id=exchange.bearer_id,
        token_limit=exchange.caller.max_concurrent,
        default=settings.PLAYGROUND_MAX_CONCURRENT,
        ceiling=settings.PLAYGROUND_TOKEN_MAX_CONCURRENT_CEILING,
    )


async def _refuse_busy(recorder: Recorder, limit: int) -> HttpResponse:
    if recorder.exchange.bearer_id:
        message = f"this API token has {limit} requests running; wait for one to finish"
    else:
        message = f"you already have {limit} playground requests running; wait for one to finish"
    await recorder.record_and_wait(Outcome("rate_limited", 429, error=message))
    response = error_response(429, "rate_limit_exceeded", message)
    response["Retry-After"] = "1"
    return response


class Holds:
    """What a request holds while in flight: the caller's slot and its replica's count."""

    def __init__(self, slot: limits.Slot) -> None:
        self.slot = slot
        self.replica: balance.Lease | None = None

    async def release(self) -> None:
        if self.replica is None:
            await self.slot.release()
        else:
            await balance.release_with_slot(self.replica, self.slot)


def _retriable(exc: UpstreamError) -> bool:
    """The engine refused or dropped the connection before answering: nothing reached the
    client, and another replica may answer. A timeout is not retried (it already waited)."""
    cause = exc.__cause__
    if isinstance(cause, ConnectTimeout | ReadTimeout):
        return False
    return isinstance(cause, ConnectError | ProtocolError | ReadError)


async def _open(recorder: Recorder, holds: Holds) -> Answer:
    """The answer of the replica the balancer picks (prefix affinity within a load bound); a
    replica that refuses or drops the connection leaves the rotation and the request is tried
    once more on another."""
    exchange = recorder.exchange
    prefix = routing.prefix_key(exchange.call.body)
    factor = settings.PLAYGROUND_ROUTING_LOAD_FACTOR
    tried: set[int] = set()
    held = False
    while True:
        left = [t for t in exchange.replicas if t.deployment_id not in tried]
        now_s = asyncio.get_running_loop().time()
        try:
            try:
                lease = await balance.acquire(
                    left, ttl_s=stream_max_s(), now_s=now_s, prefix=prefix, factor=factor
                )
            except balance.NoReplica:
                if tried:
                    raise
                # Every one failed lately: one of them anyway, whose own error the client
                # gets if it still fails (the marks only steer around a dead engine).
                lease = await balance.acquire(
                    left,
                    ttl_s=stream_max_s(),
                    now_s=now_s,
                    skip_down=False,
                    prefix=prefix,
                    factor=factor,
                )
        except balance.NoReplica:
            name = exchange.target.name
            if not tried and not held:  # drained because it was going idle: held, then served
                held = True
                if again := await _after_drain(exchange):
                    exchange.replicas = again
                    continue
            raise UpstreamError(
                503, "engine_unreachable", f"no replica of {name} is reachable right now"
            ) from None
        holds.replica = lease
        exchange.target = lease.target
        body = engine_body(
            exchange.call.body,
            stream=exchange.call.usage_in_stream,
            served_model=lease.target.served_model,
        )
        try:
            return await open_response(lease.target, exchange.call.path, body)
        except UpstreamError as exc:
            await lease.release()
            holds.replica = None
            if not _retriable(exc):
                raise
            await balance.mark_down(lease.target, now_s=asyncio.get_running_loop().time())
            tried.add(lease.target.deployment_id)
            if len(tried) > 1 or len(tried) == len(exchange.replicas):
                raise


async def _after_drain(exchange: Exchange) -> tuple[Target, ...]:
    name = exchange.target.name
    lookup = partial(gateway_replicas, user=exchange.caller.user, name=name)
    try:
        return await wake.after_drain(name, exchange.replicas, lambda: dbwork.in_thread(lookup))
    except AccessError as exc:
        raise UpstreamError(exc.status, exc.kind, exc.message) from None


async def _forward(recorder: Recorder, holds: Holds) -> HttpResponseBase:
    exchange = recorder.exchange
    try:
        upstream = await _open(recorder, holds)
    except UpstreamError as exc:
        await holds.release()
        await recorder.record_and_wait(Outcome(exc.kind, exc.status, error=exc.message))
        return error_response(exc.status, exc.kind, exc.message)
    if not exchange.call.stream:
        return await _whole(recorder, upstream, holds)
    response = RelayResponse(
        relay(recorder, upstream, holds), content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _whole(recorder: Recorder, upstream: Answer, holds: Holds) -> HttpResponse:
    exchange = recorder.exchange
    try:
        raw = await upstream.aread()
    except EngineIOError as exc:
        error = await _engine_failed(exchange.target, exc)
        await recorder.record_and_wait(Outcome(error.kind, error.status, error=error.message))
        return error_response(error.status, error.kind, error.message)
    finally:
        await _stop(upstream, holds)
    meter = exchange.call.protocol.meter(started_s=exchange.started_s)
    now_s = time.perf_counter()
    meter.observe(sse.parse_payload(raw) or {}, now_s)
    if exchange.call.protocol.keeps_responses:  # a GET or cancel of it finds its replica
        await followup.remember(exchange, meter)
    recorder.record(Outcome("ok", 200, meter.timings(now_s), answer=meter.answer))
    return HttpResponse(raw, status=200, content_type="application/json")


async def relay(recorder: Recorder, upstream: Answer, holds: Holds) -> AsyncGenerator[bytes, None]:
    exchange = recorder.exchange
    meter = exchange.call.protocol.meter(started_s=exchange.started_s)
    if exchange.call.protocol.keeps_responses:
        followup.watch(exchange, meter)
    splitter = sse.EventSplitter()
    keep_text = exchange.from_playground  # the page's run keeps the answer; the audit row not
    error: UpstreamError | None = None
    stopped = False
    try:
        try:
            async for data in _chunks(upstream):
                events = splitter.feed(data)
                out = _pass_events(events, meter, exchange.call.wants_usage, keep_text)
                if out:
                    yield out
        except (EngineIOError, TimeoutError) as exc:
            error = await _relay_error(exchange.target, exc)
        await _stop(upstream, holds)  # the slot is free before the client reads [DONE]
        stopped = True
        outcome = _with_meter(_ended(meter, error), meter)
        run_id = None
        if exchange.from_playground:
            run_id = await recorder.record_and_wait(outcome)  # the page links to the run
        else:
            recorder.record(outcome)
        yield _closing(exchange, outcome, error, run_id)
    finally:
        # Cancelled (client gone) or closed early: whatever was not recorded yet, was cut off.
        if not recorder.done:
            recorder.record(_with_meter(Outcome("client_disconnected", 499), meter))
        if not stopped:
            await _stop(upstream, holds)


async def _stop(upstream: Answer, holds: Holds) -> None:
    await upstream.aclose()
    await holds.release()


async def _engine_failed(target: Target, exc: EngineIOError) -> UpstreamError:
    """The error the client gets; an engine that dropped the connection mid-answer (it died)
    leaves the rotation at once, not when the watchdog sees it."""
    if isinstance(exc, ProtocolError | ReadError):
        await balance.mark_down(target, now_s=asyncio.get_running_loop().time())
    return transport_error(target, exc)


async def _chunks(upstream: Answer) -> AsyncIterator[bytes]:
    """The engine's bytes, bounded by the stream's total time budget."""
    async with asyncio.timeout(stream_max_s()):
        async for data in upstream:
            yield data


def _pass_events(
    events: list[bytes], meter: sse.StreamMeter, wants_usage: bool, keep_text: bool
) -> bytes:
    """The events to forward, as the engine wrote them; `[DONE]` is held back and a usage chunk
    nobody asked for dropped. Unless the text is kept, a token after the first is counted, not
    parsed: parsing and reading every event was about a quarter of the relay's own CPU (py-spy)."""
    now_s = time.perf_counter()
    out = []
    for event in events:
        data = sse.event_data(event)
        if data == b"[DONE]":
            continue
        if not keep_text and meter.first_s is not None and not sse.must_read(data):
            meter.count_token(now_s)
            out.append(event)
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


async def _relay_error(target: Target, exc: Exception) -> UpstreamError:
    if isinstance(exc, EngineIOError):
        return await _engine_failed(target, exc)
    limit = stream_max_s()
    return UpstreamError(504, "stream_time_limit", f"the answer took longer than {limit:g} s")


def _closing(
    exchange: Exchange, outcome: Outcome, error: UpstreamError | None, run_id: int | None
) -> bytes:
    protocol = exchange.call.protocol
    frames = [protocol.error_frame(error.message, error.kind, error.status)] if error else []
    if exchange.from_playground:
        metrics = {**outcome.timings, "status": outcome.status, "run_id": run_id}
        frames.append(sse.metrics_frame(metrics))
    frames.append(protocol.stream_end)
    return b"".join(frames)


def _with_meter(outcome: Outcome, meter: sse.StreamMeter) -> Outcome:
    timings = meter.timings(time.perf_counter())
    error = outcome.error or (meter.error or "")
    return Outcome(outcome.status, outcome.http_status, timings, error, meter.answer)
