"""Requests for an idle deployment: held while it wakes or starts, then served.

The admission's one hook (`admission.replicas_for`) calls `touch` for every request (the last
request time the host worker's idle check reads) and `held` when the name has no running
replica. `held` asks for the wake once (deployments.lifecycle.idle.wake_for_request: only the
first caller of all processes sends it) and waits, bounded by SHARDBOARD_WAKE_HOLD_S, until a
replica runs; the requests of one process share one poll of the database. Past the bound the
request gets a 503 with Retry-After, in OpenAI's error shape. The wait is in the request's
time to first token, which the gateway measures from its arrival.

A request that finds every replica drained because it was going to sleep or scale to zero
(`after_drain`, from the proxy's pick) is held too: it calls the sleep off if it is not yet
under way, else waits for it and wakes the replica again; never a 409 or a 503 for a model that
merely went idle at the wrong moment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from deployments.lifecycle.idle import wake_for_request
from deployments.live.drain import drain_key
from deployments.live.idle import (
    CALL_OFF_SCRIPT,
    LAST_TTL_S,
    TOUCH_EVERY_S,
    going_key,
    last_request_key,
)
from playground.gateway import dbwork
from playground.gateway.access import AccessError
from playground.gateway.limits import _client
from playground.gateway.upstream import Target

logger = logging.getLogger(__name__)

POLL_S = 0.25  # how often the held requests of a process look for a running replica
ASK_AGAIN_S = 1.0
RETRY_AFTER_S = 5
Load = Callable[[], Awaitable[tuple[Target, ...]]]

_touched: dict[str, float] = {}  # name → when this process last wrote its last request time
_polls: dict[str, asyncio.Task[tuple[Target, ...] | None]] = {}


def touch(name: str) -> None:
    """Record a request for `name` (at most once per TOUCH_EVERY_S per process), without
    waiting: the write never delays the request."""
    now_s = time.time()
    if now_s - _touched.get(name, 0.0) < TOUCH_EVERY_S:
        return
    _touched[name] = now_s
    task = asyncio.ensure_future(_client().set(last_request_key(name), repr(now_s), ex=LAST_TTL_S))
    task.add_done_callback(_logged)


def _logged(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and isinstance(task.exception(), RedisError | OSError):
        logger.warning("last request time not recorded: %s", task.exception())


async def held(name: str, refusal: AccessError, load: Load) -> tuple[Target, ...]:
    """The running replicas of `name` once it woke; raises `refusal` when it is not asleep
    (stopped, failed, starting on its own), a 503 when it cannot wake or takes too long."""
    if refusal.status != 409:
        raise refusal
    reason = f"a request for {name} arrived"
    answer = await dbwork.in_thread(partial(wake_for_request, name=name, reason=reason))
    if not answer.asleep:
        raise refusal
    if answer.problem:
        raise AccessError(
            503, "deployment_waking", f"{name} cannot start now: {answer.problem}", RETRY_AFTER_S
        )
    hold_s = float(settings.SHARDBOARD_WAKE_HOLD_S)
    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + hold_s
    while (left_s := deadline_s - loop.time()) > 0:
        poll = _polls.get(name)
        if poll is None or poll.done():
            poll = _polls[name] = asyncio.ensure_future(_poll(name, load, hold_s))
        try:
            found = await asyncio.wait_for(asyncio.shield(poll), timeout=left_s)
        except TimeoutError:
            break
        if not found:
            break  # the wake ended without a running replica (stopped, failed, blocked)
        return found
    raise AccessError(
        503,
        "deployment_waking",
        f"{name} is waking up and was not ready within {hold_s:g} s "
        "(SHARDBOARD_WAKE_HOLD_S); try again shortly",
        RETRY_AFTER_S,
    )


async def _poll(name: str, load: Load, hold_s: float) -> tuple[Target, ...] | None:
    """The running replicas as soon as there are any, or None after `hold_s`. The wake is
    asked for again each ASK_AGAIN_S: a replica that was still stopping to scale to zero when
    the request came is started once it has (asking again changes nothing otherwise: one wake,
    one start, whoever asks)."""
    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + hold_s
    ask_s = loop.time() + ASK_AGAIN_S
    while loop.time() < deadline_s:
        try:
            return await load()
        except AccessError as exc:
            if exc.status != 409:  # stopped or gone meanwhile: no wake is coming
                return None
        if loop.time() >= ask_s:
            reason = f"a request for {name} arrived while it scaled to zero"
            await dbwork.in_thread(partial(wake_for_request, name=name, reason=reason))
            ask_s = loop.time() + ASK_AGAIN_S
        await asyncio.sleep(POLL_S)
    return None


async def after_drain(name: str, replicas: tuple[Target, ...], load: Load) -> tuple[Target, ...]:
    """Every replica of `name` was out of rotation when a request came: if they were going
    idle, the sleep is called off (or, already under way, waited for and woken), and the
    replicas back in rotation are returned; () when none was going idle (a stop's drain: the
    request is refused as before). Bounded by SHARDBOARD_WAKE_HOLD_S."""
    ids = [t.deployment_id for t in replicas]
    try:
        marks = await _call_off(ids)
    except (RedisError, OSError) as exc:
        logger.warning("going-idle marks of %s unknown: %s", name, exc)
        return ()
    if not any(marks):
        return ()
    loop = asyncio.get_running_loop()
    deadline_s = loop.time() + float(settings.SHARDBOARD_WAKE_HOLD_S)
    while loop.time() < deadline_s:
        try:
            found = await load()
        except AccessError as exc:  # asleep or scaling to zero by now: woken or started again
            return await held(name, exc, load)
        if await _in_rotation(found):
            return found
        await asyncio.sleep(POLL_S)
    raise AccessError(
        503,
        "deployment_waking",
        f"{name} was going idle and did not come back within "
        f"{settings.SHARDBOARD_WAKE_HOLD_S:g} s (SHARDBOARD_WAKE_HOLD_S); try again shortly",
        RETRY_AFTER_S,
    )


async def _call_off(ids: list[int]) -> list[str]:
    """Per replica: "off" (its going idle is called off), "committed" (too late: it sleeps or
    stops, then wakes) or "" (not going idle)."""
    keys = [going_key(pk) for pk in ids]
    answer = await _client().eval(CALL_OFF_SCRIPT, len(keys), *keys)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in answer]


async def _in_rotation(replicas: tuple[Target, ...]) -> bool:
    """Some replica is no longer drained (its going idle was called off)."""
    keys = [drain_key(t.deployment_id) for t in replicas]
    return bool(keys) and int(await _client().exists(*keys)) < len(keys)
