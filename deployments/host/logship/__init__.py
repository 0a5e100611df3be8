"""Engine output from this host to where any web process can read it (``deployments.live.enginelog``).

`follow` starts shipping an engine's log file (a `Follower` thread per engine) when the engine
is spawned or adopted after a worker restart; `finish` ships the rest when it ended, stops the
thread and saves the last lines, masked, on the row (``Deployment.log_tail``): the tail that
pages show once the deployment has ended, and the text the diagnosis is made from. Secrets
masked: the engine's API key, the launcher's and this host's Hub tokens, and anything shaped
like a token or key (`cleaning.Masker`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path

import redis
from django.conf import settings

from controlpanel import redisconn
from deployments.handoff import sealed
from deployments.host import supervisor as sv
from deployments.host.logship.cleaning import Masker, clean_text
from deployments.host.logship.follower import Follower
from deployments.live import enginelog
from deployments.models import Deployment

log = logging.getLogger(__name__)
STOP_WAIT_S = 5.0

_followers: dict[int, Follower] = {}
_lock = threading.Lock()


def masker_for(d: Deployment) -> Masker:
    hub_token = sealed.unseal(d.hub_token_sealed, deployment_id=d.pk)
    return Masker([d.engine_api_key(), hub_token, settings.HF_TOKEN])


@cache
def _shipping_client(url: str) -> redis.Redis:
    """Fails fast: redis-py's default retries take seconds, and a line that cannot be shipped
    now is dropped anyway (the host's file keeps it); the next pass tries again."""
    return redisconn.client(url=url, connect_timeout_s=1, timeout_s=5, one_try=True)


def follow(
    d: Deployment,
    log_path: Path,
    *,
    first: bool = False,
    resume: bool = False,
    on_lines: Callable[[list[str]], None] | None = None,
) -> Follower:
    """Ship `log_path` from its start, or (`resume`) from where an earlier worker stopped.

    A `first` engine of a deployment starts a new stream: one left under the same id by an
    earlier database (ids start again when it is created anew) is not this deployment's.
    """
    client = _shipping_client(settings.REDIS_URL)
    start = _saved_offset(client, d.pk, log_path) if resume else 0
    try:
        if first:
            client.delete(enginelog.stream_key(d.pk), enginelog.position_key(d.pk))
        else:
            client.persist(enginelog.stream_key(d.pk))  # a restart after the last run ended
    except redis.RedisError as exc:
        log.warning("engine log of deployment %s: Redis unreachable (%s)", d.pk, exc)
    follower = Follower(
        pk=d.pk,
        path=log_path,
        mask=masker_for(d),
        client=client,
        channel=enginelog.channel(d.pk),
        start_offset=start,
        on_lines=on_lines,
    )
    with _lock:
        previous = _followers.pop(d.pk, None)
        _followers[d.pk] = follower
    if previous is not None:
        previous.stop(STOP_WAIT_S)
    return follower.start()


def finish(d: Deployment, log_path: Path | None) -> str:
    """The engine of `d` ended: ship the rest, save the masked tail on the row, return it."""
    with _lock:
        follower = _followers.pop(d.pk, None)
    mask = follower.mask if follower is not None else masker_for(d)
    if follower is not None and not follower.stop(STOP_WAIT_S):
        log.warning("engine log of deployment %s: the shipper did not finish in time", d.pk)
    text = clean_text(sv.tail(log_path, enginelog.TAIL_LINES), mask) if log_path else ""
    Deployment.objects.filter(pk=d.pk).update(log_tail=text)
    d.log_tail = text
    _expire(d.pk)
    return text


def catch_up(pk: int, timeout_s: float = 2.0) -> bool:
    """Every line the engine of `pk` wrote so far has been read (`Follower.catch_up`)."""
    with _lock:
        follower = _followers.get(pk)
    return follower.catch_up(timeout_s) if follower is not None else False


def stop_all() -> None:
    """The worker is shutting down: ship what the engines wrote last (they run on)."""
    with _lock:
        followers = list(_followers.values())
        _followers.clear()
    for follower in followers:
        follower.stop(STOP_WAIT_S)


def following(pk: int) -> bool:
    with _lock:
        return pk in _followers


def _saved_offset(client: redis.Redis, pk: int, log_path: Path) -> int:
    try:
        saved: dict[bytes, bytes] = client.hgetall(enginelog.position_key(pk))  # type: ignore[assignment]  # sync client: a dict, not an awaitable
    except redis.RedisError:
        return 0
    if saved.get(b"path", b"") != str(log_path).encode():
        return 0
    return int(saved.get(b"offset", b"0"))


def _expire(pk: int) -> None:
    try:
        pipe = _shipping_client(settings.REDIS_URL).pipeline(transaction=False)
        pipe.expire(enginelog.stream_key(pk), enginelog.ENDED_TTL_S)
        pipe.expire(enginelog.position_key(pk), enginelog.ENDED_TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("engine log of deployment %s: could not set its expiry (%s)", pk, exc)
